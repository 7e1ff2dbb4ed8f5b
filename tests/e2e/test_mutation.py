"""Input mutation and aliasing behave exactly as in eager mode."""

from __future__ import annotations

import copy

import pytest
import torch

import sdk
from tests.gpu.common import rmse_ok
from tests.plugins_under_test import PLUGINS, device_of

pytestmark = pytest.mark.parametrize("plugin", PLUGINS)


def compiled(fn, plugin):
    return torch.compile(fn, backend=sdk.backend(plugin))


def test_input_mutation(plugin):
    dev = device_of(plugin)

    def fn(x, y):
        x.mul_(2).add_(y)
        y[0] = 5.0
        return x.sum()

    a, b = torch.randn(8, 4, device=dev), torch.randn(8, 4, device=dev)
    a2, b2 = a.clone(), b.clone()
    out = compiled(fn, plugin)(a, b)
    ref = fn(a2, b2)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(a, a2)
    torch.testing.assert_close(b, b2)


def test_mutation_through_a_view(plugin):
    dev = device_of(plugin)

    def fn(x):
        x[:, 1:3].sigmoid_()
        return x * 2

    a = torch.randn(6, 5, device=dev)
    a2 = a.clone()
    torch.testing.assert_close(compiled(fn, plugin)(a), fn(a2))
    torch.testing.assert_close(a, a2)


def test_outputs_alias_inputs_as_in_eager(plugin):
    dev = device_of(plugin)

    def fn(x):
        return x.t(), x[1], x.view(-1), x + 1

    a = torch.randn(4, 6, device=dev)
    outs = compiled(fn, plugin)(a)
    refs = fn(a)
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o, r)
        assert o.stride() == r.stride()
    # the views share storage with the input, as in eager
    assert outs[0].data_ptr() == a.data_ptr()
    a[1, 2] = 100.0
    assert outs[1][2].item() == 100.0 and outs[2][8].item() == 100.0
    assert outs[3][1, 2].item() != 101.0  # a fresh tensor


def test_view_of_an_intermediate_is_correct_and_independent(plugin):
    dev = device_of(plugin)

    def fn(x):
        y = x.exp()
        return y.t(), y[:, 0]

    a = torch.randn(5, 3, device=dev)
    o1, o2 = compiled(fn, plugin)(a)
    r1, r2 = fn(a)
    torch.testing.assert_close(o1, r1)
    torch.testing.assert_close(o2, r2)
    o1[0, 0] = -1.0  # eager: o2 is a view of the same y
    assert o2[0].item() == -1.0


def test_reused_buffers_do_not_leak_between_outputs(plugin):
    """Memory planning recycles dead temporaries, never a buffer that is returned."""
    dev = device_of(plugin)

    def fn(x):
        a = (x * 2).sum(1)  # reduction forces temporaries
        b = (x + 1).tanh()
        c = (b * 3).sum(0)
        d = (x - 1).sigmoid()
        return a, c, d

    x = torch.randn(64, 32, device=dev)
    for o, r in zip(compiled(fn, plugin)(x), fn(x)):
        torch.testing.assert_close(o, r)


def test_batch_norm_updates_running_stats_and_eval_uses_them(plugin):
    dev = device_of(plugin)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).to(
        dev
    )
    ref = __import__("copy").deepcopy(m)
    x = torch.randn(2, 3, 12, 12, device=dev)
    torch.testing.assert_close(compiled(m, plugin)(x), ref(x))
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(m[1].running_var, ref[1].running_var)
    m.eval(), ref.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(m, plugin)(x), ref(x))


def test_a_view_returned_by_a_fallback_op_keeps_its_memory(plugin):
    """An op run through ATen may return a view of a buffer a kernel wrote; memory
    planning must not hand that buffer to a later kernel."""
    dev = device_of(plugin)

    def fn(x):
        y = x.exp()
        v = torch.ops.aten.diagonal(y)  # no IR lowering: a fallback that returns a view
        z = (x * 3).sin()
        w = (z + 1).cos()
        return v * 1, w

    x = torch.randn(6, 6, device=dev)
    for a, b in zip(compiled(fn, plugin)(x), fn(x)):
        torch.testing.assert_close(a, b)


