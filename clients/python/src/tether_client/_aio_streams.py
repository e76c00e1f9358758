"""How the asyncio client carries a tool call: its own CallTool stream, or the shared Calls stream.

Both give ``AsyncClient.call_tool`` the same operations (``AsyncCallStream``), the asyncio
twins of ``_streams``: send an input of the call, iterate its outputs up to the result
(raising TetherError when the call fails), close.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Optional, Protocol, Set

import grpc
import grpc.aio

from ._calls import DEADLINE_DETAILS, CallTable, Event, ended_without_results, stream_failure
from ._common import cancel_input
from ._errors import CancelledError, DeadlineExceededError, from_rpc_error
from ._gen.tether.v1 import gateway_pb2 as pb
from ._streams import Metadata

_WRITE_ENDED = (grpc.aio.UsageError, asyncio.InvalidStateError, grpc.RpcError)


class AsyncCallStream(Protocol):
    async def send(self, msg: pb.CallToolInput) -> None: ...
    def outputs(self) -> AsyncIterator[pb.CallToolOutput]: ...
    def close(self, finished: bool) -> None: ...


class AsyncCallToolStream:
    """One call on its own CallTool stream; gRPC enforces the deadline."""

    def __init__(self, stub: Any, metadata: Metadata, timeout: Optional[float]) -> None:
        self._call = stub.CallTool(metadata=metadata, timeout=timeout)
        self._write_lock = asyncio.Lock()

    async def send(self, msg: pb.CallToolInput) -> None:
        async with self._write_lock:
            if self._call.done():
                return
            try:
                await self._call.write(msg)
            except _WRITE_ENDED:
                pass  # the call already ended; its outcome is read by outputs()

    async def outputs(self) -> AsyncIterator[pb.CallToolOutput]:
        try:
            async for out in self._call:
                yield out
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def close(self, finished: bool) -> None:
        if not finished:
            self._call.cancel()  # also stops the tool


class AsyncCallsStream:
    """The client's shared Calls stream: a reader task hands each output to its call's queue."""

    def __init__(self, stub: Any, metadata: Metadata) -> None:
        self._table: CallTable[asyncio.Queue[Event]] = CallTable()
        self._call = stub.Calls(metadata=metadata)
        self._write_lock = asyncio.Lock()
        self._background: Set[asyncio.Task[None]] = set()
        self._first_write_done = False
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def failure(self) -> Optional[BaseException]:
        """What ended the stream; None while it is open."""
        return self._table.failure

    async def open_call(self, start: pb.CallToolInput, timeout: Optional[float], traceparent: str = "") -> Optional[AsyncMuxCall]:
        """Starts a call on the stream; None when the stream has failed (open a new one)."""
        box: asyncio.Queue[Event] = asyncio.Queue()
        call_id = self._table.open(box)
        if call_id is None:
            return None
        call = AsyncMuxCall(self, call_id, box, None if timeout is None else time.monotonic() + timeout)
        await self.write(pb.CallsInput(call_id=call_id, input=start, traceparent=traceparent))
        return call

    async def write(self, msg: pb.CallsInput) -> None:
        async with self._write_lock:
            if self._call.done():
                return
            try:
                await self._call.write(msg)
                self._first_write_done = True
            except _WRITE_ENDED:
                pass  # the stream ended; the reader fails the calls in flight with its status

    def write_soon(self, msg: pb.CallsInput) -> None:
        """Writes from code that cannot wait (a cancelled caller, a callback on the loop)."""
        task = asyncio.get_running_loop().create_task(self.write(msg))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def drop(self, call_id: str) -> None:
        self._table.drop(call_id)

    async def _read(self) -> None:
        failure: BaseException = ended_without_results()
        try:
            async for out in self._call:
                routed = self._table.route(out)
                if routed is not None:
                    routed[0].put_nowait(routed[1])
        except grpc.RpcError as e:
            failure = stream_failure(e, status_lost=not self._first_write_done)
        except asyncio.CancelledError:
            failure = CancelledError(grpc.StatusCode.CANCELLED, "the client was closed")
        self._fail(failure)

    def _fail(self, failure: BaseException) -> None:
        for box in self._table.fail(failure):
            box.put_nowait(failure)

    async def close(self) -> None:
        """Sends what is queued (a call's cancel), fails the calls in flight as CANCELLED and cancels the stream."""
        if self._background:
            await asyncio.wait(list(self._background), timeout=1.0)
        self._fail(CancelledError(grpc.StatusCode.CANCELLED, "the client was closed"))
        self._call.cancel()
        self._reader.cancel()
        await asyncio.gather(self._reader, *self._background, return_exceptions=True)


class AsyncMuxCall:
    """One call on the shared Calls stream; the client enforces its deadline."""

    def __init__(self, stream: AsyncCallsStream, call_id: str, box: asyncio.Queue[Event], deadline: Optional[float]) -> None:
        self._stream = stream
        self._call_id = call_id
        self._box = box
        self._deadline = deadline
        self._ended = False  # a result or an error arrived: the gateway is done with the call
        self._stop_reason = "the caller stopped waiting"

    async def send(self, msg: pb.CallToolInput) -> None:
        await self._stream.write(pb.CallsInput(call_id=self._call_id, input=msg))

    async def outputs(self) -> AsyncIterator[pb.CallToolOutput]:
        while True:
            try:
                if self._deadline is None:
                    event = await self._box.get()
                else:
                    event = await asyncio.wait_for(self._box.get(), max(0.0, self._deadline - time.monotonic()))
            except asyncio.TimeoutError:
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
            # The caller left before the result (deadline, a cancelled task, an error in a
            # handler): stop the tool. Sent from a task, as the caller may be cancelled itself.
            self._stream.write_soon(pb.CallsInput(call_id=self._call_id, input=cancel_input(self._stop_reason)))
        self._stream.drop(self._call_id)
