"""On a GPU: a compile's kernels go to the compile workers (``sdk.workers``), which answer each
kernel's record; the caller launches them from those records, as a warm process does: it
compiles none again and takes none through Triton's JIT path. The results match eager. The workers' side is checked on any machine by
tests/plugins/cuda_triton/test_compile_workers.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from sdk.plugins.cuda_triton import native, offline
from sdk.workers import compile_workers
from tests.plugins_under_test import wait_for_workers

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _cubins(cache: Path) -> set[Path]:
    return set(cache.rglob("*.cubin"))


def test_a_training_step_compiles_in_the_workers_and_the_caller_finds_each_kernel(
    monkeypatch, tmp_path
):
    cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))  # no kernel records of before
    monkeypatch.setenv("SDK_COMPILE_WORKERS", "auto")  # (the default, whatever the caller set)
    workers = compile_workers()
    workers.start()
    wait_for_workers(workers)

    # cubins that appear outside the workers' maps were compiled by the caller
    by_caller: set[Path] = set()
    seen: set[Path] = set()
    real = offline.compile_in_workers

    def watched(specs):
        nonlocal seen
        by_caller.update(_cubins(cache) - seen)
        made = real(specs)
        seen = _cubins(cache)
        return made

    monkeypatch.setattr(offline, "compile_in_workers", watched)
    before = dict(offline.WORKER_COMPILES)
    counts = native.counts()

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.GELU(),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
        nn.LayerNorm(10),
    ).cuda()
    x = torch.randn(4, 3, 8, 8, device="cuda")
    ref = model(x).logsumexp(-1).sum()
    ref.backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="sdk:cuda_triton", options={"tune_budget_s": 0})
    got = compiled(x).logsumexp(-1).sum()
    got.backward()
    torch.cuda.synchronize()
    by_caller.update(_cubins(cache) - seen)

    done = offline.WORKER_COMPILES["compiled"] - before["compiled"]
    assert offline.WORKER_COMPILES["failed"] == before["failed"]
    assert done >= 4, offline.WORKER_COMPILES
    assert offline.WORKER_COMPILES["records"] - before["records"] == done
    assert not by_caller, f"the caller compiled {len(by_caller)} kernels the workers had not"
    after = native.counts()
    assert after["triton"] == counts["triton"], after["triton_kernels"][
        len(counts["triton_kernels"]) :
    ]
    assert after["record"] >= done, after
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    for p, g in zip(model.parameters(), ref_grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-4)
