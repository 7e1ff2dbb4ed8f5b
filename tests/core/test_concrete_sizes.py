"""A variant compiled for concrete sizes reads its size arithmetic from the values it
lowers (a tensor's sizes, an int input), not from the trace's metadata: torch 2.11 left a
re-derived backward's size nodes symbolic (BEiT's backward, per shape on a GPU, raised "no
hint for size symbols" and ran in ATen)."""

from __future__ import annotations

import operator

import sympy
import torch
import torch.fx

from sdk.core.lowering.sizes import concrete_size
from sdk.ir import size_var


class _Sized:
    def __init__(self, *sizes):
        self.sizes = sizes


def test_size_nodes_take_their_operands_values():
    g = torch.fx.Graph()
    x, k = g.placeholder("x"), g.placeholder("k")
    n0 = g.call_function(torch.ops.aten.sym_size.int, (x, 0))
    n1 = g.call_function(torch.ops.aten.sym_size.int, (x, -1))
    numel = g.call_function(torch.ops.aten.sym_numel.default, (x,))
    prod = g.call_function(operator.mul, (n0, k))
    quot = g.call_function(operator.floordiv, (prod, 4))
    env = {x: _Sized(8, 65, 64), k: 3}
    for node, want in ((n0, 8), (n1, 64), (numel, 8 * 65 * 64), (prod, 24), (quot, 6)):
        env[node] = concrete_size(node, env)
        assert env[node] == want and type(env[node]) is int, (node, env[node])
    # symbolic operands (a symbolic variant): left to the trace's expressions
    s = size_var("s40")
    env = {x: _Sized(s, 65, 64), k: 3}
    assert concrete_size(n0, env) is None
    env[n0] = s
    assert concrete_size(prod, env) is None
    assert concrete_size(n1, env) == 64
    assert isinstance(s, sympy.Symbol)
