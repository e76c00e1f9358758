"""The shared conformance suite, run once with Client and once with AsyncClient."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import pytest

from conformance import load_scenarios, run_scenario

SCENARIOS = load_scenarios()


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(scenario: Dict[str, Any], driver: str, gateway: Dict[str, str]) -> None:
    asyncio.run(run_scenario(scenario, driver, gateway["address"], {"A": gateway["A"], "B": gateway["B"]}))
