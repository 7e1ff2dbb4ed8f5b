"""Symbolic shapes: every size a graph meets gets kernels compiled for it, never stale ones.

Dynamo marks a dimension dynamic after it changes once (or with ``dynamic=True``);
the SDK then compiles a variant per concrete shape, re-deriving the graph's
metadata for it. A variant compiled for one size must never run on another.
"""

from __future__ import annotations

import pytest
import torch

import sdk
from tests.plugins_under_test import PLUGINS, device_of

pytestmark = pytest.mark.parametrize("plugin", PLUGINS)


def test_automatic_dynamic_shapes(plugin, graph_reports):
    dev = device_of(plugin)
    f = torch.compile(lambda x: torch.softmax(x * 2, -1).sum(0), backend=sdk.backend(plugin))
    for n in (8, 12, 16, 12, 5):
        x = torch.randn(n, 32, device=dev)
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1).sum(0))
    assert not [fb for g in graph_reports for fb in g.fallbacks]
    assert all(g.kernels for g in graph_reports)


def test_dynamic_true_with_views(plugin, graph_reports):
    dev = device_of(plugin)
    fn = torch.compile(
        lambda x, y: (x.view(-1, 4) * y).sum(1), backend=sdk.backend(plugin), dynamic=True
    )
    for n in (8, 12, 20):
        x, y = torch.randn(n, 8, device=dev), torch.randn(4, device=dev)
        torch.testing.assert_close(fn(x, y), (x.view(-1, 4) * y).sum(1))
    assert not [fb for g in graph_reports for fb in g.fallbacks]


def test_dynamic_training(plugin):
    dev = device_of(plugin)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)).to(dev)
    h = torch.compile(m, backend=sdk.backend(plugin), dynamic=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 8, device=dev, requires_grad=True)
        out = h(x)
        gx, gw = torch.autograd.grad(out.sum(), [x, m[0].weight])
        ref = m(x)
        rx, rw = torch.autograd.grad(ref.sum(), [x, m[0].weight])
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(gx, rx)
        torch.testing.assert_close(gw, rw)
