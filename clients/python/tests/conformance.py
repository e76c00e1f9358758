"""Runs clients/conformance/scenarios.json with tether_client's public API.

One runner for both clients: the scenario logic is written once against ``Driver``; the
sync driver calls ``Client`` on a worker thread, the async driver awaits ``AsyncClient``.
Each runs in both call modes: tool calls multiplexed on one Calls stream (the default) and one
CallTool stream per call (``multiplex=False``); TETHER_CONFORMANCE_MULTIPLEX=1 or 0 picks one.
The step language is described in clients/conformance/README.md.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine, Dict, List, Optional, Protocol, Tuple

import grpc
from google.protobuf import json_format

from tether_client import AsyncClient, CallOutcome, CancelToken, Client, TetherError, pb

REPO_ROOT = Path(__file__).resolve().parents[3]


def scenarios_file() -> Path:
    return Path(os.environ.get("TETHER_CONFORMANCE_FILE") or REPO_ROOT / "clients" / "conformance" / "scenarios.json")


def load_scenarios() -> List[Dict[str, Any]]:
    suite = json.loads(scenarios_file().read_text())
    if suite.get("suite") != "tether-client-conformance":
        raise ValueError(f"{scenarios_file()} is not a tether conformance suite")
    only = os.environ.get("TETHER_CONFORMANCE_ONLY", "")
    return [s for s in suite["scenarios"] if only in s["name"]]


def multiplex_modes() -> List[bool]:
    """The call modes to run: TETHER_CONFORMANCE_MULTIPLEX=1 (Calls) or 0 (CallTool); both when unset."""
    choice = os.environ.get("TETHER_CONFORMANCE_MULTIPLEX", "")
    if choice not in ("", "0", "1"):
        raise ValueError(f"TETHER_CONFORMANCE_MULTIPLEX must be 0 or 1, not {choice!r}")
    return [True, False] if choice == "" else [choice == "1"]


class StepFailed(AssertionError):
    pass


class Driver(Protocol):
    """One tenant's view of the gateway through one of the two clients."""

    async def create_run(self, request: pb.CreateRunRequest, deadline: float) -> pb.Run: ...
    async def get_run(self, run_id: str, deadline: float) -> pb.Run: ...
    async def pause_run(self, run_id: str, deadline: float) -> pb.Run: ...
    async def resume_run(self, run_id: str, deadline: float) -> pb.Run: ...
    async def fork_run(self, run_id: str, count: int, deadline: float) -> List[pb.Run]: ...
    async def list_runs(self, deadline: float) -> List[pb.Run]: ...
    async def delete_run(self, run_id: str, deadline: float) -> None: ...
    async def list_tools(self, run_id: str, surface: Optional[pb.Surface], deadline: float) -> List[pb.Tool]: ...
    async def put_files(self, run_id: str, files: Dict[str, str], path: str, deadline: float) -> pb.PutFilesResponse: ...
    async def get_tar(self, run_id: str, path: str, deadline: float) -> bytes: ...
    async def call_tool(self, run_id: str, tool: str, kwargs: Dict[str, Any]) -> CallOutcome: ...
    async def close(self) -> None: ...


class SyncDriver:
    def __init__(self, address: str, token: str, multiplex: bool) -> None:
        self.c = Client(address, token, multiplex=multiplex)

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def create_run(self, request: pb.CreateRunRequest, deadline: float) -> pb.Run:
        return await self._run(self.c.create_run, request, timeout=deadline)

    async def get_run(self, run_id: str, deadline: float) -> pb.Run:
        return await self._run(self.c.get_run, run_id, timeout=deadline)

    async def pause_run(self, run_id: str, deadline: float) -> pb.Run:
        return await self._run(self.c.pause_run, run_id, timeout=deadline)

    async def resume_run(self, run_id: str, deadline: float) -> pb.Run:
        return await self._run(self.c.resume_run, run_id, timeout=deadline)

    async def fork_run(self, run_id: str, count: int, deadline: float) -> List[pb.Run]:
        return await self._run(self.c.fork_run, run_id, count, timeout=deadline)

    async def list_runs(self, deadline: float) -> List[pb.Run]:
        return await self._run(self.c.list_runs, timeout=deadline)

    async def delete_run(self, run_id: str, deadline: float) -> None:
        await self._run(self.c.delete_run, run_id, timeout=deadline)

    async def list_tools(self, run_id: str, surface: Optional[pb.Surface], deadline: float) -> List[pb.Tool]:
        return await self._run(self.c.list_tools, run_id, surface, timeout=deadline)

    async def put_files(self, run_id: str, files: Dict[str, str], path: str, deadline: float) -> pb.PutFilesResponse:
        return await self._run(self.c.put_files, run_id, files, path, timeout=deadline)

    async def get_tar(self, run_id: str, path: str, deadline: float) -> bytes:
        return await self._run(self.c.get_tar, run_id, path, timeout=deadline)

    async def call_tool(self, run_id: str, tool: str, kwargs: Dict[str, Any]) -> CallOutcome:
        return await self._run(self.c.call_tool, run_id, tool, **kwargs)

    async def close(self) -> None:
        self.c.close()


