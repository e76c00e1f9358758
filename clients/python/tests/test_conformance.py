"""The shared conformance suite, run with Client and with AsyncClient, each with tool calls on
the shared Calls stream ("mux") and on one CallTool stream per call ("percall")."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import pytest

from conformance import load_scenarios, multiplex_modes, run_scenario

SCENARIOS = load_scenarios()
MODES = multiplex_modes()


@pytest.mark.parametrize("multiplex", MODES, ids=["mux" if m else "percall" for m in MODES])
@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(scenario: Dict[str, Any], driver: str, multiplex: bool, gateway: Dict[str, str]) -> None:
    asyncio.run(run_scenario(scenario, driver, gateway["address"], {"A": gateway["A"], "B": gateway["B"]}, multiplex))
