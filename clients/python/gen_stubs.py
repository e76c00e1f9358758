"""Generates the tether.v1 gRPC stubs for tether_client from the repository's proto/.

Run by the package build (setup.py) and by scripts/clients-test.sh before the tests. The
output, src/tether_client/_gen/, is not committed: it is rebuilt only when the proto files,
this script or the grpcio-tools version change (a stamp holds their hash).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
OUT = HERE / "src" / "tether_client" / "_gen"
STAMP = OUT / ".stamp"
PACKAGE = "tether_client._gen"


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.glob("tether/**/*.proto"))


def fingerprint(files: list[Path]) -> str:
    from importlib.metadata import version

    tools_version = version("grpcio-tools")
    h = hashlib.sha256()
    h.update(tools_version.encode())
    h.update(Path(__file__).read_bytes())
    for f in files:
        h.update(str(f.relative_to(PROTO_ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def generate() -> bool:
    """Returns True when the stubs were (re)generated, False when the cached ones are current."""
    files = proto_files()
    if not files:
        if STAMP.exists():
            return False  # an unpacked source distribution: the stubs travel with it
        raise SystemExit(f"no proto files under {PROTO_ROOT}")
    digest = fingerprint(files)
    if STAMP.exists() and STAMP.read_text().strip() == digest:
        return False

    import grpc_tools
    from grpc_tools import protoc

    tmp = OUT.with_name("_gen.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={tmp}",
        f"--pyi_out={tmp}",
        f"--grpc_python_out={tmp}",
        *(str(f.relative_to(PROTO_ROOT)) for f in files),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("grpc_tools.protoc failed")
    # protoc writes absolute imports (`from tether.v1 import ...`); inside the package they must
    # name the package, or a user's own `tether` module would shadow them.
    for py in tmp.rglob("*.py*"):
        text = py.read_text()
        fixed = re.sub(r"^from tether\.", f"from {PACKAGE}.tether.", text, flags=re.M)
        fixed = re.sub(r"^import tether\.", f"import {PACKAGE}.tether.", fixed, flags=re.M)
        if fixed != text:
            py.write_text(fixed)
    for d in [tmp, *(p for p in tmp.rglob("*") if p.is_dir())]:
        (d / "__init__.py").touch()
    (tmp / ".stamp").write_text(digest + "\n")
    shutil.rmtree(OUT, ignore_errors=True)
    tmp.rename(OUT)
    return True


if __name__ == "__main__":
    changed = generate()
    print(f"tether_client stubs: {'generated' if changed else 'up to date'} in {OUT}", file=sys.stderr)