class AsyncDriver:
    def __init__(self, address: str, token: str, multiplex: bool) -> None:
        self.c = AsyncClient(address, token, multiplex=multiplex)

    async def create_run(self, request: pb.CreateRunRequest, deadline: float) -> pb.Run:
        return await self.c.create_run(request, timeout=deadline)

    async def get_run(self, run_id: str, deadline: float) -> pb.Run:
        return await self.c.get_run(run_id, timeout=deadline)

    async def pause_run(self, run_id: str, deadline: float) -> pb.Run:
        return await self.c.pause_run(run_id, timeout=deadline)

    async def resume_run(self, run_id: str, deadline: float) -> pb.Run:
        return await self.c.resume_run(run_id, timeout=deadline)

    async def fork_run(self, run_id: str, count: int, deadline: float) -> List[pb.Run]:
        return await self.c.fork_run(run_id, count, timeout=deadline)

    async def list_runs(self, deadline: float) -> List[pb.Run]:
        return await self.c.list_runs(timeout=deadline)

    async def delete_run(self, run_id: str, deadline: float) -> None:
        await self.c.delete_run(run_id, timeout=deadline)

    async def list_tools(self, run_id: str, surface: Optional[pb.Surface], deadline: float) -> List[pb.Tool]:
        return await self.c.list_tools(run_id, surface, timeout=deadline)

    async def put_files(self, run_id: str, files: Dict[str, str], path: str, deadline: float) -> pb.PutFilesResponse:
        return await self.c.put_files(run_id, files, path, timeout=deadline)

    async def get_tar(self, run_id: str, path: str, deadline: float) -> bytes:
        return await self.c.get_tar(run_id, path, timeout=deadline)

    async def call_tool(self, run_id: str, tool: str, kwargs: Dict[str, Any]) -> CallOutcome:
        return await self.c.call_tool(run_id, tool, **kwargs)

    async def close(self) -> None:
        await self.c.close()


DRIVERS: Dict[str, Callable[[str, str, bool], Driver]] = {"sync": SyncDriver, "async": AsyncDriver}


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: same types (a bool is not a number), same keys, same order in arrays."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def entry_name(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


def check(cond: bool, why: str) -> None:
    if not cond:
        raise StepFailed(why)


