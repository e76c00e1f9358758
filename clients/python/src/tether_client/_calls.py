"""What every tool call shares, whichever client and transport carries it.

A call travels either on its own CallTool stream or, multiplexed, on the client's one Calls
stream. ``CallState`` is the call itself (what it received, what a handler must answer);
``CallTable`` is one Calls stream's calls in flight, by the call id the client gave each.
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable, Dict, Generic, List, Optional, Tuple, TypeVar, Union

import grpc

from ._common import CallOutcome
from ._errors import ProtocolError, TetherError, error_for_value, from_rpc_error
from ._gen.tether.v1 import gateway_pb2 as pb

Pending = Union[pb.Question, pb.BridgeCall, None]
# What a call's waiter receives: an output of its call, or the error that ended it.
Event = Union[pb.CallToolOutput, BaseException]
DEADLINE_DETAILS = "Deadline Exceeded"


class CallState:
    """One call's outputs so far; ``take`` tells which of them a handler must answer."""

    def __init__(self, on_progress: Optional[Callable[[str], None]]) -> None:
        self._on_progress = on_progress
        self.progress: List[str] = []
        self.questions: List[pb.Question] = []
        self.bridge_calls: List[pb.BridgeCall] = []
        self.result: Optional[pb.ToolResult] = None

    def take(self, out: pb.CallToolOutput) -> Pending:
        """Records one output; returns the question card or bridged call it brings, if any."""
        kind = out.WhichOneof("msg")
        if kind == "progress":
            self.progress.append(out.progress.text)
            if self._on_progress:
                self._on_progress(out.progress.text)
        elif kind == "question":
            self.questions.append(out.question)
            return out.question
        elif kind == "bridge_call":
            self.bridge_calls.append(out.bridge_call)
            return out.bridge_call
        elif kind == "result":
            self.result = out.result
        return None

    def outcome(self) -> CallOutcome:
        if self.result is None:
            raise ProtocolError("the call ended without a result")
        return CallOutcome(self.result, self.progress, self.questions, self.bridge_calls)


class CallsNotServed(Exception):
    """The Calls stream ended before the gateway took any call on it: carry them on CallTool.

    ``for_life`` when the gateway has no Calls at all (UNIMPLEMENTED: an older gateway).
    """

    def __init__(self, details: str, for_life: bool) -> None:
        super().__init__(details)
        self.for_life = for_life


def stream_failure(err: grpc.RpcError, status_lost: bool = False) -> BaseException:
    """What the calls in flight on a Calls stream that ended with ``err`` fail with.

    ``status_lost``: the stream ended before its first message could be written, and grpc's
    asyncio client then reports INTERNAL instead of the status the gateway sent (an older
    gateway's UNIMPLEMENTED, sent at once). No call reached the gateway, so they go by CallTool,
    which reports the real status if there is one.
    """
    failure = from_rpc_error(err)
    if failure.code == grpc.StatusCode.UNIMPLEMENTED:
        return CallsNotServed(failure.details, for_life=True)
    if status_lost and failure.code == grpc.StatusCode.INTERNAL:
        return CallsNotServed(failure.details, for_life=False)
    return failure


def ended_without_results() -> TetherError:
    return ProtocolError("the Calls stream ended while calls were in flight")


W = TypeVar("W")


class CallTable(Generic[W]):
    """The calls in flight on one Calls stream: each call's waiter ``W`` by its call id.

    Thread-safe: the blocking client opens calls from many threads while its reader thread
    routes. Once failed, the table takes no new call (the client opens a new stream).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: Dict[str, W] = {}
        self._ids = itertools.count(1)
        self.failure: Optional[BaseException] = None

    def open(self, waiter: W) -> Optional[str]:
        """Registers a call; its id, or None when the stream has failed already."""
        with self._lock:
            if self.failure is not None:
                return None
            call_id = str(next(self._ids))
            self._waiters[call_id] = waiter
            return call_id

    def drop(self, call_id: str) -> None:
        """Forgets a call its caller has left: later messages for it are ignored."""
        with self._lock:
            self._waiters.pop(call_id, None)

    def route(self, out: pb.CallsOutput) -> Optional[Tuple[W, Event]]:
        """The waiter an output is for and what to hand it; None for a call no one waits for.

        A result or an error ends the call, so its id leaves the table.
        """
        kind = out.WhichOneof("msg")
        ends = kind == "error" or (kind == "output" and out.output.WhichOneof("msg") == "result")
        with self._lock:
            waiter = self._waiters.pop(out.call_id, None) if ends else self._waiters.get(out.call_id)
        if waiter is None or kind is None:
            return None
        if kind == "error":
            return waiter, error_for_value(out.error.code, out.error.message, out.error.retry_after_ms)
        return waiter, out.output

    def fail(self, failure: BaseException) -> List[W]:
        """Ends the table with the stream's failure; returns the waiters of the calls in flight."""
        with self._lock:
            if self.failure is None:
                self.failure = failure
            waiters = list(self._waiters.values())
            self._waiters.clear()
        return waiters
