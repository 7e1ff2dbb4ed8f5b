"""Scatters that write one element per output position are pointwise kernels, and
column reductions fuse with the pointwise work that feeds them.

Each case is compared with eager on fresh random inputs; what was generated is read from
``sdk.explain``.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

import sdk
from sdk.core.lowering.movement import SCATTER_MAX_PER_ROW
from tests.plugins_under_test import PLUGINS, device_of


def _compiled(fn, plugin):
    return torch.compile(fn, backend=sdk.backend(plugin, fallback=False))


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("sl", [(1, 4, 1), (2, 9, 3), (-3, None, 1), (0, 6, 2), (4, 4, 1)])
def test_slice_scatter(plugin, sl):
    start, end, step = sl
    dev = device_of(plugin)
    x = torch.randn(4, 10, 6, device=dev)
    n = len(range(10)[slice(start, end, step)])
    src = torch.randn(4, n, 6, device=dev)

    def fn(a, b):
        return torch.slice_scatter(a * 2, b + 1, 1, start, end, step)

    torch.testing.assert_close(_compiled(fn, plugin)(x, src), fn(x, src))
    report = sdk.explain(fn, x, src, backend=f"sdk:{plugin}")
    assert not report.fallbacks and not report.externs


@pytest.mark.parametrize("plugin", PLUGINS)
def test_select_scatter(plugin):
    dev = device_of(plugin)
    x, src = torch.randn(4, 10, 6, device=dev), torch.randn(4, 6, device=dev)

    def fn(a, b):
        return torch.select_scatter(a * 2, b, 1, -2)

    torch.testing.assert_close(_compiled(fn, plugin)(x, src), fn(x, src))


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("tensor_src", [False, True])
@pytest.mark.parametrize("per_row", [1, 3])
def test_scatter_a_few_indices_per_row(plugin, dim, tensor_src, per_row):
    """One index per row (a cross-entropy's backward), or k distinct ones (topk's)."""
    dev = device_of(plugin)
    x = torch.randn(8, 20, device=dev)
    shape = (8, per_row) if dim == 1 else (per_row, 20)
    index = torch.rand(8, 20).argsort(dim=dim).narrow(dim, 0, per_row).to(dev)
    src = torch.randn(shape, device=dev)

    def fn(a, i, s):
        return torch.scatter(a * 3, dim, i, s * 2 if tensor_src else -1.0)

    torch.testing.assert_close(_compiled(fn, plugin)(x, index, src), fn(x, index, src))
    report = sdk.explain(fn, x, index, src, backend=f"sdk:{plugin}")
    assert not report.fallbacks and not report.externs


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("base", ["a * 1", "torch.zeros_like(a)"])
def test_scatter_index_out_of_range_raises(plugin, base):
    """As in eager, also where the zeros scattered into are recomputed, never stored.
    On a GPU the device-side assert poisons the process: a subprocess there; on the CPU
    the same code runs in this process (a child cost ~8 s of CI's 2 cores)."""
    code = (
        "import torch, sdk\n"
        f"dev = {device_of(plugin)!r}\n"
        "x = torch.randn(8, 20, device=dev); i = torch.randint(0, 20, (8, 1), device=dev)\n"
        "i[3] = 20\n"
        f"f = lambda a, i: torch.scatter({base}, 1, i, -1.0).sum(1)\n"
        f"out = torch.compile(f, backend=sdk.backend({plugin!r}, fallback=False))(x, i)\n"
        "if dev == 'cuda': torch.cuda.synchronize()\n"
    )
    if device_of(plugin) == "cpu":
        with pytest.raises(Exception, match=r"(?i)out of bounds"):
            exec(code, {})
        return
    p = subprocess.run(
        [sys.executable, "-c", code + "print('NO ERROR')\n"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "NO ERROR" not in p.stdout
    assert re.search("(?i)out of bounds|device-side assert", p.stderr), p.stderr[-2000:]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_embedding_gradient_of_indices_made_in_the_graph(plugin):
    """BERT-style token types: ``zeros_like(ids)`` looked up in a two-row table. The
    backward's accumulating index_put gathers through the zeros, which are also its index
    (its bounds check reads them): recomputing them where read must keep them readable. It
    once dropped them, and MobileBERT's whole backward ran in ATen ("buf138 is read before
    any step writes it")."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    types, words = torch.nn.Embedding(2, 16).to(dev), torch.nn.Embedding(50, 16).to(dev)

    def f(ids):
        return (words(ids) + types(torch.zeros_like(ids))).relu().sum()

    ids = torch.randint(0, 50, (4, 8), device=dev)
    with sdk.collect_reports() as reports:
        _compiled(f, plugin)(ids).backward()
    got = [types.weight.grad, words.weight.grad]
    types.weight.grad = words.weight.grad = None
    f(ids).backward()
    torch.testing.assert_close(got, [types.weight.grad, words.weight.grad])
    assert [g.kind for g in reports.graphs] == ["forward", "backward"]
    assert not any(g.fallbacks for g in reports.graphs)


def test_a_scatter_with_equal_indices_in_a_row_takes_the_last_as_eager_on_the_cpu():
    x, index = torch.randn(8, 20), torch.randint(0, 4, (8, 6))  # repeats in every row
    src = torch.randn(8, 6)

    def fn(a, i, s):
        return torch.scatter(a, 1, i, s)

    torch.testing.assert_close(
        _compiled(fn, "cpu_cpp")(x, index, src), fn(x, index, src), rtol=0, atol=0
    )
    assert not sdk.explain(fn, x, index, src, backend="sdk:cpu_cpp").fallbacks


@pytest.mark.parametrize(
    "shape",
    [(8, SCATTER_MAX_PER_ROW + 1), (5, 3)],  # too many per row; fewer rows than the target
)
def test_other_scatters_are_library_calls(shape):
    x, index = torch.randn(8, 20), torch.randint(0, 20, shape)
    src = torch.randn(shape)

    def fn(a, i, s):
        return torch.scatter(a, 1, i, s)

    torch.testing.assert_close(
        torch.compile(fn, backend="sdk:cpu_cpp")(x, index, src), fn(x, index, src)
    )
    report = sdk.explain(fn, x, index, src, backend="sdk:cpu_cpp")
    assert [f.op for f in report.fallbacks] == ["aten.scatter.src"]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_cross_entropy_gradient(plugin):
    dev = device_of(plugin)
    w = torch.randn(20, 30, device=dev, requires_grad=True)
    x, target = torch.randn(16, 20, device=dev), torch.randint(0, 30, (16,), device=dev)

    def fn(a):
        return torch.nn.functional.cross_entropy(a @ w, target)

    (got,) = torch.autograd.grad(_compiled(fn, plugin)(x), w)
    (want,) = torch.autograd.grad(fn(x), w)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_column_reduction_fuses_its_producer(plugin, dtype):
    """A sum over the leading dim (a bias gradient) reads its pointwise producer
    transposed; one kernel computes both, also when the producer is an output."""
    dev = device_of(plugin)
    x = torch.randn(300, 130, device=dev, dtype=dtype)

    def fn(t):
        y = torch.nn.functional.gelu(t * 3)
        return y, y.sum(0), (y * t).sum(0)

    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
    for got, want in zip(_compiled(fn, plugin)(x), fn(x)):
        torch.testing.assert_close(got, want, **tol)
    (graph,) = sdk.explain(fn, x, backend=f"sdk:{plugin}").graphs
    assert len(graph.kernels) == 1, [k.ops for k in graph.kernels]


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("reps", [(2, 3), (1, 2, 1), (3, 1, 1, 2)])
def test_repeat(plugin, reps):
    dev = device_of(plugin)
    x = torch.randn(3, 1, 4, device=dev)[:, :, : len(reps) + 1]

    def fn(t):
        return (t * 2).repeat(*reps) + 1

    x = x.reshape(x.shape[0], -1) if len(reps) == 2 else x
    torch.testing.assert_close(_compiled(fn, plugin)(x), fn(x))
    report = sdk.explain(fn, x, backend=f"sdk:{plugin}")
    assert not report.fallbacks
