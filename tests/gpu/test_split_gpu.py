"""Split reductions by the grid's size on the GPU (issue 49), at the sizes that take them:
BatchNorm2d training over 64 channels of 16x56x56 (NCHW: rows; channels-last: columns),
forward and backward, fp32 and bf16; a column sum of few columns; a Linear's bias gradient
over 384 columns of 12000 rows; LayerNorm's weight and bias gradients over many rows. ``heuristics.SPLIT_BY_GRID`` on (the default; set here so
that the file tests the split whatever the default), every output and gradient against eager, and the split chain read from
``sdk.explain``. The CPU file (tests/plugins/cuda_triton/test_split_reductions.py) runs the
same chains under Triton's interpreter at small sizes.
"""

from __future__ import annotations

import pytest
import torch

import sdk
from tests.plugins.cuda_triton.test_split_reductions import _by_grid, _chain  # noqa: F401

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
#: fp32: reductions over 50176 elements in another order than cuDNN's; bf16: one rounding of
#: the outputs and of each gradient (the tolerances Inductor's tests give bf16)
TOL = {"fp32": {"rtol": 1e-4, "atol": 1e-4}, "bf16": {"rtol": 2e-2, "atol": 2e-2}}


def _split_kernels(report: sdk.ExplainReport) -> list[list[str]]:
    return [c for g in report.graphs for k in g.kernels if (c := _chain(k.source)) is not None]


def _step(m, x, w):
    return (m(x).float() * w.float()).mean()


def _train_both(bn, ref, x):
    """One training step of ``bn`` compiled and of ``ref`` (its copy) in eager, on ``x`` and a
    random weighting ``w`` of the output: (the compiled step, its loss, eager's loss, the
    compiled and eager inputs, ``w``)."""
    w = torch.randn_like(x)
    compiled = torch.compile(_step, backend=sdk.backend("cuda_triton", fallback=False))
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = compiled(bn, x1, w), _step(ref, x2, w)
    got.backward()
    want.backward()
    return compiled, got, want, x1, x2, w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.usefixtures("_by_grid")
def test_batchnorm_training_split(dtype, channels_last):
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(64).cuda().to(DTYPES[dtype])
    ref = torch.nn.BatchNorm2d(64).cuda().to(DTYPES[dtype])
    with torch.no_grad():
        bn.weight.normal_()
        bn.bias.normal_()
    ref.load_state_dict(bn.state_dict())
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = (torch.randn(16, 64, 56, 56, device="cuda") * 2 + 1).to(DTYPES[dtype], memory_format=fmt)
    compiled, got, want, x1, x2, w = _train_both(bn, ref, x)
    tol = TOL[dtype]
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(x1.grad.float(), x2.grad.float(), **tol)
    torch.testing.assert_close(bn.weight.grad.float(), ref.weight.grad.float(), **tol)
    torch.testing.assert_close(bn.bias.grad.float(), ref.bias.grad.float(), **tol)
    torch.testing.assert_close(bn.running_mean.float(), ref.running_mean.float(), **tol)
    torch.testing.assert_close(bn.running_var.float(), ref.running_var.float(), **tol)
    chains = _split_kernels(sdk.explain(compiled, bn, x1, w))
    assert chains and any(len(c) >= 2 for c in chains), chains  # a chain of several stages


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(700, 48), (4096, 256), (2, 512, 28, 28)], ids=str)
@pytest.mark.usefixtures("_by_grid")
def test_short_column_chains_split(dtype, shape):
    """BatchNorm in training over short columns of several stages (split from 512 rows):
    BatchNorm1d over 700 and 4096 rows, channels-last BatchNorm2d over 2x28x28 per channel."""
    torch.manual_seed(0)
    cls = torch.nn.BatchNorm1d if len(shape) == 2 else torch.nn.BatchNorm2d
    bn = cls(shape[1]).cuda().to(DTYPES[dtype])
    ref = cls(shape[1]).cuda().to(DTYPES[dtype])
    ref.load_state_dict(bn.state_dict())
    x = torch.randn(shape, device="cuda").to(DTYPES[dtype])
    if len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    compiled, got, want, x1, x2, w = _train_both(bn, ref, x)
    tol = TOL[dtype]
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(x1.grad.float(), x2.grad.float(), **tol)
    torch.testing.assert_close(bn.weight.grad.float(), ref.weight.grad.float(), **tol)
    torch.testing.assert_close(bn.running_var.float(), ref.running_var.float(), **tol)
    assert _split_kernels(sdk.explain(compiled, bn, x1, w))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [(8, 1500), (3, 2731)], ids=str)
