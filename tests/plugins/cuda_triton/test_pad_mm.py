"""The cuda_triton plugin's matmul padding gives the unpadded product."""

from __future__ import annotations

import pytest
import torch

from sdk.plugins.cuda_triton import pad_mm


@pytest.fixture
def pad_everything(monkeypatch):
    monkeypatch.setattr(pad_mm, "MIN_WORK", 0)
    monkeypatch.setattr(pad_mm, "_tensor_cores", lambda dtype: dtype.is_floating_point)


def test_padded_products_equal_the_plain_ones(pad_everything):
    a, b = torch.randn(13, 7), torch.randn(7, 21)
    torch.testing.assert_close(pad_mm.mm(a, b), a @ b)
    bias = torch.randn(21)
    torch.testing.assert_close(
        pad_mm.addmm(bias, a, b, beta=0.5, alpha=2.0), torch.addmm(bias, a, b, beta=0.5, alpha=2.0)
    )
    x, y = torch.randn(3, 5, 9), torch.randn(3, 9, 6)
    torch.testing.assert_close(pad_mm.bmm(x, y), x @ y)
    w = torch.randn(21, 7)  # used transposed, as a Linear weight is
    x = torch.randn(13, 7)
    torch.testing.assert_close(pad_mm.mm(x, w.t()), x @ w.t())
    t, y = torch.randn(21, 7).t(), torch.randn(21, 5)
    torch.testing.assert_close(pad_mm.mm(t, y), t @ y)


def test_float32_is_padded_only_where_tf32_puts_it_on_tensor_cores(monkeypatch):
    monkeypatch.setattr(pad_mm, "MIN_WORK", 0)
    a, b = torch.randn(13, 7), torch.randn(7, 21)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")  # CUDA cores: no gain from alignment
        assert pad_mm.mm(a, b) is NotImplemented
        torch.set_float32_matmul_precision("high")  # TF32
        torch.testing.assert_close(pad_mm.mm(a, b), a @ b)
    finally:
        torch.set_float32_matmul_precision(before)
    x, y = torch.randn(13, 7, dtype=torch.bfloat16), torch.randn(7, 21, dtype=torch.bfloat16)
    assert pad_mm.mm(x, y) is not NotImplemented  # half types always
    assert pad_mm.mm(a.double(), b.double()) is NotImplemented


def test_aligned_or_small_products_are_left_alone():
    assert pad_mm.mm(torch.randn(16, 8), torch.randn(8, 24)) is NotImplemented
    assert pad_mm.mm(torch.randn(13, 7), torch.randn(7, 21)) is NotImplemented  # small


def test_decomposition_runs_through_the_compiler(pad_everything):
    import sdk

    try:
        sdk.backend("cuda_triton")
    except sdk.PluginUnavailableError as exc:
        pytest.skip(str(exc))
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # else Triton's interpreter
    a, b = torch.randn(13, 7, device=dev), torch.randn(7, 21, device=dev)
    fn = torch.compile(lambda a, b: (a @ b).relu(), backend=sdk.backend("cuda_triton"))
    torch.testing.assert_close(fn(a, b), (a @ b).relu())
    report = sdk.explain(lambda a, b: (a @ b).relu(), a, b, backend="sdk:cuda_triton")
    assert any("constant_pad_nd" in op for k in report.kernels for op in k.ops), str(report)


def test_symbolic_sizes_are_neither_padded_nor_branched_on(pad_everything, builds, graph_reports):
    """Once Dynamo makes the rows a symbol, only the static dimensions are padded and the
    decision adds no guard, so one program serves every later row count (a guard on
    ``m % 8`` made Dynamo recompile on each side of it)."""
    import sdk

    try:
        sdk.backend("cuda_triton")
    except sdk.PluginUnavailableError as exc:
        pytest.skip(str(exc))
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # else Triton's interpreter

    def f(a, b):
        return (a @ b).relu()

    fn = torch.compile(f, backend=sdk.backend("cuda_triton"))
    b = torch.randn(7, 21, device=dev)
    for m in (13, 16, 21, 40, 64):  # the second makes the rows symbolic
        a = torch.randn(m, 7, device=dev)
        torch.testing.assert_close(fn(a, b), f(a, b))
    assert len(builds) == 2, builds  # 13 alone, then one program for the rest
    symbolic = [r for r in graph_reports if r.sizes.startswith("symbolic")]
    assert symbolic, [r.sizes for r in graph_reports]
    # K = 7 and N = 21 are still padded to 8 and 24
    assert any("constant_pad_nd" in op for k in symbolic[0].kernels for op in k.ops), symbolic[0]
