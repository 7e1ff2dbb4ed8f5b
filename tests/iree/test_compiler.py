"""IREE compile and run of ATen FX graphs, without the SDK's hooks (hook API 3 is not merged).

Graphs come from make_fx, which traces autograd into ATen ops, so a training step's gradients
go through IREE too. Compared with eager on fresh random inputs.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

pytest.importorskip(
    "iree_sdk_plugin",
    reason="the IREE plugin wheel is not installed: pip install ./examples/iree_vendor",
)

from iree_sdk_plugin import compiler


def _mlp_step(x, w1, b1, w2):
    loss = (torch.relu(x @ w1 + b1) @ w2).square().mean()
    return (loss, *torch.autograd.grad(loss, (w1, b1, w2)))


def _inputs():
    x = torch.randn(8, 16)
    return x, *(torch.randn(*s, requires_grad=True) for s in ((16, 32), (32,), (32, 4)))


def test_mlp_training_step_matches_eager():
    gm = make_fx(_mlp_step)(*_inputs())
    run = compiler.compile_graph(gm, ())
    args = _inputs()
    for got, want in zip(run(*args), _mlp_step(*args), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_none_outputs_are_put_back():
    gm = make_fx(lambda x, y: (x * 2, None, y + 1))(torch.randn(3), torch.randn(3))
    x, y = torch.randn(3), torch.randn(3)
    got = compiler.compile_graph(gm, ())(x, y)
    assert got[1] is None
    torch.testing.assert_close(got[0], x * 2)
    torch.testing.assert_close(got[2], y + 1)


def _call_nodes(fn, *args):
    gm = make_fx(fn)(*args)
    return {n.target: n for n in gm.graph.nodes if n.op == "call_function"}


def test_legality_accepts_matmul_and_refuses_layer_norm_backward():
    x = torch.randn(4, 8, requires_grad=True)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)

    def step(x, w, b):
        out = torch.nn.functional.layer_norm(x @ x.T @ x, (8,), w, b)
        return torch.autograd.grad(out.sum(), (x, w, b))

    nodes = _call_nodes(step, x, w, b)
    assert compiler.lowers(nodes[torch.ops.aten.mm.default]) is None
    assert compiler.lowers(nodes[torch.ops.aten.native_layer_norm.default]) is None
    reason = compiler.lowers(nodes[torch.ops.aten.native_layer_norm_backward.default])
    assert reason is not None and "does not lower" in reason


def test_inputs_with_offset_or_strides_are_copied_not_misread():
    """IREE refuses views with a storage offset through DLPack; transposes would be misread."""
    gm = make_fx(lambda x, y: (x @ y,))(torch.randn(4, 8), torch.randn(8, 3))
    run = compiler.compile_graph(gm, ())
    x, y = torch.randn(5, 8)[1:], torch.randn(3, 8).T
    torch.testing.assert_close(run(x, y)[0], x @ y)
