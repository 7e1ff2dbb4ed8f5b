"""cuda_triton compiles a graph's kernels in worker processes (``launch.compile_in_workers``):
fresh interpreters that fill Triton's disk cache, from which the parent then loads. Here,
without a GPU: how many workers a compile gets, that every kernel goes to exactly one worker,
and that a worker's failures come back to the parent (which compiles those kernels itself).
tests/gpu/test_compile_workers_gpu.py checks on a GPU that the parent then compiles nothing.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from sdk import ir  # noqa: E402
from sdk.plugins.cuda_triton import launch, render  # noqa: E402

F32 = torch.float32


def sources(n: int, device: str = "cpu", base: float = 0.0) -> list:
    """``n`` pointwise kernels ``out = x + base + k`` (sources that differ in the constant)."""
    lay = ir.Layout((1000,), (1,), 0, F32, device)
    i = ir.var("i0")
    out = []
    for k in range(n):
        value = ir.Op("add", (ir.Load("x", i, F32), ir.Const(base + k, F32)), F32)
        kernel = ir.Kernel(
            f"add_{k}",
            (i,),
            lay.sizes,
            [ir.Stage((), (), [], [ir.Store("out", i, value)])],
            [ir.BufferArg("x", lay, "in"), ir.BufferArg("out", lay, "out")],
            origins=(f"add_{k}: test",),
        )
        out.append(render.render(kernel))
    return out


def test_how_many_workers(monkeypatch):
    monkeypatch.delenv("SDK_TRITON_COMPILE_WORKERS", raising=False)
    assert launch.workers_for(launch.WORKERS_FROM - 1) == 0  # too few to be worth a process
    many = launch.workers_for(1000)
    assert 1 <= many <= 16
    assert launch.workers_for(launch.WORKERS_FROM) <= launch.WORKERS_FROM // 4
    monkeypatch.setenv("SDK_TRITON_COMPILE_WORKERS", "3")
    assert launch.workers_for(2) == 2 and launch.workers_for(100) == 3  # as asked, any count
    monkeypatch.setenv("SDK_TRITON_COMPILE_WORKERS", "0")
    assert launch.workers_for(1000) == 0 and launch.compile_in_workers(sources(4)) == []
    monkeypatch.setenv("SDK_TRITON_COMPILE_WORKERS", "lots")
    with pytest.raises(ValueError, match="SDK_TRITON_COMPILE_WORKERS='lots' is not a number"):
        launch.workers_for(100)


def test_each_kernel_goes_to_one_worker_and_failures_come_back(monkeypatch, tmp_path):
    """Without a GPU a launcher has nothing to precompile for: each worker reports each of
    its kernels as failed, on stderr, and exits 1; the parent gets every report (and would
    compile those kernels itself). Every kernel is in exactly one worker's report."""
    if torch.cuda.is_available():
        pytest.skip("checks the workers' failures where Triton has no GPU to compile for")
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("SDK_TRITON_COMPILE_WORKERS", "3")
    srcs = sources(7)
    done = launch.compile_in_workers(srcs)
    assert len(done) == 3
    assert all(code == 1 for code, _err in done), done
    reported = [line.split(":")[0] for _code, err in done for line in err.splitlines() if line]
    assert sorted(reported) == sorted(s.name for s in srcs), done
