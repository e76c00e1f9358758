"""The asyncio client: the same surface as Client, every method a coroutine."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

import grpc
import grpc.aio

from ._aio_streams import AsyncCallsStream, AsyncCallStream, AsyncCallToolStream
from ._calls import CallsNotServed, CallState, Pending
from ._client import AnswerLike, ToolResultLike, create_run_request
from ._common import (
    CHANNEL_OPTIONS,
    HEALTH_CHECK,
    CallOutcome,
    CancelToken,
    FileMap,
    StrPath,
    SurfaceLike,
    answer_input,
    bridge_input,
    cancel_input,
    extract_tar,
    files_of_tar,
    health_request,
    health_status,
    metadata_for,
    put_requests,
    start_input,
    surface_of,
    tar_of,
    with_traceparent,
)
from ._errors import from_rpc_error
from ._gen.tether.v1 import gateway_pb2 as pb
from ._gen.tether.v1 import gateway_pb2_grpc as rpc

AsyncQuestionHandler = Callable[[pb.Question], Union[Optional[AnswerLike], Awaitable[Optional[AnswerLike]]]]
AsyncBridgeHandler = Callable[[pb.BridgeCall], Union[ToolResultLike, Awaitable[ToolResultLike]]]


class AsyncClient:
    """An asyncio tether client.

    >>> async with AsyncClient("127.0.0.1:50051", "my-token") as tether:
    ...     run = await tether.create_run(conversation_id="c1")
    ...     out = await tether.call_tool(run.run_id, "read", {"path": "README.md"})

    Tool calls share one multiplexed ``Calls`` stream, opened on the first call; with
    ``multiplex=False`` (or against a gateway without ``Calls``) each call has its own
    ``CallTool`` stream. The two behave the same.
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        channel: Optional[grpc.aio.Channel] = None,
        options: Sequence[Tuple[str, Any]] = (),
        multiplex: bool = True,
    ) -> None:
        self.address = address
        self._channel = channel or grpc.aio.insecure_channel(address, options=[*CHANNEL_OPTIONS, *options])
        self._stub = rpc.GatewayStub(self._channel)
        self._health = self._channel.unary_unary(HEALTH_CHECK)
        self._metadata = metadata_for(token)
        self._multiplex = multiplex
        self._calls: Optional[AsyncCallsStream] = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        calls, self._calls, self._multiplex = self._calls, None, False
        if calls is not None:
            await calls.close()
        await self._channel.close()

    async def health(self, service: str = "tether.v1.Gateway", *, timeout: Optional[float] = 2.0) -> str:
        """The gateway's health status ("SERVING", "NOT_SERVING", …) over this client's channel; needs no token."""
        try:
            return health_status(await self._health(health_request(service), timeout=timeout))
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # --- runs --------------------------------------------------------------------------------

    async def create_run(
        self,
        request: Union[pb.CreateRunRequest, Mapping[str, Any], None] = None,
        *,
        conversation_id: str = "",
        workspace: str = "",
        features: Union[pb.Features, Mapping[str, Any], None] = None,
        approvals: Union[pb.Approvals, Mapping[str, Any], None] = None,
        labels: Optional[Mapping[str, str]] = None,
        limits: Union[pb.Limits, Mapping[str, Any], None] = None,
        timeout: Optional[float] = None,
    ) -> pb.Run:
        req = create_run_request(request, conversation_id, workspace, features, approvals, labels, limits)
        try:
            return await self._stub.CreateRun(req, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def get_run(self, run_id: str, *, timeout: Optional[float] = None) -> pb.Run:
        try:
            return await self._stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def list_runs(self, *, timeout: Optional[float] = None) -> List[pb.Run]:
        try:
            res = await self._stub.ListRuns(pb.ListRunsRequest(), metadata=self._metadata, timeout=timeout)
            return list(res.runs)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def delete_run(self, run_id: str, *, timeout: Optional[float] = None) -> None:
        try:
            await self._stub.DeleteRun(pb.DeleteRunRequest(run_id=run_id), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def pause_run(self, run_id: str, *, timeout: Optional[float] = None) -> pb.Run:
        """Keeps what of the run is data and lets go of its sandbox; the next call resumes it."""
        try:
            return await self._stub.PauseRun(pb.PauseRunRequest(run_id=run_id), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def resume_run(self, run_id: str, *, timeout: Optional[float] = None) -> pb.Run:
        """Brings a paused run back before its next call needs it; a ready run is returned as it is."""
        try:
            return await self._stub.ResumeRun(pb.ResumeRunRequest(run_id=run_id), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def fork_run(self, run_id: str, count: int = 1, *, timeout: Optional[float] = None) -> List[pb.Run]:
        """New runs that start from the run's state now (workspace, kernel variables, staged edits); the run goes on."""
        try:
            res = await self._stub.ForkRun(pb.ForkRunRequest(run_id=run_id, count=count), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return list(res.runs)

    async def get_egress_log(self, run_id: str = "", *, page_size: int = 0, page_token: str = "", timeout: Optional[float] = None) -> pb.GetEgressLogResponse:
        """One page of this tenant's egress log (of one run, when given), oldest first."""
        req = pb.GetEgressLogRequest(run_id=run_id, page_size=page_size, page_token=page_token)
        try:
            return await self._stub.GetEgressLog(req, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def egress_log(self, run_id: str = "", *, timeout: Optional[float] = None) -> AsyncIterator[pb.EgressRecord]:
        """Every record of this tenant's egress log (of one run, when given), page after page."""
        token = ""
        while True:
            page = await self.get_egress_log(run_id, page_size=1000, page_token=token, timeout=timeout)
            for record in page.records:
                yield record
            token = page.next_page_token
            if not token:
                return

    async def list_tools(self, run_id: str, surface: SurfaceLike = None, *, timeout: Optional[float] = None) -> List[pb.Tool]:
        req = pb.ListToolsRequest(run_id=run_id, surface=surface_of(surface))
        try:
            res = await self._stub.ListTools(req, metadata=self._metadata, timeout=timeout)
            return list(res.tools)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # --- files -------------------------------------------------------------------------------

    async def put_files(self, run_id: str, source: Union[FileMap, StrPath, bytes], path: str = "", *, timeout: Optional[float] = None) -> pb.PutFilesResponse:
        """Writes files into the workspace (under ``path``) from a ``{path: content}`` map, a
        local folder, or a ready tar archive (bytes)."""
        tar = tar_of(source)
        try:
            return await self._stub.PutFiles(put_requests(run_id, tar, path), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def get_tar(self, run_id: str, path: str = "", *, timeout: Optional[float] = None) -> bytes:
        try:
            stream = self._stub.GetFiles(pb.GetFilesRequest(run_id=run_id, path=path), metadata=self._metadata, timeout=timeout)
            return b"".join([m.chunk async for m in stream])
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def get_files(self, run_id: str, path: str = "", *, timeout: Optional[float] = None) -> Dict[str, bytes]:
        return files_of_tar(await self.get_tar(run_id, path, timeout=timeout))

    async def get_files_into(self, run_id: str, folder: StrPath, path: str = "", *, timeout: Optional[float] = None) -> List[str]:
        return extract_tar(await self.get_tar(run_id, path, timeout=timeout), folder)

    # --- tools -------------------------------------------------------------------------------

    async def call_tool(
        self,
        run_id: str,
        tool: str,
        arguments: Any = None,
        *,
        arguments_json: Optional[str] = None,
        surface: SurfaceLike = None,
        call_id: str = "",
        on_question: Optional[AsyncQuestionHandler] = None,
        on_bridge_call: Optional[AsyncBridgeHandler] = None,
        on_progress: Optional[Callable[[str], None]] = None,
        cancel: Optional[CancelToken] = None,
        timeout: Optional[float] = None,
        traceparent: str = "",
    ) -> CallOutcome:
        """Runs one tool call to its one result; handlers may be plain functions or coroutines.

        Cancelling with ``cancel`` asks the gateway to stop the tool and still returns its
        result. Cancelling the awaiting task instead abandons the call (the stream is cancelled,
        which also stops the tool) and raises ``asyncio.CancelledError``.
        """
        start = start_input(run_id, tool, arguments, arguments_json, surface, call_id, on_question is not None, on_bridge_call is not None)
        if self._multiplex:
            try:
                mux = await self._open_multiplexed(start, timeout, traceparent)
                if mux is not None:
                    return await drive(mux, CallState(on_progress), on_question, on_bridge_call, cancel)
            except CallsNotServed as e:
                if e.for_life:
                    self._multiplex = False  # an older gateway: CallTool for the client's life
        stream = AsyncCallToolStream(self._stub, with_traceparent(self._metadata, traceparent), timeout)
        try:
            await stream.send(start)
        except asyncio.CancelledError:
            stream.close(finished=False)
            raise
        return await drive(stream, CallState(on_progress), on_question, on_bridge_call, cancel)

    async def _open_multiplexed(self, start: pb.CallToolInput, timeout: Optional[float], traceparent: str) -> Optional[AsyncCallStream]:
        """The call started on the shared Calls stream, opening it (again) when there is none
        or it failed; None once the client is closed."""
        while self._multiplex:
            fresh = self._calls is None or self._calls.failure is not None
            if fresh:
                self._calls = AsyncCallsStream(self._stub, self._metadata)
            calls = self._calls
            assert calls is not None
            call = await calls.open_call(start, timeout, traceparent)
            if call is not None:
                return call
            # The stream failed before the call could open: a stream another call opened is
            # replaced, but one this call opened fails it (no loop while the gateway is down).
            failure = calls.failure
            if failure is not None and (fresh or isinstance(failure, CallsNotServed)):
                raise failure
        return None


async def drive(
    stream: AsyncCallStream,
    state: CallState,
    on_question: Optional[AsyncQuestionHandler],
    on_bridge_call: Optional[AsyncBridgeHandler],
    cancel: Optional[CancelToken],
) -> CallOutcome:
    """Takes one started call to its result: answers its cards and bridged calls, forwards a
    cancel. Cancelling the awaiting task abandons the call, which stops the tool."""
    loop = asyncio.get_running_loop()
    background: Set[asyncio.Task[None]] = set()

    def on_cancel(reason: str) -> None:
        # CancelToken may fire on any thread.
        def schedule() -> None:
            task = loop.create_task(stream.send(cancel_input(reason)))
            background.add(task)
            task.add_done_callback(background.discard)

        loop.call_soon_threadsafe(schedule)

    unsubscribe = cancel.subscribe(on_cancel) if cancel else None
    try:
        async for out in stream.outputs():
            reply = await reply_to(state.take(out), on_question, on_bridge_call)
            if reply is not None:
                await stream.send(reply)
    finally:
        if unsubscribe:
            unsubscribe()
        for task in list(background):
            task.cancel()
        stream.close(finished=state.result is not None)
    return state.outcome()


async def reply_to(pending: Pending, on_question: Optional[AsyncQuestionHandler], on_bridge_call: Optional[AsyncBridgeHandler]) -> Optional[pb.CallToolInput]:
    """The handler's answer to a question card or bridged call, as the input to send back."""
    if isinstance(pending, pb.Question) and on_question:
        answer = await _resolve(on_question(pending))
        return None if answer is None else answer_input(pending, answer)
    if isinstance(pending, pb.BridgeCall) and on_bridge_call:
        return bridge_input(pending, await _resolve(on_bridge_call(pending)))
    return None


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
