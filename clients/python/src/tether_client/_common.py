"""What the sync and asyncio clients share: request builders, call outcomes, cancellation, tar."""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Union

from google.protobuf import json_format

from ._gen.tether.v1 import gateway_pb2 as pb

CHUNK_SIZE = 256 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]

FileMap = Mapping[str, Union[str, bytes]]
StrPath = Union[str, "os.PathLike[str]"]
SurfaceLike = Union[pb.Surface, Mapping[str, Any], None]


# grpc.health.v1 is two one-field messages; they are coded here so the client carries no health
# package. A check travels the client's own channel, beside its calls.
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_STATUS = ("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def health_request(service: str) -> bytes:
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data if data else b""


def health_status(response: bytes) -> str:
    """The status field (1, varint) of a HealthCheckResponse, by name."""
    i, status = 0, 0
    while i < len(response):
        tag, i = _read_varint(response, i)
        field_no, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _read_varint(response, i)
            if field_no == 1:
                status = value
        elif wire == 2:
            size, i = _read_varint(response, i)
            i += size
        else:
            raise ValueError(f"unexpected wire type {wire} in a health response")
    return HEALTH_STATUS[status] if status < len(HEALTH_STATUS) else str(status)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def metadata_for(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def with_traceparent(metadata: tuple[tuple[str, str], ...], traceparent: str) -> tuple[tuple[str, str], ...]:
    """A call's metadata with its W3C trace context, when it has one."""
    return (*metadata, ("traceparent", traceparent)) if traceparent else metadata


def message(cls: Any, value: Any) -> Any:
    """Accepts a message of ``cls``, or a dict in proto3 JSON form (camelCase or snake_case)."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    return json_format.ParseDict(dict(value), cls())


def surface_of(surface: SurfaceLike) -> Optional[pb.Surface]:
    return None if surface is None else message(pb.Surface, surface)


def result_text(result: pb.ToolResult) -> str:
    """The result's text and json content items, in order, joined with newlines."""
    parts: List[str] = []
    for c in result.content:
        kind = c.WhichOneof("item")
        if kind == "text":
            parts.append(c.text)
        elif kind == "json":
            parts.append(c.json)
    return "\n".join(parts)


def text_result(text: str, *, is_error: bool = False, structured: Any = None) -> pb.ToolResult:
    """A ToolResult with one text item: what a bridged-call handler usually returns."""
    return pb.ToolResult(
        content=[pb.Content(text=text)],
        is_error=is_error,
        structured_json="" if structured is None else json.dumps(structured),
    )


@dataclass
class CallOutcome:
    """The one result of a CallTool, with everything that travelled on the stream before it."""

    result: pb.ToolResult
    progress: List[str] = field(default_factory=list)
    questions: List[pb.Question] = field(default_factory=list)
    bridge_calls: List[pb.BridgeCall] = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        return self.result.is_error

    @property
    def text(self) -> str:
        return result_text(self.result)

    @property
    def structured(self) -> Any:
        """``structured_json`` parsed, or None when the tool sent none."""
        return json.loads(self.result.structured_json) if self.result.structured_json else None


class CancelToken:
    """Cancels a running tool call: ``token.cancel("reason")`` from any thread or callback.

    The gateway stops the tool and still sends the call's one result (an ``is_error`` result
    naming the reason), so a cancelled ``call_tool`` returns normally.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: Optional[str] = None
        self._listeners: List[Callable[[str], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> Optional[str]:
        return self._reason

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            listeners = list(self._listeners)
        for listener in listeners:
            listener(reason)

    def subscribe(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Calls ``listener(reason)`` on cancel (at once if already cancelled); returns an unsubscribe."""
        with self._lock:
            reason = self._reason
            if reason is None:
                self._listeners.append(listener)
        if reason is not None:
            listener(reason)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe


def start_input(
    run_id: str,
    tool: str,
    arguments: Any,
    arguments_json: Optional[str],
    surface: SurfaceLike,
    call_id: str,
    accepts_questions: bool,
    accepts_bridge_calls: bool,
) -> pb.CallToolInput:
    start = pb.CallToolStart(
        run_id=run_id,
        call_id=call_id,
        tool=tool,
        arguments_json=arguments_json if arguments_json is not None else json.dumps({} if arguments is None else arguments),
        accepts_questions=accepts_questions,
        accepts_bridge_calls=accepts_bridge_calls,
    )
    s = surface_of(surface)
    if s is not None:
        start.surface.CopyFrom(s)
    return pb.CallToolInput(start=start)


def answer_input(question: pb.Question, answer: Union[pb.Answer, Mapping[str, Any]]) -> pb.CallToolInput:
    a = message(pb.Answer, answer)
    a.question_id = question.id
    return pb.CallToolInput(answer=a)


def bridge_input(call: pb.BridgeCall, result: Union[pb.ToolResult, Mapping[str, Any]]) -> pb.CallToolInput:
    return pb.CallToolInput(bridge_result=pb.BridgeResult(bridge_id=call.bridge_id, result=message(pb.ToolResult, result)))


def cancel_input(reason: str) -> pb.CallToolInput:
    return pb.CallToolInput(cancel=pb.Cancel(reason=reason))


# --- tar ------------------------------------------------------------------------------------


def tar_of_map(files: FileMap, mode: int = 0o644) -> bytes:
    """A tar of regular files from a map of workspace-relative path to content."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else bytes(content)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_of_folder(folder: StrPath) -> bytes:
    """A tar of a local folder's regular files and directories, named relative to it."""
    root = Path(folder)
    if not root.is_dir():
        raise NotADirectoryError(str(root))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            tar.add(str(path), arcname=path.relative_to(root).as_posix(), recursive=False)
    return buf.getvalue()


def tar_of(source: Union[FileMap, StrPath, bytes]) -> bytes:
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    if isinstance(source, Mapping):
        return tar_of_map(source)
    return tar_of_folder(source)


def put_requests(run_id: str, tar: bytes, path: str) -> Iterator[pb.PutFilesRequest]:
    yield pb.PutFilesRequest(header=pb.PutFilesHeader(run_id=run_id, path=path))
    for i in range(0, len(tar), CHUNK_SIZE):
        yield pb.PutFilesRequest(chunk=tar[i : i + CHUNK_SIZE])


def entry_name(name: str) -> str:
    """A tar entry's name without a leading ``./`` or a trailing ``/``."""
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


def files_of_tar(tar: bytes) -> Dict[str, bytes]:
    """The regular files of a tar, by workspace-relative path."""
    out: Dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            f = archive.extractfile(member)
            if f is not None:
                out[entry_name(member.name)] = f.read()
    return out


def extract_tar(tar: bytes, folder: StrPath) -> List[str]:
    """Writes a tar's regular files and directories under ``folder``; refuses names that escape it."""
    root = Path(folder).resolve()
    root.mkdir(parents=True, exist_ok=True)
    written: List[str] = []
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:*") as archive:
        for member in archive:
            name = entry_name(member.name)
            rel = PurePosixPath(name)
            if not name or rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"tar entry escapes the target folder: {member.name!r}")
            target = root.joinpath(*rel.parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                f = archive.extractfile(member)
                target.write_bytes(f.read() if f is not None else b"")
                written.append(name)
    return written
