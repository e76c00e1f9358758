"""The blocking client: one gRPC channel, one tenant token."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from ._calls import CallsNotServed, CallState, Pending
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
    message,
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
from ._streams import CallsStream, CallStream, CallToolStream

AnswerLike = Union[pb.Answer, Mapping[str, Any]]
ToolResultLike = Union[pb.ToolResult, Mapping[str, Any]]
QuestionHandler = Callable[[pb.Question], Optional[AnswerLike]]
BridgeHandler = Callable[[pb.BridgeCall], ToolResultLike]


class Client:
    """A blocking tether client.

    >>> with Client("127.0.0.1:50051", "my-token") as tether:
    ...     run = tether.create_run(conversation_id="c1")
    ...     out = tether.call_tool(run.run_id, "read", {"path": "README.md"})

    Tool calls share one multiplexed ``Calls`` stream, opened on the first call; with
    ``multiplex=False`` (or against a gateway without ``Calls``) each call has its own
    ``CallTool`` stream. The two behave the same.
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        channel: Optional[grpc.Channel] = None,
        options: Sequence[Tuple[str, Any]] = (),
        multiplex: bool = True,
    ) -> None:
        self.address = address
        self._channel = channel or grpc.insecure_channel(address, options=[*CHANNEL_OPTIONS, *options])
        self._stub = rpc.GatewayStub(self._channel)
        self._health = self._channel.unary_unary(HEALTH_CHECK)
        self._metadata = metadata_for(token)
        self._multiplex = multiplex
        self._calls: Optional[CallsStream] = None
        self._calls_lock = threading.Lock()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._calls_lock:
            calls, self._calls, self._multiplex = self._calls, None, False
        if calls is not None:
            calls.close()
        self._channel.close()

    def health(self, service: str = "tether.v1.Gateway", *, timeout: Optional[float] = 2.0) -> str:
        """The gateway's health status ("SERVING", "NOT_SERVING", …) over this client's channel; needs no token."""
        try:
            return health_status(self._health(health_request(service), timeout=timeout))
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # --- runs --------------------------------------------------------------------------------

    def create_run(
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
        """Starts a run. Pass a whole request (message or proto3-JSON dict), or its fields."""
        req = create_run_request(request, conversation_id, workspace, features, approvals, labels, limits)
        try:
            return self._stub.CreateRun(req, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def get_run(self, run_id: str, *, timeout: Optional[float] = None) -> pb.Run:
        try:
            return self._stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def list_runs(self, *, timeout: Optional[float] = None) -> List[pb.Run]:
        try:
            return list(self._stub.ListRuns(pb.ListRunsRequest(), metadata=self._metadata, timeout=timeout).runs)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def delete_run(self, run_id: str, *, timeout: Optional[float] = None) -> None:
        try:
            self._stub.DeleteRun(pb.DeleteRunRequest(run_id=run_id), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def pause_run(self, run_id: str, *, timeout: Optional[float] = None) -> pb.Run:
        """Keeps what of the run is data and lets go of its sandbox; the next call resumes it."""
        try:
            return self._stub.PauseRun(pb.PauseRunRequest(run_id=run_id), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def resume_run(self, run_id: str, *, timeout: Optional[float] = None) -> pb.Run:
        """Brings a paused run back before its next call needs it; a ready run is returned as it is."""
        try:
            return self._stub.ResumeRun(pb.ResumeRunRequest(run_id=run_id), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def fork_run(self, run_id: str, count: int = 1, *, timeout: Optional[float] = None) -> List[pb.Run]:
        """New runs that start from the run's state now (workspace, kernel variables, staged edits); the run goes on."""
        try:
            res = self._stub.ForkRun(pb.ForkRunRequest(run_id=run_id, count=count), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return list(res.runs)

    def get_egress_log(self, run_id: str = "", *, page_size: int = 0, page_token: str = "", timeout: Optional[float] = None) -> pb.GetEgressLogResponse:
        """One page of this tenant's egress log (of one run, when given), oldest first."""
        req = pb.GetEgressLogRequest(run_id=run_id, page_size=page_size, page_token=page_token)
        try:
            return self._stub.GetEgressLog(req, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def egress_log(self, run_id: str = "", *, timeout: Optional[float] = None) -> Iterator[pb.EgressRecord]:
        """Every record of this tenant's egress log (of one run, when given), page after page."""
        token = ""
        while True:
            page = self.get_egress_log(run_id, page_size=1000, page_token=token, timeout=timeout)
            yield from page.records
            token = page.next_page_token
            if not token:
                return

    def list_tools(self, run_id: str, surface: SurfaceLike = None, *, timeout: Optional[float] = None) -> List[pb.Tool]:
        req = pb.ListToolsRequest(run_id=run_id, surface=surface_of(surface))
        try:
            return list(self._stub.ListTools(req, metadata=self._metadata, timeout=timeout).tools)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # --- files -------------------------------------------------------------------------------

    def put_files(self, run_id: str, source: Union[FileMap, StrPath, bytes], path: str = "", *, timeout: Optional[float] = None) -> pb.PutFilesResponse:
        """Writes files into the workspace (under ``path``) from a ``{path: content}`` map, a
        local folder, or a ready tar archive (bytes)."""
        tar = tar_of(source)
        try:
            return self._stub.PutFiles(put_requests(run_id, tar, path), metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def get_tar(self, run_id: str, path: str = "", *, timeout: Optional[float] = None) -> bytes:
        """The workspace (or one path in it) as a tar archive."""
        try:
            stream = self._stub.GetFiles(pb.GetFilesRequest(run_id=run_id, path=path), metadata=self._metadata, timeout=timeout)
            return b"".join(m.chunk for m in stream)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def get_files(self, run_id: str, path: str = "", *, timeout: Optional[float] = None) -> Dict[str, bytes]:
        """The workspace's regular files (or those under ``path``) as ``{path: content}``."""
        return files_of_tar(self.get_tar(run_id, path, timeout=timeout))

    def get_files_into(self, run_id: str, folder: StrPath, path: str = "", *, timeout: Optional[float] = None) -> List[str]:
        """Writes the workspace (or ``path`` in it) into a local folder; returns the files written."""
        return extract_tar(self.get_tar(run_id, path, timeout=timeout), folder)

    # --- tools -------------------------------------------------------------------------------

    def call_tool(
        self,
        run_id: str,
        tool: str,
        arguments: Any = None,
        *,
        arguments_json: Optional[str] = None,
        surface: SurfaceLike = None,
        call_id: str = "",
        on_question: Optional[QuestionHandler] = None,
        on_bridge_call: Optional[BridgeHandler] = None,
        on_progress: Optional[Callable[[str], None]] = None,
        cancel: Optional[CancelToken] = None,
        timeout: Optional[float] = None,
        traceparent: str = "",
    ) -> CallOutcome:
        """Runs one tool call to its one result.

        ``on_question`` declares a human is connected: it answers question and approval cards
        (return an ``Answer`` or its dict; return None to leave the card open, e.g. after
        cancelling). ``on_bridge_call`` declares the client runs tools the gateway does not own
        (called from eval cells); it returns a ``ToolResult``. ``cancel`` stops the call; the
        gateway still ends it with a result. A tool's own failure is ``outcome.is_error``; a
        refused call raises TetherError.
        """
        start = start_input(run_id, tool, arguments, arguments_json, surface, call_id, on_question is not None, on_bridge_call is not None)
        if self._multiplex:
            try:
                mux = self._open_multiplexed(start, timeout, traceparent)
                if mux is not None:
                    return drive(mux, CallState(on_progress), on_question, on_bridge_call, cancel)
            except CallsNotServed as e:
                if e.for_life:
                    self._multiplex = False  # an older gateway: CallTool for the client's life
        return drive(
            CallToolStream(self._stub, with_traceparent(self._metadata, traceparent), start, timeout),
            CallState(on_progress),
            on_question,
            on_bridge_call,
            cancel,
        )

    def _open_multiplexed(self, start: pb.CallToolInput, timeout: Optional[float], traceparent: str) -> Optional[CallStream]:
        """The call started on the shared Calls stream, opening it (again) when there is none
        or it failed; None once the client is closed."""
        while True:
            with self._calls_lock:
                if not self._multiplex:
                    return None
                fresh = self._calls is None or self._calls.failure is not None
                if fresh:
                    self._calls = CallsStream(self._stub, self._metadata)
                calls = self._calls
            call = calls.open_call(start, timeout, traceparent)
            if call is not None:
                return call
            # The stream failed before the call could open: a stream another call opened is
            # replaced, but one this call opened fails it (no loop while the gateway is down).
            failure = calls.failure
            if failure is not None and (fresh or isinstance(failure, CallsNotServed)):
                raise failure


def drive(
    stream: CallStream,
    state: CallState,
    on_question: Optional[QuestionHandler],
    on_bridge_call: Optional[BridgeHandler],
    cancel: Optional[CancelToken],
) -> CallOutcome:
    """Takes one started call to its result: answers its cards and bridged calls, forwards a cancel."""
    unsubscribe = cancel.subscribe(lambda reason: stream.send(cancel_input(reason))) if cancel else None
    try:
        for out in stream.outputs():
            reply = reply_to(state.take(out), on_question, on_bridge_call)
            if reply is not None:
                stream.send(reply)
    finally:
        if unsubscribe:
            unsubscribe()
        stream.close(finished=state.result is not None)
    return state.outcome()


def reply_to(pending: Pending, on_question: Optional[QuestionHandler], on_bridge_call: Optional[BridgeHandler]) -> Optional[pb.CallToolInput]:
    """The handler's answer to a question card or bridged call, as the input to send back."""
    if isinstance(pending, pb.Question) and on_question:
        answer = on_question(pending)
        return None if answer is None else answer_input(pending, answer)
    if isinstance(pending, pb.BridgeCall) and on_bridge_call:
        return bridge_input(pending, on_bridge_call(pending))
    return None


def create_run_request(
    request: Union[pb.CreateRunRequest, Mapping[str, Any], None],
    conversation_id: str,
    workspace: str,
    features: Union[pb.Features, Mapping[str, Any], None],
    approvals: Union[pb.Approvals, Mapping[str, Any], None],
    labels: Optional[Mapping[str, str]],
    limits: Union[pb.Limits, Mapping[str, Any], None],
) -> pb.CreateRunRequest:
    req: pb.CreateRunRequest = message(pb.CreateRunRequest, request)
    if conversation_id:
        req.conversation_id = conversation_id
    if workspace:
        req.workspace = workspace
    if features is not None:
        req.features.CopyFrom(message(pb.Features, features))
    if approvals is not None:
        req.approvals.CopyFrom(message(pb.Approvals, approvals))
    if labels:
        req.labels.update(labels)
    if limits is not None:
        req.limits.CopyFrom(message(pb.Limits, limits))
    return req
