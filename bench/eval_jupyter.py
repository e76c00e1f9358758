"""The baseline of bench/eval.ts: the same cells on a Jupyter kernel (ipykernel via jupyter_client),
timed from the client's send to the kernel's idle status, as a notebook front end sees it.

Usage: python3 bench/eval_jupyter.py SAMPLES   (Debian's python3-ipykernel and python3-jupyter-client)
Prints one JSON object: case name -> list of milliseconds.
"""

import json
import sys
import time

# Debian's python3-jupyter-client, installed for /usr/bin/python3 by bench/run.sh.
from jupyter_client.manager import start_new_kernel  # pyright: ignore[reportMissingImports]

SAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 100
SETUP = (
    '%matplotlib inline\n'
    'import numpy as np, pandas as pd, matplotlib.pyplot as plt\n'
    'df = pd.DataFrame(np.random.rand(100_000, 5), columns=list("abcde"))'
)
CASES = {
    'trivial': ('1+1', SAMPLES),
    'dataframe100k': ('df', max(10, SAMPLES // 10)),
    'figure': ('plt.plot(np.arange(1000), np.sin(np.arange(1000) / 50)); plt.title("sine")', max(10, SAMPLES // 10)),
}


def execute(kc, code):
    t0 = time.perf_counter()
    msg_id = kc.execute(code, store_history=False)
    error = None
    while True:
        msg = kc.get_iopub_msg(timeout=120)
        if msg['parent_header'].get('msg_id') != msg_id:
            continue
        if msg['msg_type'] == 'error':
            error = msg['content']['ename'] + ': ' + msg['content']['evalue']
        if msg['msg_type'] == 'status' and msg['content']['execution_state'] == 'idle':
            break
    kc.get_shell_msg(timeout=120)
    if error:
        raise RuntimeError(error)
    return (time.perf_counter() - t0) * 1000


def main():
    km, kc = start_new_kernel(kernel_name='python3')
    try:
        execute(kc, SETUP)
        out = {}
        for name, (code, n) in CASES.items():
            for _ in range(3):
                execute(kc, code)
            out[name] = [execute(kc, code) for _ in range(n)]
        print(json.dumps(out))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


main()
