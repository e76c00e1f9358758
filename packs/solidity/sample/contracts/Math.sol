// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

library Math {
    function double(uint256 x) internal pure returns (uint256) {
        return x * 2;
    }
}
