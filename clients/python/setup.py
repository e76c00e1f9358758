"""Generates the gRPC stubs before setuptools collects the packages (config is in pyproject.toml)."""

import sys
from pathlib import Path

from setuptools import setup

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_stubs import generate

generate()
setup()
