"""torch.distributed through sdk:cuda_triton over NCCL, one process per visible GPU (1 or 2).

tests/e2e/test_distributed.py runs the same worker (tests/distributed_worker.py) on CPU tensors
over gloo in every CI run; here it runs on CUDA tensors and NCCL, where a collective is
asynchronous on its own stream and a wait that the program forgets or places too early gives
wrong values, not an error:

* functional collectives in a graph: all_reduce, all_gather_into_tensor and
  reduce_scatter_tensor are library calls whose results equal eager's;
* ``torch.compile(DDP(model))``: one sdk graph per gradient bucket, eager DDP's gradients;
* FSDP2 with each block's forward compiled: eager FSDP2's losses and weights.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.distributed_worker import free_port

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_collectives_ddp_and_fsdp2_over_nccl():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("NCCL is not available")
    world = min(2, torch.cuda.device_count())
    r = subprocess.run(
        [sys.executable, "-m", "tests.distributed_worker", str(free_port()), str(world), "cuda"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=600,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT"))
    assert int(line.split("compiled_ddp=")[1].split()[0]) >= 3, line  # split at the buckets
    print(line)
