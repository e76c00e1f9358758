"""The package builds into a wheel that carries the generated stubs and its type information."""

import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_carries_the_stubs_and_types(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(PACKAGE_ROOT)],
        check=True,
    )
    [wheel] = tmp_path.glob("tether_client-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in [
        "tether_client/__init__.py",
        "tether_client/py.typed",
        "tether_client/testcontainers.py",
        "tether_client/_gen/tether/v1/gateway_pb2.py",
        "tether_client/_gen/tether/v1/gateway_pb2.pyi",
        "tether_client/_gen/tether/v1/gateway_pb2_grpc.py",
    ]:
        assert name in names, f"{name} missing from {wheel.name}"
