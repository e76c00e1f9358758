"""The client surface beyond the conformance suite, against the live gateway."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Tuple

import grpc
import grpc.aio
import pytest

from tether_client import AsyncClient, CallOutcome, Client, InvalidArgumentError, NotFoundError, TetherError, UnauthenticatedError, pb, text_result

MAIN = {"mode": "SURFACE_MODE_DEFAULT", "agent": "AGENT_KIND_MAIN"}
PLAN = pb.Surface(mode=pb.SURFACE_MODE_PLAN, agent=pb.AGENT_KIND_MAIN)


def test_a_call_without_a_token_is_unauthenticated(gateway: Dict[str, str]) -> None:
    with Client(gateway["address"], "") as anonymous, pytest.raises(UnauthenticatedError) as err:
        anonymous.list_runs()
    assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert isinstance(err.value, TetherError)


def test_health_needs_no_token_and_rides_the_clients_channel(gateway: Dict[str, str]) -> None:
    with Client(gateway["address"], "") as anonymous:
        assert anonymous.health() == "SERVING"
        assert anonymous.health("") == "SERVING"
        with pytest.raises(NotFoundError):
            anonymous.health("no.such.Service")

    async def check() -> str:
        async with AsyncClient(gateway["address"], "") as tether:
            return await tether.health()

    assert asyncio.run(check()) == "SERVING"


def test_tools_on_two_surfaces_and_their_schemas(client: Client) -> None:
    run = client.create_run(conversation_id="py-tools", labels={"suite": "python"})
    try:
        assert run.state == pb.RUN_STATE_READY, run.error
        assert dict(run.labels) == {"suite": "python"}
        tools = client.list_tools(run.run_id, MAIN)
        plan = client.list_tools(run.run_id, PLAN)
        assert {"read", "write"} <= {t.name for t in tools}
        assert plan and all(t.tier == pb.TIER_READ for t in plan)
        assert "write" not in {t.name for t in plan}
        schema = json.loads(next(t for t in tools if t.name == "read").input_schema_json)
        assert schema["required"] == ["path"]
    finally:
        client.delete_run(run.run_id)


def test_folders_in_and_out_and_structured_results(client: Client, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (src / "README.md").write_text("# project\n")
    run = client.create_run()
    try:
        written = client.put_files(run.run_id, src, "project")
        assert written.files_written == 2
        out = client.call_tool(run.run_id, "read", {"path": "project/pkg/mod.py"}, surface=MAIN)
        assert not out.is_error, out.text
        assert out.structured["content"] == "VALUE = 1\n"
        dest = tmp_path / "back"
        files = client.get_files_into(run.run_id, dest, "project")
        assert sorted(files) == ["project/README.md", "project/pkg/mod.py"]
        assert (dest / "project" / "pkg" / "mod.py").read_text() == "VALUE = 1\n"
        # One file comes back under its own name, a folder under its workspace path.
        assert client.get_files(run.run_id, "project/README.md") == {"README.md": b"# project\n"}
        escaping = client.call_tool(run.run_id, "read", {"path": "../../etc/passwd"})
        assert escaping.is_error
        with pytest.raises(InvalidArgumentError):
            client.put_files(run.run_id, {"x.txt": "x"}, "../outside")
    finally:
        client.delete_run(run.run_id)
    with pytest.raises(NotFoundError):
        client.get_run(run.run_id)


def test_asyncio_client_bridges_a_call_and_abandons_a_cancelled_task(gateway: Dict[str, str]) -> None:
    async def main() -> None:
        async with AsyncClient(gateway["address"], gateway["A"]) as tether:
            run = await tether.create_run(features={"eval": True})
            try:

                async def lookup(call: pb.BridgeCall) -> pb.ToolResult:
                    await asyncio.sleep(0.05)
                    return text_result(f"looked up {json.loads(call.arguments_json)['q']}")

                out = await tether.call_tool(
                    run.run_id,
                    "eval",
                    {"code": 'print(tool("lookup", {"q": "owls"}))', "description": "ask the client to look something up"},
                    on_bridge_call=lookup,
                )
                assert not out.is_error, out.text
                assert "looked up owls" in out.text
                assert [b.tool for b in out.bridge_calls] == ["lookup"]

                task = asyncio.ensure_future(
                    tether.call_tool(run.run_id, "eval", {"code": "import time\ntime.sleep(60)", "description": "a long sleep to be abandoned"})
                )
                await asyncio.sleep(1.0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                after = await tether.call_tool(run.run_id, "eval", {"code": "print(6 * 7)", "description": "the run still answers after that"})
                assert "42" in after.text
            finally:
                await tether.delete_run(run.run_id)

    asyncio.run(main())


def test_egress_log_of_a_run_without_egress(client: Client) -> None:
    run = client.create_run(conversation_id="py-egress")
    try:
        assert list(client.egress_log(run.run_id)) == []
        page = client.get_egress_log(run.run_id, page_size=10)
        assert list(page.records) == [] and page.next_page_token == ""
        with pytest.raises(TetherError) as err:
            client.get_egress_log("", page_token="not-a-token")
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        client.delete_run(run.run_id)


def concurrent_calls(n: int) -> Tuple[Dict[str, str], List[Tuple[str, Dict[str, Any]]]]:
    """``n`` files, and a read of each plus three eval cells that each ask the client a question
    of their own: every call must get its own result (a crossed stream would swap them)."""
    files = {f"f{i}.txt": f"content {i}\n" for i in range(n)}
    calls: List[Tuple[str, Dict[str, Any]]] = [("read", {"path": name}) for name in files]
    calls += [("eval", {"code": f'print("got:", tool("lookup", {{"q": {i}}}))', "description": f"ask the client for answer {i}"}) for i in range(3)]
    return files, calls


def check_concurrent(files: Dict[str, str], outs: List[CallOutcome]) -> None:
    contents = list(files.values())
    for i, out in enumerate(outs[: len(contents)]):
        assert not out.is_error and out.structured["content"] == contents[i], out.text
    for i, out in enumerate(outs[len(contents) :]):
        assert not out.is_error and f"got: answer {i}" in out.text, out.text
        assert [json.loads(b.arguments_json) for b in out.bridge_calls] == [{"q": i}]


def lookup(call: pb.BridgeCall) -> pb.ToolResult:
    return text_result(f"answer {json.loads(call.arguments_json)['q']}")


class StreamCounter(grpc.StreamStreamClientInterceptor):
    """Counts the streaming RPCs a client opens, by method: what went over the wire."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def count(self, details: Any) -> None:
        method = details.method
        self.counts[method.decode() if isinstance(method, bytes) else method] += 1

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        self.count(client_call_details)
        return continuation(client_call_details, request_iterator)


