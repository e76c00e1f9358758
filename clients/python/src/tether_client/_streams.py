"""How the blocking client carries a tool call: its own CallTool stream, or the shared Calls stream.

Both give ``Client.call_tool`` the same three operations (``CallStream``): send an input of the
call, iterate its outputs up to the result (raising TetherError when the call fails), close.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Iterator, Optional, Protocol, Sequence, Tuple

import grpc

from ._calls import DEADLINE_DETAILS, CallTable, Event, ended_without_results, stream_failure
from ._common import cancel_input
from ._errors import CancelledError, DeadlineExceededError, from_rpc_error
from ._gen.tether.v1 import gateway_pb2 as pb

Metadata = Sequence[Tuple[str, str]]


class CallStream(Protocol):
    def send(self, msg: pb.CallToolInput) -> None: ...
    def outputs(self) -> Iterator[pb.CallToolOutput]: ...
    def close(self, finished: bool) -> None: ...


def _drain(box: queue.Queue[Any]) -> Iterator[Any]:
    """Yields a queue's items until None: a request iterator gRPC's sending thread consumes."""
    while True:
        item = box.get()
        if item is None:
            return
        yield item


class CallToolStream:
    """One call on its own CallTool stream; gRPC enforces the deadline."""

    def __init__(self, stub: Any, metadata: Metadata, start: pb.CallToolInput, timeout: Optional[float]) -> None:
        self._outbox: queue.Queue[Optional[pb.CallToolInput]] = queue.Queue()
        self._outbox.put(start)
        self._responses = stub.CallTool(_drain(self._outbox), metadata=metadata, timeout=timeout)

    def send(self, msg: pb.CallToolInput) -> None:
        self._outbox.put(msg)

    def outputs(self) -> Iterator[pb.CallToolOutput]:
        try:
            yield from self._responses
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def close(self, finished: bool) -> None:
        self._outbox.put(None)  # ends the request stream so gRPC's sending thread exits
        if not finished:
            self._responses.cancel()


class CallsStream:
    """The client's shared Calls stream: a reader thread hands each output to its call's queue."""

    def __init__(self, stub: Any, metadata: Metadata) -> None:
        self._table: CallTable[queue.Queue[Event]] = CallTable()
        self._requests: queue.Queue[Optional[pb.CallsInput]] = queue.Queue()
        self._responses = stub.Calls(_drain(self._requests), metadata=metadata)
        threading.Thread(target=self._read, name="tether-calls-reader", daemon=True).start()

    @property
    def failure(self) -> Optional[BaseException]:
        """What ended the stream; None while it is open."""
        return self._table.failure

    def open_call(self, start: pb.CallToolInput, timeout: Optional[float], traceparent: str = "") -> Optional[MuxCall]:
        """Starts a call on the stream; None when the stream has failed (open a new one)."""
        box: queue.Queue[Event] = queue.Queue()
        call_id = self._table.open(box)
        if call_id is None:
            return None
        self.write(pb.CallsInput(call_id=call_id, input=start, traceparent=traceparent))
        return MuxCall(self, call_id, box, None if timeout is None else time.monotonic() + timeout)

    def write(self, msg: pb.CallsInput) -> None:
        self._requests.put(msg)

    def drop(self, call_id: str) -> None:
        self._table.drop(call_id)

    def _read(self) -> None:
        failure: BaseException = ended_without_results()
        try:
            for out in self._responses:
                routed = self._table.route(out)
                if routed is not None:
                    routed[0].put(routed[1])
        except grpc.RpcError as e:
            failure = stream_failure(e)
        self._fail(failure)

    def _fail(self, failure: BaseException) -> None:
        for box in self._table.fail(failure):
            box.put(failure)
        self._requests.put(None)

    def close(self) -> None:
        """Fails the calls in flight as CANCELLED, half-closes and cancels the stream."""
        self._fail(CancelledError(grpc.StatusCode.CANCELLED, "the client was closed"))
        # What is queued (a call's cancel) is handed to gRPC before the stream is cancelled.
        end = time.monotonic() + 1.0
        while not self._requests.empty() and time.monotonic() < end:
            time.sleep(0.005)
        self._responses.cancel()


class MuxCall:
    """One call on the shared Calls stream; the client enforces its deadline."""

    def __init__(self, stream: CallsStream, call_id: str, box: queue.Queue[Event], deadline: Optional[float]) -> None:
        self._stream = stream
        self._call_id = call_id
        self._box = box
        self._deadline = deadline
        self._ended = False  # a result or an error arrived: the gateway is done with the call
        self._stop_reason = "the caller stopped waiting"

    def send(self, msg: pb.CallToolInput) -> None:
        self._stream.write(pb.CallsInput(call_id=self._call_id, input=msg))

    def outputs(self) -> Iterator[pb.CallToolOutput]:
        while True:
            try:
                event = self._box.get(timeout=None if self._deadline is None else max(0.0, self._deadline - time.monotonic()))
            except queue.Empty:
                self._stop_reason = "deadline exceeded"
                raise DeadlineExceededError(grpc.StatusCode.DEADLINE_EXCEEDED, DEADLINE_DETAILS) from None
            if isinstance(event, BaseException):
                self._ended = True
                raise event
            yield event
            if event.WhichOneof("msg") == "result":
                self._ended = True
                return

    def close(self, finished: bool) -> None:
        if not (finished or self._ended):
            # The caller left before the result (deadline, an error in a handler): stop the tool.
            self.send(cancel_input(self._stop_reason))
        self._stream.drop(self._call_id)
