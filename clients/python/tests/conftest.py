from __future__ import annotations

import os
from typing import Dict, Iterator

import pytest

from tether_client import Client


def gateway_env() -> Dict[str, str]:
    """The live gateway the test command started (address and two tenants' tokens)."""
    address = os.environ.get("TETHER_ADDRESS")
    if not address:
        pytest.skip("TETHER_ADDRESS is not set: these tests need a live gateway (scripts/clients-test.sh starts one)")
    return {"address": address, "A": os.environ["TETHER_TOKEN_A"], "B": os.environ["TETHER_TOKEN_B"]}


@pytest.fixture
def gateway() -> Dict[str, str]:
    return gateway_env()


@pytest.fixture
def client(gateway: Dict[str, str]) -> Iterator[Client]:
    with Client(gateway["address"], gateway["A"]) as c:
        yield c