class AsyncStreamCounter(grpc.aio.StreamStreamClientInterceptor):
    def __init__(self) -> None:
        self.sync = StreamCounter()
        self.counts = self.sync.counts

    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        self.sync.count(client_call_details)
        return await continuation(client_call_details, request_iterator)


def expected_streams(multiplex: bool, calls: int) -> Dict[str, int]:
    return {"/tether.v1.Gateway/Calls": 1} if multiplex else {"/tether.v1.Gateway/CallTool": calls}


@pytest.mark.parametrize("multiplex", [True, False], ids=["mux", "percall"])
def test_many_concurrent_calls_on_one_client_from_threads(gateway: Dict[str, str], multiplex: bool) -> None:
    counter = StreamCounter()
    channel = grpc.intercept_channel(grpc.insecure_channel(gateway["address"]), counter)
    with Client(gateway["address"], gateway["A"], channel=channel, multiplex=multiplex) as c:
        run = c.create_run(features={"eval": True})
        try:
            files, calls = concurrent_calls(32)
            c.put_files(run.run_id, files)
            with ThreadPoolExecutor(len(calls)) as pool:
                outs = list(pool.map(lambda call: c.call_tool(run.run_id, call[0], call[1], on_bridge_call=lookup, timeout=60), calls))
            check_concurrent(files, outs)
        finally:
            c.delete_run(run.run_id)
    assert dict(counter.counts) == expected_streams(multiplex, len(calls))


@pytest.mark.parametrize("multiplex", [True, False], ids=["mux", "percall"])
def test_many_concurrent_calls_on_one_asyncio_client(gateway: Dict[str, str], multiplex: bool) -> None:
    counter = AsyncStreamCounter()

    async def main() -> int:
        channel = grpc.aio.insecure_channel(gateway["address"], interceptors=[counter])
        async with AsyncClient(gateway["address"], gateway["A"], channel=channel, multiplex=multiplex) as c:
            run = await c.create_run(features={"eval": True})
            try:
                files, calls = concurrent_calls(32)
                await c.put_files(run.run_id, files)
                outs = await asyncio.gather(*(c.call_tool(run.run_id, tool, args, on_bridge_call=lookup, timeout=60) for tool, args in calls))
                check_concurrent(files, list(outs))
                return len(calls)
            finally:
                await c.delete_run(run.run_id)

    n = asyncio.run(main())
    assert dict(counter.counts) == expected_streams(multiplex, n)
