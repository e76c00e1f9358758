"""Typed errors: every failed RPC surfaces as a TetherError carrying its gRPC status code.

A tool that ran and failed is not an error here: it is a result with ``is_error`` set. Status
codes mean the call itself was refused (unknown run or tool, bad token, bad request, ...).
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc


class TetherError(Exception):
    """A tether RPC that ended with a non-OK gRPC status."""

    code: grpc.StatusCode
    details: str
    retry_after_ms: int
    """With RESOURCE_EXHAUSTED from a rate limit: the milliseconds to wait before retrying (else 0)."""

    def __init__(self, code: grpc.StatusCode, details: str, retry_after_ms: int = 0) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.retry_after_ms = retry_after_ms


class NotFoundError(TetherError):
    """The run or tool does not exist for this tenant (another tenant's run is NOT_FOUND too)."""


class UnauthenticatedError(TetherError):
    """The bearer token is missing or unknown."""


class PermissionDeniedError(TetherError):
    """The token is known but may not do this."""


class InvalidArgumentError(TetherError):
    """The request was malformed (a path escaping the workspace, a missing field, ...)."""


class FailedPreconditionError(TetherError):
    """The run is not in a state that allows the call."""


class ResourceExhaustedError(TetherError):
    """A limit was hit (too many runs, an archive over the cap, ...)."""


class DeadlineExceededError(TetherError):
    """The call's deadline passed before it finished."""


class CancelledError(TetherError):
    """The RPC was cancelled on the client side before a result arrived."""


class UnavailableError(TetherError):
    """The gateway could not be reached."""


class ProtocolError(TetherError):
    """The gateway broke the contract, e.g. a CallTool stream ended without a result."""

    def __init__(self, details: str) -> None:
        super().__init__(grpc.StatusCode.INTERNAL, details)


_BY_CODE: Dict[grpc.StatusCode, Type[TetherError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
}


_BY_VALUE: Dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


def error_for(code: Optional[grpc.StatusCode], details: Optional[str], retry_after_ms: int = 0) -> TetherError:
    code = code or grpc.StatusCode.UNKNOWN
    return _BY_CODE.get(code, TetherError)(code, details or "", retry_after_ms)


def error_for_value(code: int, details: str, retry_after_ms: int = 0) -> TetherError:
    """The TetherError of a status code sent as a number (a Calls stream's CallError)."""
    return error_for(_BY_VALUE.get(code, grpc.StatusCode.UNKNOWN), details, retry_after_ms)


def from_rpc_error(err: grpc.RpcError) -> TetherError:
    """Maps a grpc (sync or aio) error to the matching TetherError subclass."""
    code = err.code() if callable(getattr(err, "code", None)) else None  # type: ignore[attr-defined]
    details = err.details() if callable(getattr(err, "details", None)) else str(err)  # type: ignore[attr-defined]
    return error_for(code, details, _retry_after_ms(err))


def _retry_after_ms(err: grpc.RpcError) -> int:
    """The gateway's `retry-after-ms` trailer, which comes with a rate limit's RESOURCE_EXHAUSTED."""
    trailers = getattr(err, "trailing_metadata", None)
    try:
        for key, value in (trailers() if callable(trailers) else None) or ():
            if key == "retry-after-ms":
                return int(value)
    except (TypeError, ValueError):
        pass
    return 0
