// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import "./Math.sol";

contract Counter {
    uint256 public count;

    function bump() external {
        count = Math.double(count);
    }
}
