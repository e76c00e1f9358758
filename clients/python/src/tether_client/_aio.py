"""The asyncio client: the same surface as Client, every method a coroutine."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

import grpc
import grpc.aio

from ._client import AnswerLike, ToolResultLike, create_run_request
from ._common import (
    CHANNEL_OPTIONS,
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
    metadata_for,
    put_requests,
    start_input,
    surface_of,
    tar_of,
)
from ._errors import ProtocolError, from_rpc_error
from ._gen.tether.v1 import gateway_pb2 as pb
from ._gen.tether.v1 import gateway_pb2_grpc as rpc

AsyncQuestionHandler = Callable[[pb.Question], Union[Optional[AnswerLike], Awaitable[Optional[AnswerLike]]]]
AsyncBridgeHandler = Callable[[pb.BridgeCall], Union[ToolResultLike, Awaitable[ToolResultLike]]]


class AsyncClient:
    """An asyncio tether client.

    >>> async with AsyncClient("127.0.0.1:50051", "my-token") as tether:
    ...     run = await tether.create_run(conversation_id="c1")
    ...     out = await tether.call_tool(run.run_id, "read", {"path": "README.md"})
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        channel: Optional[grpc.aio.Channel] = None,
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        self.address = address
        self._channel = channel or grpc.aio.insecure_channel(address, options=[*CHANNEL_OPTIONS, *options])
        self._stub = rpc.GatewayStub(self._channel)
        self._metadata = metadata_for(token)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

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
    ) -> CallOutcome:
        """Runs one tool call to its one result; handlers may be plain functions or coroutines.

        Cancelling with ``cancel`` asks the gateway to stop the tool and still returns its
        result. Cancelling the awaiting task instead abandons the call (the stream is cancelled,
        which also stops the tool) and raises ``asyncio.CancelledError``.
        """
        loop = asyncio.get_running_loop()
        call = self._stub.CallTool(metadata=self._metadata, timeout=timeout)
        write_lock = asyncio.Lock()
        background: Set[asyncio.Task[None]] = set()

        async def send(msg: pb.CallToolInput) -> None:
            async with write_lock:
                if call.done():
                    return
                try:
                    await call.write(msg)
                except (grpc.aio.UsageError, asyncio.InvalidStateError, grpc.RpcError):
                    pass  # the call already ended; its outcome is read below

        def on_cancel(reason: str) -> None:
            def schedule() -> None:
                task = loop.create_task(send(cancel_input(reason)))
                background.add(task)
                task.add_done_callback(background.discard)

            loop.call_soon_threadsafe(schedule)

        progress: List[str] = []
        questions: List[pb.Question] = []
        bridge_calls: List[pb.BridgeCall] = []
        result: Optional[pb.ToolResult] = None
        unsubscribe = None
        try:
            await send(start_input(run_id, tool, arguments, arguments_json, surface, call_id, on_question is not None, on_bridge_call is not None))
            unsubscribe = cancel.subscribe(on_cancel) if cancel else None
            async for out in call:
                kind = out.WhichOneof("msg")
                if kind == "progress":
                    progress.append(out.progress.text)
                    if on_progress:
                        on_progress(out.progress.text)
                elif kind == "question":
                    questions.append(out.question)
                    if on_question:
                        answer = await _resolve(on_question(out.question))
                        if answer is not None:
                            await send(answer_input(out.question, answer))
                elif kind == "bridge_call":
                    bridge_calls.append(out.bridge_call)
                    if on_bridge_call:
                        await send(bridge_input(out.bridge_call, await _resolve(on_bridge_call(out.bridge_call))))
                elif kind == "result":
                    result = out.result
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        except asyncio.CancelledError:
            call.cancel()
            raise
        finally:
            if unsubscribe:
                unsubscribe()
            for task in list(background):
                task.cancel()
        if result is None:
            raise ProtocolError("the CallTool stream ended without a result")
        return CallOutcome(result, progress, questions, bridge_calls)


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
