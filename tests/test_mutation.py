"""Input mutation and aliasing behave exactly as in eager mode."""

from __future__ import annotations

import pytest
import torch

import sdk
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