# -- writes into graph inputs done by the program's kernels --------------------------------
# A codegen plugin's graphs keep AOTAutograd's input mutations (BatchNorm's running
# statistics) as copy_ nodes; the kernel that computes the new value writes it into the
# input (core/lowering/mutation.py), where AOTAutograd would copy it after the call.


def _copies(reports: list) -> tuple[int, int, list[str]]:
    """copy_ nodes done in kernels, run through ATen, and the kernels that do them."""
    in_kernels = [k.name for r in reports for k in r.kernels if "aten.copy_.default" in k.ops]
    in_kernel_nodes = sum(k.ops.count("aten.copy_.default") for r in reports for k in r.kernels)
    in_aten = sum(
        op.op == "aten.copy_.default" for r in reports for op in (*r.externs, *r.fallbacks)
    )
    return in_kernel_nodes, in_aten, in_kernels


class _ConvBN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.bn1 = torch.nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return self.bn1(y.mean((2, 3)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_batch_norm_training_writes_running_stats_in_its_kernels(plugin, dtype, graph_reports):
    """Three training steps on fresh inputs: outputs, accumulated gradients and every buffer
    (running mean and variance; batches tracked exactly) within Dynamo's rule of eager (RMSE
    against an fp64 model at most twice eager's); the six running statistics are written by
    the kernels that compute them, and no copy_ runs through ATen."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = _ConvBN().to(dev, dtype)
    eager = copy.deepcopy(model)
    ref = copy.deepcopy(model).double()
    step = compiled(model, plugin)
    checks = []
    for _ in range(3):
        x = torch.randn(4, 3, 10, 10, device=dev, dtype=dtype)
        outs = step(x), eager(x), ref(x.double())
        checks.append(("output", *(o.detach() for o in outs)))
        for out in outs:
            out.float().square().sum().backward()
    named = [dict(m.named_buffers()) for m in (model, eager, ref)]
    for name in named[0]:
        if name.endswith("num_batches_tracked"):
            assert int(named[0][name]) == int(named[1][name]) == 3, name
        else:
            checks.append((name, *(n[name] for n in named)))
    grads = [dict((k, p.grad) for k, p in m.named_parameters()) for m in (model, eager, ref)]
    checks += [(f"{name}.grad", *(g[name] for g in grads)) for name in grads[0]]
    for what, got, want, r64 in checks:
        ok, why = rmse_ok(got.float(), want.float(), r64)
        assert ok, f"{what}: {why}"
    in_kernels, in_aten, kernels = _copies(graph_reports)
    assert (in_kernels, in_aten) == (6, 0), kernels
    # the running mean and variance are written by the kernel that reduces the batch
    assert any(
        k.ops.count("aten.copy_.default") == 2 and "aten.var_mean.correction" in k.ops
        for r in graph_reports
        for k in r.kernels
    ), kernels


def test_a_write_into_an_input_waits_for_every_reader_of_it(plugin):
    """The input is read (a reduction over it, a transposed read) before the kernel that
    writes it runs, and the graph's later reads see the new values."""
    dev = device_of(plugin)

    def fn(x, y):
        s = x.sum(0)
        t = x.t() @ y
        x.mul_(2).add_(1)
        return s, t, x.sum(1), x * 3

    for _ in range(2):
        a, b = torch.randn(6, 6, device=dev), torch.randn(6, 4, device=dev)
        a2 = a.clone()
        for got, want in zip(compiled(fn, plugin)(a, b), fn(a2, b)):
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(a, a2)


def test_writes_into_an_input_of_symbolic_sizes(plugin, graph_reports):
    """With dynamic=True the write is a kernel too (no op falls back, even with
    fallback=False), compiled once for every size."""
    dev = device_of(plugin)

    def fn(x, y):
        x.add_(y * 2)
        return (x * 3).sum(0)

    step = torch.compile(fn, backend=sdk.backend(plugin, fallback=False), dynamic=True)
    for n in (5, 7, 11):
        a, b = torch.randn(n, 4, device=dev), torch.randn(n, 4, device=dev)
        a2 = a.clone()
        torch.testing.assert_close(step(a, b), fn(a2, b))
        torch.testing.assert_close(a, a2)
    assert len(graph_reports) == 1 and graph_reports[0].sizes.startswith("symbolic")
    assert _copies(graph_reports)[:2] == (1, 0)


def _read_sum_and_write(plugin, graph_reports, read, shape) -> list[str]:
    """``read(x) * 2``, a column sum of ``x`` and ``x.mul_(3)`` against eager (outputs and
    the written input); the core's fusion refusals."""
    dev = device_of(plugin)

    def fn(x):
        y = read(x) * 2
        s = x.sum(0)
        x.mul_(3)
        return y, s

    a = torch.randn(*shape, device=dev)
    a2 = a.clone()
    for got, want in zip(compiled(fn, plugin)(a), fn(a2)):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(a, a2)
    return [f.reason for r in graph_reports for f in r.core_fusion_refusals]


def test_no_kernel_reads_an_input_elsewhere_than_it_writes_it(plugin, graph_reports):
    """A flipped read of the input and the write into it would share a kernel (both
    iterate over the input): one program would read elements another already overwrote.
    The scheduler refuses that fusion, and says why."""
    reasons = _read_sum_and_write(plugin, graph_reports, lambda x: x.flip(0), (64, 64))
    assert any("at other elements than" in why for why in reasons), reasons


@pytest.mark.parametrize("shape", [(64, 64), (64, 48)], ids=["square", "oblong"])
def test_a_transposed_read_of_an_input_it_writes_shares_its_kernel(plugin, graph_reports, shape):
    """A transposed read, a column sum and the write into the input: each element is read
    and written at one point of the kernel's loops (x[i, j] at column j, row i), so the
    three share a kernel, square or not. (A square input fits the loops by position too,
    the wrong way round; mapped so, the write looked like a read at other elements.)"""
    reasons = _read_sum_and_write(plugin, graph_reports, lambda x: x.t(), shape)
    assert not any("at other elements than" in why for why in reasons), reasons
    assert [len(r.kernels) for r in graph_reports] == [1], [str(r) for r in graph_reports]


@pytest.mark.parametrize(
    "write",
    [
        lambda x: x.copy_(x.flip(0) * 2),
        lambda x: x.copy_(x.t() + 1),
        lambda x: x.copy_(torch.roll(x, 1, 1)),
        lambda x: x[1:].copy_(x[:-1].clone()),
    ],
    ids=["flip", "transpose", "roll", "shifted_part"],
)
def test_a_write_into_an_input_that_reads_other_elements_of_it(plugin, write):
    """Every element is written from the input's old values, never from one a concurrent
    program already overwrote."""
    dev = device_of(plugin)

    def fn(x):
        write(x)
        return x + 1

    a = torch.randn(64, 64, device=dev)
    a2 = a.clone()
    torch.testing.assert_close(compiled(fn, plugin)(a), fn(a2))
    torch.testing.assert_close(a, a2)


def test_a_chain_gets_functional_graphs(plugin, graph_reports):
    """Writes into inputs stay outside the graphs of a chain (its partitions may go to a
    graph-level plugin): AOTAutograd applies them, and the results are eager's."""
    dev = device_of(plugin)
    model = _ConvBN().to(dev)
    ref = copy.deepcopy(model)
    x = torch.randn(4, 3, 10, 10, device=dev)
    # (any chain; naming the backend itself in it is an OptionError since issue 41)
    other = "cuda_triton" if plugin == "cpu_cpp" else "cpu_cpp"
    got = torch.compile(model, backend=sdk.backend(plugin, chain=[other]))(x)
    torch.testing.assert_close(got, ref(x))
    for (name, a), (_, b) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(a, b, msg=name)
    assert _copies(graph_reports)[:2] == (0, 0)