@pytest.mark.usefixtures("_by_grid")
def test_linear_bias_gradient_over_long_columns_splits(dtype, rows):
    """A Linear's bias gradient over 384 columns of 8 x 1500 rows (Whisper-tiny's encoder;
    unsplit it ran on 24 programs) and of an odd 3 x 2731 (partial chunks): the bias and
    weight gradients and the input's against eager, and the split in ``explain``."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(384, 384).cuda().to(DTYPES[dtype])
    x = torch.randn(*rows, 384, device="cuda").to(DTYPES[dtype])
    w = torch.randn(*rows, 384, device="cuda")
    compiled = torch.compile(_step, backend=sdk.backend("cuda_triton", fallback=False))
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = compiled(lin, x1, w)
    got.backward()
    grads = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad()
    want = _step(lin, x2, w)
    want.backward()
    tol = TOL[dtype]
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(x1.grad.float(), x2.grad.float(), **tol)
    for g, p in zip(grads, lin.parameters()):
        torch.testing.assert_close(g.float(), p.grad.float(), **tol)
    assert _split_kernels(sdk.explain(compiled, lin, x1, w))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.usefixtures("_by_grid")
def test_column_sum_and_layernorm_gradients_split(dtype):
    torch.manual_seed(0)
    x = torch.randn(65536, 24, device="cuda", dtype=DTYPES[dtype])

    def colsum(x):
        return x.sum(0), x.float().var(0)

    got = torch.compile(colsum, backend=sdk.backend("cuda_triton", fallback=False))(x)
    want = colsum(x.double())
    for g, e in zip(got, want):
        torch.testing.assert_close(g.double(), e.to(g.dtype).double(), **TOL[dtype])
    assert _split_kernels(sdk.explain(colsum, x, backend="sdk:cuda_triton", fallback=False))

    ln = torch.nn.LayerNorm(24).cuda().to(DTYPES[dtype])
    ref = torch.nn.LayerNorm(24).cuda().to(DTYPES[dtype])
    ref.load_state_dict(ln.state_dict())
    compiled = torch.compile(lambda x: ln(x).float().square().mean(), backend="sdk:cuda_triton")
    compiled(x).backward()
    ref(x).float().square().mean().backward()
    torch.testing.assert_close(ln.weight.grad.float(), ref.weight.grad.float(), **TOL[dtype])
    torch.testing.assert_close(ln.bias.grad.float(), ref.bias.grad.float(), **TOL[dtype])


@pytest.mark.parametrize("shape", [(200000, 16), (9001, 640), (64, 50000)], ids=str)
@pytest.mark.usefixtures("_by_grid")
def test_last_program_combine_is_exact_at_every_call(shape):
    """The last program of each block of rows combines a split reduction's partials
    (``SPLIT_LAST_PROGRAM_COMBINES``): every program stores its partials, then counts itself
    in on the block's counter; the last to arrive reads them all. A partial read before its
    store is visible, or a counter not back at 0 after a launch, gives another answer at
    some call: 30 calls on the same input give the same bits, and fresh inputs eager's
    values. Column sums of 16 columns (a combine over 1024 partials, 16 iterations) and of
    640, and row maxima and sums of 64 long rows."""
    torch.manual_seed(0)

    def f(x):
        if shape[0] > shape[1]:
            return x.sum(0), x.amax(0), (x * x).sum(0)
        return x.sum(1), x.amax(1), x.argmax(1)

    compiled = torch.compile(f, backend=sdk.backend("cuda_triton", fallback=False))
    x = torch.randn(shape, device="cuda")
    first = compiled(x)
    for _ in range(30):
        for a, b in zip(compiled(x), first, strict=True):
            assert torch.equal(a, b)
    for _ in range(5):
        x = torch.randn(shape, device="cuda")
        for a, b in zip(compiled(x), f(x.double()), strict=True):
            torch.testing.assert_close(a, b.to(a.dtype), rtol=1e-5, atol=1e-3)
    chains = _split_kernels(sdk.explain(compiled, x))
    assert chains and all(c == ["pre"] for c in chains), chains
