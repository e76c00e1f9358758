"""A small in-process gRPC server speaking CallTool and Calls, for the dispatcher's unit tests.

Its tools exercise what the clients must carry, not what tether's tools do (the conformance
suite checks those against the real gateway):
  echo     progress "echoing", then a result whose text is the arguments JSON
  ask      one question card; the result's text is the answer's free_text
  bridge   one bridged call of tool "lookup"; the result's text is the bridge result's text
  sleep    waits for a cancel (at most 30 s); an is_error result naming its reason
  limited  refused: RESOURCE_EXHAUSTED with retry after 250 ms
  crash    the whole stream fails with UNAVAILABLE
  anything else is NOT_FOUND
With ``calls=False`` the server has no Calls method, like a gateway older than it.
"""

from __future__ import annotations

import queue
import threading
from concurrent import futures
from typing import Any, Callable, Iterator, List, Tuple

import grpc

from tether_client import pb
from tether_client._gen.tether.v1 import gateway_pb2_grpc as rpc


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, retry_after_ms: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms


class Crash(Exception):
    pass


def text(t: str, is_error: bool = False) -> pb.CallToolOutput:
    return pb.CallToolOutput(result=pb.ToolResult(content=[pb.Content(text=t)], is_error=is_error))


def run_tool(start: pb.CallToolStart, inbox: queue.Queue[pb.CallToolInput], emit: Callable[[pb.CallToolOutput], None], cancels: List[str]) -> None:
    """Runs one call to its result through ``emit``; raises Refused or Crash instead."""
    if start.tool == "echo":
        emit(pb.CallToolOutput(progress=pb.Progress(text="echoing")))
        emit(text(start.arguments_json))
    elif start.tool == "ask":
        emit(pb.CallToolOutput(question=pb.Question(id="q1", kind=pb.QUESTION_KIND_ASK, question=start.arguments_json)))
        answer = inbox.get(timeout=30)
        emit(text(answer.answer.free_text))
    elif start.tool == "bridge":
        emit(pb.CallToolOutput(bridge_call=pb.BridgeCall(bridge_id="b1", tool="lookup", arguments_json=start.arguments_json)))
        got = inbox.get(timeout=30)
        emit(text(got.bridge_result.result.content[0].text))
    elif start.tool == "sleep":
        try:
            msg = inbox.get(timeout=30)
        except queue.Empty:
            emit(text("woke up"))
            return
        cancels.append(msg.cancel.reason)
        emit(text(f"cancelled: {msg.cancel.reason}", is_error=True))
    elif start.tool == "limited":
        raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "callTool rate limit", 250)
    elif start.tool == "crash":
        raise Crash()
    else:
        raise Refused(grpc.StatusCode.NOT_FOUND, f"unknown tool {start.tool}")


_END = object()


class FakeGateway(rpc.GatewayServicer):
    def __init__(self, calls: bool = True) -> None:
        self.calls = calls
        self.calls_attempts = 0
        self.calls_streams = 0
        self.call_tool_streams = 0
        self.cancels: List[str] = []
        self.call_ids: List[str] = []
        self.traceparents: List[str] = []

    def CallTool(self, request_iterator: Iterator[pb.CallToolInput], context: grpc.ServicerContext) -> Iterator[pb.CallToolOutput]:
        self.call_tool_streams += 1
        self.traceparents.append(dict(context.invocation_metadata()).get("traceparent", ""))
        first = next(request_iterator)
        inbox: queue.Queue[pb.CallToolInput] = queue.Queue()
        out: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=lambda: [inbox.put(m) for m in request_iterator], daemon=True).start()

        def work() -> None:
            try:
                run_tool(first.start, inbox, out.put, self.cancels)
                out.put(_END)
            except (Refused, Crash) as e:
                out.put(e)

        threading.Thread(target=work, daemon=True).start()
        while True:
            item = out.get()
            if item is _END:
                return
            if isinstance(item, Refused):
                context.set_trailing_metadata((("retry-after-ms", str(item.retry_after_ms)),) if item.retry_after_ms else ())
                context.abort(item.code, item.message)
            if isinstance(item, Crash):
                context.abort(grpc.StatusCode.UNAVAILABLE, "the runner is gone")
            yield item

    def Calls(self, request_iterator: Iterator[pb.CallsInput], context: grpc.ServicerContext) -> Iterator[pb.CallsOutput]:
        self.calls_attempts += 1
        if not self.calls:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found: tether.v1.Gateway/Calls")
        self.calls_streams += 1
        out: queue.Queue[Any] = queue.Queue()
        lock = threading.Lock()
        inboxes: dict[str, queue.Queue[pb.CallToolInput]] = {}
        state = {"input_ended": False}

        def finish(call_id: str) -> None:
            with lock:
                inboxes.pop(call_id, None)
                if state["input_ended"] and not inboxes:
                    out.put(_END)

        def work(call_id: str, start: pb.CallToolStart, inbox: queue.Queue[pb.CallToolInput]) -> None:
            try:
                run_tool(start, inbox, lambda o: out.put(pb.CallsOutput(call_id=call_id, output=o)), self.cancels)
            except Refused as e:
                out.put(pb.CallsOutput(call_id=call_id, error=pb.CallError(code=e.code.value[0], message=e.message, retry_after_ms=e.retry_after_ms)))
            except Crash:
                out.put(Crash())
            finish(call_id)

        def read() -> None:
            try:
                for msg in request_iterator:
                    with lock:
                        if msg.input.HasField("start"):
                            self.call_ids.append(msg.call_id)
                            self.traceparents.append(msg.traceparent)
                            inbox: queue.Queue[pb.CallToolInput] = queue.Queue()
                            inboxes[msg.call_id] = inbox
                            threading.Thread(target=work, args=(msg.call_id, msg.input.start, inbox), daemon=True).start()
                        elif msg.call_id in inboxes:
                            inboxes[msg.call_id].put(msg.input)
            except grpc.RpcError:
                pass
            with lock:
                state["input_ended"] = True
                if not inboxes:
                    out.put(_END)

        threading.Thread(target=read, daemon=True).start()
        while True:
            item = out.get()
            if item is _END:
                return
            if isinstance(item, Crash):
                context.abort(grpc.StatusCode.UNAVAILABLE, "the gateway is going away")
            yield item


def serve(calls: bool = True) -> Tuple[grpc.Server, FakeGateway, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    fake = FakeGateway(calls)
    rpc.add_GatewayServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, fake, f"127.0.0.1:{port}"
