"""``core.lowering.devices.host_scalar``: a 0-dim tensor on another device than the graph's
kernels, made from numbers only, computes in the kernels. The question is asked of every
node; each answer visits a node's ancestors once."""

from __future__ import annotations

import torch
import torch.fx

from sdk.core.lowering import devices

aten = torch.ops.aten


def _chain(length: int) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]:
    """``x * s**(2**length)`` built as ``t = t * t``: a 0-dim host chain, every product
    reading its factor twice; returns (the chain's last node, the product, the output)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(3, device="meta")
    t = g.call_function(aten.scalar_tensor.default, (1.0,))
    t.meta["val"] = torch.tensor(1.0)
    for _ in range(length):
        t = g.call_function(aten.mul.Tensor, (t, t))
        t.meta["val"] = torch.tensor(1.0)
    prod = g.call_function(aten.mul.Tensor, (x, t))
    prod.meta["val"] = torch.empty(3, device="meta")
    out = g.output((prod,))
    return t, prod, out


def test_a_long_chain_is_answered_visiting_each_node_once(monkeypatch):
    last, _, _ = _chain(12)  # (without the memo: 2**13 calls; with it, one a node)
    calls = []
    real = devices.host_scalar

    def counted(n, device_type, _seen=None):
        calls.append(n)
        return real(n, device_type, _seen)

    monkeypatch.setattr(devices, "host_scalar", counted)
    assert devices.foreign_device(last, "meta") is None  # computed in the kernels
    assert len(set(calls)) == 13 and len(calls) <= 2 * 13 + 2, len(calls)


def test_a_returned_host_scalar_stays_on_the_host():
    last, prod, out = _chain(2)
    assert devices.host_scalar(last, "meta")
    out.args = ((prod, last),)  # the graph returns it: its user gets it on the host
    last.users[out] = None
    assert not devices.host_scalar(last, "meta")
    assert devices.foreign_device(last, "meta") is not None
