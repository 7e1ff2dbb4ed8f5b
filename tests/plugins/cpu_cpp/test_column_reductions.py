"""cpu_cpp's column form of a reduction (``sdk.clike``'s emitter): a sum over the rows of a
row-major matrix, fused with the stores of the matrix it sums (a bias gradient), runs as
blocks of contiguous columns, rows outer, instead of walking each column down its rows."""

from __future__ import annotations

import pytest
import torch

import sdk
from tests.opcheck import check

COLUMN_FORM = "column blocks of up to"


def _kernels(fn, *inputs):
    report = sdk.explain(fn, *inputs, backend="sdk:cpu_cpp", fallback=False)
    return [k for g in report.graphs for k in g.kernels]


@pytest.mark.parametrize("cols", [100, 2048])  # (100: a last block of 36 columns)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_bias_gradient_is_reduced_by_column_blocks(cols, dtype):
    """The GELU backward of an MLP and its bias gradient: one kernel in the column form;
    forward and gradients as eager's."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, cols, generator=g).to(dtype).requires_grad_(True)
    w = torch.randn(cols, generator=g).to(dtype).requires_grad_(True)

    def f(x, w):
        y = torch.nn.functional.gelu(x * w)
        return y, y.sum(0), (x * 3).prod(0)

    (k,) = [k for k in _kernels(f, x.detach(), w.detach()) if "aten.sum.dim_IntList" in k.ops]
    assert COLUMN_FORM in k.source, k.source
    check(f, [x, w], plugin="cpu_cpp")


def test_row_reductions_and_mixed_strides_keep_the_rows_form():
    """A sum along the contiguous dimension, and a column sum that also reads a
    transposed operand (contiguous along the rows), are not column reductions."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 96, generator=g)
    b = torch.randn(96, 64, generator=g)
    for fn in (lambda a, b: (a * 2).sum(-1), lambda a, b: (a + b.t()).sum(0)):
        kernels = [k for k in _kernels(fn, a, b) if "aten.sum.dim_IntList" in k.ops]
        assert kernels and all(COLUMN_FORM not in k.source for k in kernels), kernels
        torch.testing.assert_close(torch.compile(fn, backend="sdk:cpu_cpp")(a, b), fn(a, b))


def test_values_hoisted_out_of_every_loop_are_declared():
    """A 0-d input read once for the whole kernel (a loss's upstream gradient) is emitted
    before the column blocks: the column form is rendered before the kernel's top lines
    are taken (taken first, the value was used undeclared and the C++ did not compile)."""
    g = torch.Generator().manual_seed(0)
    x, s = torch.randn(37, 100, generator=g), torch.tensor(0.25)

    def f(x, s):
        y = x * (s / 3.0)
        return y, y.sum(0)

    (k,) = [k for k in _kernels(f, x, s) if "aten.sum.dim_IntList" in k.ops]
    assert COLUMN_FORM in k.source, k.source
    torch.testing.assert_close(torch.compile(f, backend="sdk:cpu_cpp")(x, s), f(x, s))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_column_adds_its_rows_in_double(dtype):
    """Each column adds its rows in one chain, as long as the column: in float, 1e8 + 1 is
    1e8, and ``[1e8, 1, ..., 1, -1e8]`` summed down 4096 rows gave 0 (eager's cascade sum
    gives 4080). In double, the chain is exact here (4094), and a bias gradient's error no
    longer grows with its rows (MobileViT's attention bias at 3x80 failed Dynamo's RMSE
    rule against fp64 with 4 times eager's error)."""
    x = torch.ones(4096, 64)
    x[0], x[-1] = 1e8, -1e8

    def f(x):
        return (x * 1.0).sum(0)

    (k,) = _kernels(f, x)
    assert COLUMN_FORM in k.source and "double" in k.source, k.source
    backend = sdk.backend("cpu_cpp", fallback=False)
    assert torch.compile(f, backend=backend, dynamic=False)(x).tolist() == [4094.0] * 64
    # random values: the double sum, rounded once (a float chain of 300 rounds each step)
    y = torch.randn(300, 96, generator=torch.Generator().manual_seed(0)).to(dtype)
    got = torch.compile(f, backend=backend, dynamic=False)(y)
    torch.testing.assert_close(got, y.double().sum(0).to(dtype), rtol=0, atol=0)


def test_a_column_over_a_symbolic_count_of_rows_adds_them_in_double():
    """Under ``dynamic=True`` the rows (and here the columns) are sizes of the call (a bias
    gradient over batch x tokens): one program, in the column form, in double, at every
    count of rows. The rows
    form's float ``simd`` sums lost MobileViT's attention bias gradient at 3x80 (4 times
    eager's error against fp64)."""
    w = torch.randn(96, generator=torch.Generator().manual_seed(1))

    def f(x):
        return (x * w).sum(0)

    compiled = torch.compile(f, backend=sdk.backend("cpu_cpp", fallback=False), dynamic=True)
    with sdk.collect_reports() as reports:
        for rows in (300, 517, 4096):
            x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(rows))
            # each product rounded to float, as eager's; their sum in double, rounded once
            want = (x * w).double().sum(0).float()
            torch.testing.assert_close(compiled(x), want, rtol=0, atol=0)
    (graph,) = reports.graphs
    assert "symbolic" in graph.sizes, graph.sizes
    (k,) = [k for k in graph.kernels if "aten.sum.dim_IntList" in k.ops]
    assert COLUMN_FORM in k.source and "double" in k.source, k.source
