"""TetherContainer as a platform's test suite would use it: imported by package name, real Docker."""

import os

import docker
import pytest

from tether_client import pb

tc = pytest.importorskip("tether_client.testcontainers", reason="the testcontainers extra is not installed")


@pytest.mark.skipif(not os.environ.get("TETHER_GATEWAY_IMAGE"), reason="TETHER_GATEWAY_IMAGE is not set")
def test_a_platform_test_gets_a_gateway_and_a_client() -> None:
    with tc.TetherContainer() as tether:
        client = tether.get_client()
        run = client.create_run(conversation_id="my-platform-test")
        assert run.state == pb.RUN_STATE_READY, run.error
        client.put_files(run.run_id, {"hello.txt": "hi\n"})
        assert "hi" in client.call_tool(run.run_id, "read", {"path": "hello.txt"}).text
    # Stopping the container deleted the run: its sandbox container is gone.
    left = docker.from_env().containers.list(all=True, filters={"label": f"dev.tether.run-id={run.run_id}"})
    assert left == []
    # And nothing else the gateway started outlives it, its warm pool included.
    leftover = docker.from_env().containers.list(all=True, filters={"label": f"dev.tether.instance={tether.instance}"})
    assert [c.name for c in leftover] == []
