"""cuda_triton's compile workers on a GPU: the kernels they compile are in Triton's disk cache,
where the parent's own compile finds them (it adds no cubin), and the launchers compute what
they should; a model compiled with workers matches eager."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from sdk.plugins.cuda_triton import launch
from tests.gpu.common import check_training
from tests.plugins.cuda_triton.test_compile_workers import sources

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _cubins(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.cubin")}


def test_the_parent_loads_what_the_workers_compiled(monkeypatch, tmp_path):
    triton_dir = tmp_path / "triton"
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_dir))
    monkeypatch.setenv("SDK_TRITON_COMPILE_WORKERS", "3")
    base = random.random()  # sources new to this process: nothing compiled in memory yet
    srcs = sources(9, "cuda", base)
    done = launch.compile_in_workers(srcs)
    assert len(done) == 3 and all(code == 0 for code, _err in done), done
    compiled = _cubins(triton_dir)
    assert len(compiled) == 9, compiled
    monkeypatch.setenv("SDK_TRITON_COMPILE_WORKERS", "0")  # the parent alone now
    fns = launch.compile_sources(srcs)
    assert _cubins(triton_dir) == compiled, "the parent compiled a kernel the workers had"
    x = torch.randn(1000, device="cuda")
    for k, fn in enumerate(fns):
        out = torch.empty_like(x)
        fn(x, out)
        torch.testing.assert_close(out, x + (base + k), rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_model_compiled_with_workers_matches_eager(monkeypatch, tmp_path, dtype):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("SDK_TRITON_COMPILE_WORKERS", "4")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.GELU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.LayerNorm([16, 12, 12]),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 144, 10),
    ).to("cuda", dtype)
    x = torch.randn(4, 3, 12, 12, device="cuda", dtype=dtype)
    torch._dynamo.reset()
    # (the fp64 reference model takes the input in its own dtype)
    step = lambda m: m(x.to(next(m.parameters()).dtype)).float().square().mean()  # noqa: E731
    failures = check_training(model, step)
    assert not failures, failures
    assert len(_cubins(tmp_path / "triton")) > 0
