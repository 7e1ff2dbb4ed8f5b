"""The C-like scaffold plugin (``python -m sdk new-plugin NAME --c-like``), in process: what
``sdk.clike``'s emitter gives every C target. An out-of-range indirect index raises
IndexError naming the kernel; symbolic sizes compile a graph once for many lengths; fp32 and
bf16 training steps match eager at Inductor's tolerances. (tests/contract/test_scaffold.py installs
the generated package and runs the conformance suite on it.)"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import sdk
import sdk.toolchain
from sdk.scaffold import generate, module_name

NAME = "clk"
#: Inductor's tolerances (torch._inductor's test_torchinductor: fp32 1.3e-5 / 1e-5, bf16
#: 1.6e-2 / 1e-2), as in the conformance suite.
TOL = {
    torch.float32: {"rtol": 1.3e-5, "atol": 1e-5},
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
}


def _has_compiler() -> bool:
    try:
        sdk.toolchain.find_compiler("c")
    except FileNotFoundError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _has_compiler(), reason="no C compiler")


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated plugin package's directory (on ``sys.path`` for this module)."""
    root = generate(NAME, tmp_path_factory.mktemp("scaffold"), c_like=True)
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for mod in [m for m in sys.modules if m.startswith(module_name(NAME))]:
        del sys.modules[mod]


@pytest.fixture
def backend(package, fake_dist, use_registry, tmp_path, monkeypatch):
    """``sdk.backend(NAME)``, with the generated plugin registered and a private cache."""
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    importlib.import_module(module_name(NAME))
    use_registry(fake_dist(f"{NAME}-sdk-plugin", {NAME: module_name(NAME)}))
    return sdk.backend(NAME)


def _generated(report: sdk.ExplainReport) -> None:
    """The plugin rendered kernels and nothing ran through ATen."""
    assert report.kernels and not report.fallbacks, str(report)


def test_out_of_range_index_raises_index_error(backend):
    weight = torch.randn(50, 8)

    def f(idx, w):
        return w[idx] * 2.0

    good = torch.tensor([[1, 2, 3], [49, 0, -1]])  # a negative index wraps, as in torch
    _generated(sdk.explain(f, good, weight, backend=backend))
    compiled = torch.compile(f, backend=backend)
    torch.testing.assert_close(compiled(good, weight), f(good, weight))
    for bad in (50, -51, 1000):
        idx = good.clone()
        idx[1, 1] = bad
        with pytest.raises(
            IndexError,
            match=rf"^index {bad} is out of bounds for dimension "
            rf"with size 50 \(kernel k_\w+\)$",
        ):
            compiled(idx, weight)
        with pytest.raises(IndexError):  # as eager does
            f(idx, weight)
    # the error is cleared: the kernel runs right after one
    torch.testing.assert_close(compiled(good, weight), f(good, weight))


def test_out_of_range_gather_raises_in_a_reduction(backend):
    """A bind inside the vectorized inner loop of a reduction is checked too."""

    def f(x, idx):
        return torch.gather(x, 1, idx).sum(-1)

    x = torch.randn(6, 40)
    idx = torch.randint(0, 40, (6, 5000))
    _generated(sdk.explain(f, x, idx, backend=backend))
    compiled = torch.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x, idx), f(x, idx), **TOL[torch.float32])
    idx[3, 4321] = 40
    with pytest.raises(
        IndexError,
        match=r"^index 40 is out of bounds for dimension with "
        r"size 40 \(kernel k_\w+\)$",
    ):
        compiled(x, idx)


def test_symbolic_sizes_compile_once(backend, graph_reports):
    def f(x, w):
        return torch.softmax(torch.relu(x * w + 1.0), -1).sum(0) + x.amax(-1).mean()

    lengths = (5, 17, 64, 300, 4500)
    compiled = torch.compile(f, backend=backend, dynamic=True)
    for n in lengths:
        x, w = torch.randn(3, n), torch.randn(n)
        torch.testing.assert_close(compiled(x, w), f(x, w), **TOL[torch.float32])
    assert len(graph_reports) == 1, [r.sizes for r in graph_reports]
    report = graph_reports[0]
    assert report.sizes.startswith("symbolic: "), report.sizes
    assert report.kernels and not report.fallbacks
    assert any("const int64_t s" in k.source for k in report.kernels)


