#!/usr/bin/env bash
# Copies the runtime files tsc does not emit (the Python kernel's driver.py, the process family's
# PTY helper ptyhost.py) from runner/src and gateway/src into dist/, beside the compiled code that
# starts them. Run after every tsc build (npm run build and scripts/setup.sh do).
set -euo pipefail
cd "$(dirname "$0")/.."
find runner/src gateway/src -type f ! -name '*.ts' ! -name '*.pyc' ! -path '*/__pycache__/*' -exec cp --parents -t dist {} +
