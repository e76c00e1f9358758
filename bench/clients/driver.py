"""The Python side of bench/clients.ts: one blocking client, as most agent platforms use.

Usage: python driver.py <address> <token> <run_id> <rounds> <warm-up rounds>
Prints one JSON object: each contender's samples in milliseconds (the contenders and calls
of bench/clients/shape.ts, in its order).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Callable, Mapping

import grpc
from tether_client import Client
from tether_client._common import CHANNEL_OPTIONS

READ = {"path": "bench.txt"}
HOVER = {"action": "hover", "file": "src/main.ts", "line": 3, "symbol": "Circle"}


def main() -> None:
    address, token, run_id, rounds, warm = sys.argv[1:6]
    channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    # Both call shapes on one connection, as the health check is.
    shared = Client(address, token, channel=channel)
    own = Client(address, token, channel=channel, multiplex=False)

    def call(client: Client, tool: str, args: Mapping[str, object]) -> Callable[[], None]:
        def go() -> None:
            out = client.call_tool(run_id, tool, args)
            if out.is_error:
                raise RuntimeError(f"{tool}: {out.text}")

        return go

    contenders: dict[str, Callable[[], object]] = {
        "health": shared.health,
        "readCalls": call(shared, "read", READ),
        "readCallTool": call(own, "read", READ),
        "hoverCalls": call(shared, "lsp", HOVER),
        "hoverCallTool": call(own, "lsp", HOVER),
    }
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    for i in range(-int(warm), int(rounds)):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            if i >= 0:
                samples[name].append((time.perf_counter() - t0) * 1000)
    shared.close()
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