@dataclass
class Scenario:
    address: str
    tokens: Dict[str, str]
    make: Callable[[str, str, bool], Driver]
    multiplex: bool
    token: str = ""
    vars: Dict[str, str] = field(default_factory=dict)
    owners: Dict[str, str] = field(default_factory=dict)
    drivers: Dict[str, Driver] = field(default_factory=dict)

    def driver(self, token: Optional[str] = None) -> Driver:
        t = self.token if token is None else token
        if t not in self.drivers:
            self.drivers[t] = self.make(self.address, t, self.multiplex)
        return self.drivers[t]

    def substitute(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("$") and value[1:].isidentifier():
            if value[1:] not in self.vars:
                raise StepFailed(f"unbound variable {value}")
            return self.vars[value[1:]]
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        return value

    async def run(self, scenario: Dict[str, Any]) -> None:
        self.token = self.tokens["A"]
        try:
            for i, raw in enumerate(scenario["steps"]):
                try:
                    await self.step(self.substitute(raw))
                except StepFailed as e:
                    raise StepFailed(f"step {i} ({raw['op']}): {e}") from None
        finally:
            await self.cleanup()

    async def cleanup(self) -> None:
        for name, run_id in self.vars.items():
            try:
                await self.driver(self.owners[name]).delete_run(run_id, 30)
            except TetherError as e:
                if e.code != grpc.StatusCode.NOT_FOUND:
                    raise
        for d in self.drivers.values():
            await d.close()

    async def step(self, step: Dict[str, Any]) -> None:
        op = step["op"]
        if op == "useToken":
            self.token = self.tokens[step["token"]] if "token" in step else step["literal"]
            return
        expect: Dict[str, Any] = step.get("expect", {})
        status = expect.get("status", "OK")
        deadline = step.get("deadlineMs", 60000) / 1000
        try:
            value = await self.perform(op, step, deadline)
        except TetherError as e:
            check(status != "OK", f"expected OK, got {e.code.name}: {e.details}")
            check(e.code.name == status, f"expected {status}, got {e.code.name}: {e.details}")
            if "detailsContains" in expect:
                check(expect["detailsContains"] in e.details, f"status message {e.details!r} lacks {expect['detailsContains']!r}")
            return
        check(status == "OK", f"expected {status}, the call succeeded")
        if op == "createRun" and "as" in step:
            self.vars[step["as"]] = value.run_id
            self.owners[step["as"]] = self.token
        self.verify(op, value, expect)

    async def perform(self, op: str, step: Dict[str, Any], deadline: float) -> Any:
        d = self.driver()
        if op == "createRun":
            return await d.create_run(json_format.ParseDict(step.get("request", {}), pb.CreateRunRequest()), deadline)
        if op == "getRun":
            return await d.get_run(step["run"], deadline)
        if op == "pauseRun":
            return await d.pause_run(step["run"], deadline)
        if op == "resumeRun":
            return await d.resume_run(step["run"], deadline)
        if op == "forkRun":
            return await d.fork_run(step["run"], step.get("count", 1), deadline)
        if op == "listRuns":
            return await d.list_runs(deadline)
        if op == "deleteRun":
            return await d.delete_run(step["run"], deadline)
        if op == "listTools":
            surface = json_format.ParseDict(step["surface"], pb.Surface()) if "surface" in step else None
            return await d.list_tools(step["run"], surface, deadline)
        if op == "putFiles":
            return await d.put_files(step["run"], step["files"], step.get("path", ""), deadline)
        if op == "getFiles":
            return await d.get_tar(step["run"], step.get("path", ""), deadline)
        if op == "callTool":
            return await self.call_tool(d, step, deadline)
        raise StepFailed(f"unknown op {op!r}")

    async def call_tool(self, d: Driver, step: Dict[str, Any], deadline: float) -> CallOutcome:
        token = CancelToken()
        problems: List[str] = []
        answers: Optional[List[Dict[str, Any]]] = step.get("answers")
        bridge: Optional[List[Dict[str, Any]]] = step.get("bridge")
        seen = {"questions": 0, "bridge": 0}
        lock = threading.Lock()

        def on_question(q: pb.Question) -> Optional[pb.Answer]:
            assert answers is not None
            with lock:
                n = seen["questions"]
                seen["questions"] += 1
            if n >= len(answers):
                problems.append(f"card {n + 1} ({q.question!r}) beyond the {len(answers)} answers")
                token.cancel("unexpected question card")
                return None
            entry = answers[n]
            if "cancel" in entry:
                token.cancel(entry["cancel"])
                return None
            return json_format.ParseDict(entry, pb.Answer())

        def on_bridge_call(b: pb.BridgeCall) -> pb.ToolResult:
            assert bridge is not None
            with lock:
                n = seen["bridge"]
                seen["bridge"] += 1
            if n >= len(bridge):
                problems.append(f"bridged call {n + 1} ({b.tool}) beyond the {len(bridge)} results")
                token.cancel("unexpected bridged call")
                return pb.ToolResult(content=[pb.Content(text="unexpected bridged call")], is_error=True)
            return json_format.ParseDict(bridge[n]["result"], pb.ToolResult())

        kwargs: Dict[str, Any] = {"cancel": token, "timeout": deadline}
        if "argumentsJson" in step:
            kwargs["arguments_json"] = step["argumentsJson"]
        else:
            kwargs["arguments"] = step.get("arguments")
        if "surface" in step:
            kwargs["surface"] = json_format.ParseDict(step["surface"], pb.Surface())
        if answers is not None:
            kwargs["on_question"] = on_question
        if bridge is not None:
            kwargs["on_bridge_call"] = on_bridge_call
        timer: Optional[asyncio.TimerHandle] = None
        if "cancelAfterMs" in step:
            reason = step.get("cancelReason", "cancelled")
            timer = asyncio.get_running_loop().call_later(step["cancelAfterMs"] / 1000, token.cancel, reason)
        try:
            outcome = await d.call_tool(step["run"], step["tool"], kwargs)
        finally:
            if timer:
                timer.cancel()
        check(not problems, "; ".join(problems))
        return outcome

    def verify(self, op: str, value: Any, expect: Dict[str, Any]) -> None:
        if op in ("createRun", "getRun", "pauseRun", "resumeRun"):
            run: pb.Run = value
            if "state" in expect:
                got = pb.RunState.Name(run.state)
                check(got == expect["state"], f"state {got}, expected {expect['state']} (error: {run.error!r})")
            if "errorContains" in expect:
                check(expect["errorContains"] in run.error, f"run error {run.error!r} lacks {expect['errorContains']!r}")
        elif op in ("listRuns", "listTools"):
            names = [r.run_id for r in value] if op == "listRuns" else [t.name for t in value]
            for n in expect.get("includes", []):
                check(n in names, f"{n} missing from {names}")
            for n in expect.get("excludes", []):
                check(n not in names, f"{n} present in {names}")
        elif op == "putFiles":
            if "filesWritten" in expect:
                check(value.files_written == expect["filesWritten"], f"files_written {value.files_written}, expected {expect['filesWritten']}")
        elif op == "getFiles":
            files, names = read_tar(value)
            for path, content in expect.get("files", {}).items():
                check(path in files, f"{path} is not a regular file in the tar ({sorted(names)})")
                check(files[path] == content.encode(), f"{path} holds {files[path]!r}, expected {content!r}")
            for path in expect.get("absent", []):
                check(path not in names, f"{path} is in the tar")
        elif op == "callTool":
            verify_outcome(value, expect)


def read_tar(tar: bytes) -> Tuple[Dict[str, bytes], set]:
    files: Dict[str, bytes] = {}
    names = set()
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:*") as archive:
        for m in archive:
            name = entry_name(m.name)
            names.add(name)
            if m.isfile():
                f = archive.extractfile(m)
                files[name] = f.read() if f else b""
    return files, names


def verify_outcome(out: CallOutcome, expect: Dict[str, Any]) -> None:
    text = out.text
    if "isError" in expect:
        check(out.is_error == expect["isError"], f"is_error {out.is_error}, expected {expect['isError']}; text: {text!r}")
    if "textEquals" in expect:
        check(text == expect["textEquals"], f"text {text!r}, expected {expect['textEquals']!r}")
    for s in expect.get("textContains", []):
        check(s in text, f"text {text!r} lacks {s!r}")
    if "structured" in expect:
        got = json.loads(out.result.structured_json) if out.result.structured_json else None
        check(json_equal(got, expect["structured"]), f"structured {got!r}, expected {expect['structured']!r}")
    if "questions" in expect:
        want = expect["questions"]
        check(len(out.questions) == len(want), f"{len(out.questions)} cards, expected {len(want)}: {[q.question for q in out.questions]}")
        for i, (q, w) in enumerate(zip(out.questions, want)):
            where = f"card {i + 1}"
            if "kind" in w:
                check(pb.QuestionKind.Name(q.kind) == w["kind"], f"{where}: kind {pb.QuestionKind.Name(q.kind)}, expected {w['kind']}")
            if "questionContains" in w:
                check(w["questionContains"] in q.question, f"{where}: question {q.question!r} lacks {w['questionContains']!r}")
            if "targetSpace" in w:
                check(q.target_space == w["targetSpace"], f"{where}: target_space {q.target_space!r}")
            if "options" in w:
                labels = [o.label for o in q.options]
                check(labels == w["options"], f"{where}: options {labels}, expected {w['options']}")
            if "rejectedReason" in w:
                check(q.rejected_reason == w["rejectedReason"], f"{where}: rejected_reason {q.rejected_reason!r}")
            if "rejectedReasonContains" in w:
                check(w["rejectedReasonContains"] in q.rejected_reason, f"{where}: rejected_reason {q.rejected_reason!r} lacks {w['rejectedReasonContains']!r}")
    if "bridgeCalls" in expect:
        want = expect["bridgeCalls"]
        check(len(out.bridge_calls) == len(want), f"{len(out.bridge_calls)} bridged calls, expected {len(want)}")
        for i, (b, w) in enumerate(zip(out.bridge_calls, want)):
            if "tool" in w:
                check(b.tool == w["tool"], f"bridged call {i + 1}: tool {b.tool!r}, expected {w['tool']!r}")
            if "arguments" in w:
                got = json.loads(b.arguments_json)
                check(json_equal(got, w["arguments"]), f"bridged call {i + 1}: arguments {got!r}, expected {w['arguments']!r}")


def run_scenario(scenario: Dict[str, Any], driver: str, address: str, tokens: Dict[str, str], multiplex: bool = True) -> Coroutine[Any, Any, None]:
    return Scenario(address, tokens, DRIVERS[driver], multiplex).run(scenario)
