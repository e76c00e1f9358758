"""A gRPC client in Python, generated from proto/ with Debian's protoc and grpc_python_plugin.

Proves a platform in another language can use the contract: authenticate, create a run, list
tools on two surfaces, and call `read`. Exits non-zero with a message on the first mismatch.
"""

import json
import os
import sys

sys.path.insert(0, os.environ["TETHER_PY_GEN"])

# Imported after the path is set (E402). grpc is Debian's python3-grpcio, installed for
# /usr/bin/python3 by scripts/test.sh; tether.v1 is generated into TETHER_PY_GEN by the test.
import grpc  # noqa: E402  # pyright: ignore[reportMissingModuleSource]
from tether.v1 import gateway_pb2 as pb  # noqa: E402  # pyright: ignore[reportMissingImports]
from tether.v1 import gateway_pb2_grpc as rpc  # noqa: E402  # pyright: ignore[reportMissingImports]


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def main():
    channel = grpc.insecure_channel(os.environ["TETHER_ADDRESS"])
    stub = rpc.GatewayStub(channel)
    auth = [("authorization", f"Bearer {os.environ['TETHER_TOKEN']}")]

    try:
        stub.ListRuns(pb.ListRunsRequest())
        check(False, "a call without a token is refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"a call without a token is UNAUTHENTICATED (got {e.code()}: {e.details()})")

    run = stub.CreateRun(pb.CreateRunRequest(conversation_id="py"), metadata=auth)
    check(run.state == pb.RUN_STATE_READY, f"run {run.run_id} is READY")

    main_surface = pb.Surface(mode=pb.SURFACE_MODE_DEFAULT, agent=pb.AGENT_KIND_MAIN)
    plan_surface = pb.Surface(mode=pb.SURFACE_MODE_PLAN, agent=pb.AGENT_KIND_MAIN)
    all_tools = stub.ListTools(pb.ListToolsRequest(run_id=run.run_id, surface=main_surface), metadata=auth).tools
    plan_tools = stub.ListTools(pb.ListToolsRequest(run_id=run.run_id, surface=plan_surface), metadata=auth).tools
    check({"read", "write"} <= {t.name for t in all_tools}, "the main surface lists read and write")
    check(
        all(t.tier == pb.TIER_READ for t in plan_tools) and "write" not in {t.name for t in plan_tools},
        "the plan surface lists only read-tier tools",
    )
    schema = json.loads(next(t for t in all_tools if t.name == "read").input_schema_json)
    check(schema["required"] == ["path"], "read's JSON schema arrives intact")

    def call(tool, args):
        start = pb.CallToolStart(run_id=run.run_id, call_id="py-1", tool=tool, arguments_json=json.dumps(args), surface=main_surface)
        outs = list(stub.CallTool(iter([pb.CallToolInput(start=start)]), metadata=auth))
        results = [o.result for o in outs if o.WhichOneof("msg") == "result"]
        check(len(results) == 1, f"{tool} ends with exactly one result")
        return results[0]

    w = call("write", {"path": "hello.txt", "content": "hello from python\n"})
    check(not w.is_error, "write succeeds")
    r = call("read", {"path": "hello.txt"})
    text = "".join(c.text for c in r.content if c.WhichOneof("item") == "text")
    check(not r.is_error and "hello from python" in text, "read returns the file")
    check(json.loads(r.structured_json)["content"] == "hello from python\n", "structured_json carries the raw content")
    bad = call("read", {"path": "../../etc/passwd"})
    check(bad.is_error, "an escaping path is a tool error")

    stub.DeleteRun(pb.DeleteRunRequest(run_id=run.run_id), metadata=auth)
    try:
        stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=auth)
        check(False, "a deleted run is gone")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, "a deleted run is NOT_FOUND")
    print("python client: all checks passed")


if __name__ == "__main__":
    main()
