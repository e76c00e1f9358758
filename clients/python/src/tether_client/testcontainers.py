"""A Testcontainers module for tether: ``TetherContainer`` starts the gateway image for a test.

Needs the ``testcontainers`` extra (``pip install "tether-client[testcontainers]"``).

    with TetherContainer() as tether:            # image from TETHER_GATEWAY_IMAGE
        client = tether.get_client()
        run = client.create_run()

The gateway runs on the host network, listening on 127.0.0.1 at a free port, with the Docker
engine's socket mounted so that it can start one sandbox container per run. ``stop()`` deletes
the runs its tenant still has before stopping the gateway.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from typing import Any, Optional

import grpc
from grpc_health.v1 import health_pb2
from testcontainers.core.container import DockerContainer

from ._client import Client
from ._errors import NotFoundError

DEFAULT_SOCKET = "/var/run/docker.sock"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How long a stopping gateway may take to remove what it started (its runs, its warm pool).
GRACEFUL_STOP_SECONDS = 15


class TetherContainer(DockerContainer):
    """The tether gateway image as a Testcontainers container, with a connected ``Client``.

    ``image`` defaults to ``TETHER_GATEWAY_IMAGE``; ``runner_image`` (the sandbox image for
    runs) to ``TETHER_IMAGE``, else the gateway's own default. ``token`` and ``tenant`` are the
    one credential the gateway accepts.
    """

    def __init__(
        self,
        image: Optional[str] = None,
        *,
        runner_image: Optional[str] = None,
        token: Optional[str] = None,
        tenant: str = "testcontainers",
        port: Optional[int] = None,
        docker_socket: str = DEFAULT_SOCKET,
        startup_timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        image = image or os.environ.get("TETHER_GATEWAY_IMAGE")
        if not image:
            raise ValueError("no gateway image: pass image= or set TETHER_GATEWAY_IMAGE")
        super().__init__(image, **kwargs)
        self.token = token or f"tc-{secrets.token_hex(16)}"
        self.tenant = tenant
        self.port = port or _free_port()
        self.instance = f"tc-py-{secrets.token_hex(4)}"
        self.startup_timeout = startup_timeout
        self._client: Optional[Client] = None
        # The engine may have no bridge network; on the host network the gateway's loopback
        # port is the test's.
        self.with_kwargs(network_mode="host")
        self.with_volume_mapping(docker_socket, "/var/run/docker.sock", "rw")
        # Disk limits need loop devices, which a container gets only with the host's /dev
        # (docs/tenancy.md); a test gateway does without them unless with_env says otherwise.
        self.with_env("TETHER_DISK", "none")
        # On the host network a second gateway would meet the first's HTTP port: off unless
        # with_env asks for it.
        self.with_env("TETHER_HTTP_LISTEN", "off")
        self.with_env("TETHER_LISTEN", f"127.0.0.1:{self.port}")
        self.with_env("TETHER_TOKENS", f"{self.token}={tenant}")
        self.with_env("TETHER_INSTANCE", self.instance)
        runner_image = runner_image or os.environ.get("TETHER_IMAGE")
        if runner_image:
            self.with_env("TETHER_IMAGE", runner_image)

    def get_address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TetherContainer:
        super().start()
        self._wait_until_serving()
        self._client = Client(self.get_address(), self.token)
        return self

    def get_client(self) -> Client:
        """The client connected as this container's tenant (closed on stop)."""
        if self._client is None:
            raise RuntimeError("the container is not started")
        return self._client

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        if self._client is not None:
            try:
                for run in self._client.list_runs(timeout=10):
                    try:
                        self._client.delete_run(run.run_id, timeout=30)
                    except NotFoundError:
                        pass
            finally:
                self._client.close()
                self._client = None
        # SIGTERM first, with time to act on it: the gateway then removes its warm pool's
        # sandboxes, which would outlive a force-removed gateway (they are the engine's, not its).
        container = self.get_wrapped_container()
        if container is not None:
            try:
                container.stop(timeout=GRACEFUL_STOP_SECONDS)
            except Exception:
                pass  # best effort: the removal below happens anyway
        super().stop(force=force, delete_volume=delete_volume)

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer yet"
        with grpc.insecure_channel(self.get_address()) as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            while time.monotonic() < deadline:
                container = self.get_wrapped_container()
                container.reload()
                if container.status in ("exited", "dead"):
                    out, err = self.get_logs()
                    raise RuntimeError(f"the gateway container exited: {(out + err).decode(errors='replace')[-2000:]}")
                try:
                    res = check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                    if res.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                    last = health_pb2.HealthCheckResponse.ServingStatus.Name(res.status)
                except grpc.RpcError as e:
                    last = f"{e.code().name}: {e.details()}"  # type: ignore[attr-defined]
                time.sleep(0.25)
        raise TimeoutError(f"the gateway at {self.get_address()} was not healthy within {self.startup_timeout}s ({last})")
