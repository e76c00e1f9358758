"""tether_client: a Python client for the tether gateway (gRPC contract ``tether.v1``).

``Client`` blocks, ``AsyncClient`` is asyncio; both speak the same surface. ``pb`` is the
generated message module (``pb.Run``, ``pb.ToolResult``, enums such as ``pb.RUN_STATE_READY``).
"""

from ._aio import AsyncClient
from ._client import Client
from ._common import CallOutcome, CancelToken, result_text, tar_of_folder, tar_of_map, text_result
from ._errors import (
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    ResourceExhaustedError,
    TetherError,
    UnauthenticatedError,
    UnavailableError,
)
from ._gen.tether.v1 import gateway_pb2 as pb

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "CallOutcome",
    "CancelToken",
    "CancelledError",
    "Client",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "ProtocolError",
    "ResourceExhaustedError",
    "TetherError",
    "UnauthenticatedError",
    "UnavailableError",
    "pb",
    "result_text",
    "tar_of_folder",
    "tar_of_map",
    "text_result",
]
