"""Every kernel of a graph is compiled and loaded, launcher included, before its first
launch: several at a time in threads, instead of one by one at first launch on the
caller's thread (Triton 3.6 builds a launcher per kernel signature with the C compiler).
"""

from __future__ import annotations

import pytest
import torch

import sdk
from sdk.plugins.cuda_triton import launch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def graph(x: torch.Tensor, y: torch.Tensor, m: torch.Tensor):
    # a split reduction (sum of all elements), a column sum, pointwise in two dtypes,
    # an integer mask: several kernel signatures
    return x.sum(), (x * y).sum(0), torch.where(m, x.to(torch.bfloat16) * 2, 0), (y + 1).exp()


def test_kernels_are_loaded_before_their_first_launch(monkeypatch, tmp_path):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))  # no kernel records of before
    # the caller's own warm-up: no compile worker answers a kernel's record first
    monkeypatch.setenv("SDK_COMPILE_WORKERS", "0")
    seen: list[tuple[int, list[bool]]] = []
    precompile = launch._precompile

    def recording(launchers):
        compiled = precompile(launchers)
        seen.append((len(launchers), [k.module is not None for k in compiled]))
        return compiled

    monkeypatch.setattr(launch, "_precompile", recording)
    torch.manual_seed(0)
    x = torch.randn(1 << 20, device="cuda").view(1024, 1024)
    y, m = torch.randn_like(x), torch.rand_like(x) > 0.5
    got = torch.compile(graph, backend=sdk.backend("cuda_triton", fallback=False))(x, y, m)
    for g, w in zip(got, graph(x, y, m)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-3)
    assert seen, "no kernel was precompiled"
    n_launchers, loaded = seen[0]
    assert len(loaded) >= n_launchers >= 2  # a split reduction brings two kernels
    assert all(loaded), loaded