def _fused(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pointwise ops, a softmax and a max, forward and backward: every kernel the plugin's."""
    h = F.gelu(x * y + 1.0)
    return torch.softmax(h, -1) * x.amax(-1, keepdim=True) + torch.tanh(h) * y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_and_backward_match_eager(backend, dtype):
    def step(fn, x, y, grad):
        x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
        out = fn(x, y)
        return [out, *torch.autograd.grad(out, [x, y], grad)]

    x = torch.randn(16, 48, dtype=dtype, requires_grad=True)
    report = sdk.explain(_fused, x, torch.randn(16, 48, dtype=dtype), backend=backend)
    assert [g.kind for g in report.graphs] == ["forward", "backward"], str(report)
    assert all(g.kernels for g in report.graphs) and not report.fallbacks, str(report)
    compiled = torch.compile(_fused, backend=backend)
    for _ in range(3):  # fresh random inputs and upstream gradients each time
        x, y, grad = (torch.randn(16, 48, dtype=dtype) for _ in range(3))
        for got, want in zip(step(compiled, x, y, grad), step(_fused, x, y, grad)):
            torch.testing.assert_close(got, want, **TOL[dtype])


def test_masks_and_integer_bit_ops(backend):
    """``~`` on a bool mask is a logical not (``~True`` is ``-2`` in C, nonzero), on
    integers a bitwise one."""

    def f(x, i):
        keep = ~(x > 0.5)
        return torch.where(keep, x, -x), ~i, (~keep).sum(-1)

    x, i = torch.rand(7, 33), torch.randint(-100, 100, (7, 33))
    _generated(sdk.explain(f, x, i, backend=backend))
    compiled = torch.compile(f, backend=backend)
    for got, want in zip(compiled(x, i), f(x, i)):
        torch.testing.assert_close(got, want)


def _elu_net(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x * 2.0, alpha=0.7) * x + 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_own_elu_lowering_is_used_and_matches_eager(backend, dtype):
    """The scaffold's ``sdk_lower_op`` lowers ``aten.elu`` in place of the core's lowering
    (``test_the_plugins_elu_lowering_is_the_one_used``): in explain, a generated kernel covers the
    elu call and nothing falls back, forward and backward (elu_backward is decomposed);
    the results match eager at Inductor's tolerances, in fp32 and in bf16 (computed in fp32,
    rounded once)."""
    x = torch.randn(16, 40, dtype=dtype, requires_grad=True)
    report = sdk.explain(_elu_net, x, backend=backend)
    assert [g.kind for g in report.graphs] == ["forward", "backward"], str(report)
    assert not report.fallbacks, str(report)
    assert any("aten.elu.default" in k.ops for k in report.graphs[0].kernels), str(report)
    compiled = torch.compile(_elu_net, backend=backend)
    for _ in range(2):  # fresh inputs (negative and positive) and upstream gradients
        x, grad = torch.randn(16, 40, dtype=dtype) * 3, torch.randn(16, 40, dtype=dtype)
        got_x, want_x = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = compiled(got_x), _elu_net(want_x)
        torch.testing.assert_close(got, want, **TOL[dtype])
        got.backward(grad)
        want.backward(grad)
        torch.testing.assert_close(got_x.grad, want_x.grad, **TOL[dtype])


def test_the_plugins_elu_lowering_is_the_one_used(backend, monkeypatch):
    """The core lowers ``aten.elu`` too; a plugin's ``sdk_lower_op`` is asked first, and its
    lowering is the one compiled."""
    plugin = importlib.import_module(module_name(NAME))
    own, calls = plugin.LOWERINGS[torch.ops.aten.elu.default], []

    def counted(*args, **kwargs):
        calls.append(1)
        return own(*args, **kwargs)

    monkeypatch.setitem(plugin.LOWERINGS, torch.ops.aten.elu.default, counted)
    x = torch.randn(4, 6)
    torch.testing.assert_close(torch.compile(_elu_net, backend=backend)(x), _elu_net(x))
    assert calls


def test_own_elu_lowering_takes_symbolic_sizes(backend, graph_reports):
    """Under dynamic shapes ``builder.out.shape`` holds SymInts: the lowering passes them on,
    and one program serves every length."""
    compiled = torch.compile(_elu_net, backend=backend, dynamic=True)
    for n in (5, 33, 300):
        x = torch.randn(3, n)
        torch.testing.assert_close(compiled(x), _elu_net(x), **TOL[torch.float32])
    assert len(graph_reports) == 1, [r.sizes for r in graph_reports]
    report = graph_reports[0]
    assert report.sizes.startswith("symbolic: "), report.sizes
    assert any("aten.elu.default" in k.ops for k in report.kernels) and not report.fallbacks
