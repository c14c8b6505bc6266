"""The cost of a call across the boundary (autograder/isolation/boundary): the trusted runner calls a
student's function in the kernel, arguments and result copied as plain data.

    python benchmarks/grader/boundary.py [--repeat N]

For each payload, the median time of one call through a Handle against the same call made
in this process: a small list, a (64, 128, 256) float32 tensor (8 MiB each way), and a
forward pass of a small module kept in the kernel (a handle call: input and output copied).
The kernel is a plain ipykernel with the agent installed (no sandbox: the sandbox adds
nothing per call). Writes benchmarks/results/boundary.json.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402

from autograder.isolation.boundary.runner_side import Handle, KernelLink  # noqa: E402
from benchmarks.machine import save  # noqa: E402

KERNEL_CODE = """
from autograder.isolation.boundary.kernel_side import install
install(get_ipython())
import torch
def echo(value):
    return value
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
"""


def median_ms(call, repeat: int) -> float:
    call()  # warm
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    repeat = parser.parse_args().repeat
    torch.manual_seed(0)
    small, big, x = [1, 2.5, "three"], torch.randn(64, 128, 256), torch.randn(32, 256)
    local_model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        assert kc.execute_interactive(KERNEL_CODE, timeout=120)["content"]["status"] == "ok"
        link = KernelLink(kc)
        echo, model = Handle(link, "echo"), Handle(link, "model")
        cases = [("a small list", lambda: echo(small), lambda: list(small)),
                 ("a (64, 128, 256) float32 tensor", lambda: echo(big), lambda: big.clone()),
                 ("a module forward, (32, 256) in and out", lambda: model(x), lambda: local_model(x))]
        rows = []
        for what, remote, local in cases:
            across, here = median_ms(remote, repeat), median_ms(local, repeat)
            rows.append({"payload": what, "across_ms": round(across, 3), "in_process_ms": round(here, 3),
                         "overhead_ms": round(across - here, 3)})
            print(f"{what:42s} across {across:8.3f} ms   in process {here:8.3f} ms")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    print("wrote", save("boundary", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
