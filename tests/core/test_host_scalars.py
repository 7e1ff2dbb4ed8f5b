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
    last, _, _ = _chain(12)  # (without the memo: 2**13 calls; with it, one a node a way)
    calls = []
    for name in ("_of_numbers", "_read_inside"):
        real = getattr(devices, name)

        def counted(n, device_type, memo, real=real, name=name):
            calls.append((name, n))
            return real(n, device_type, memo)

        monkeypatch.setattr(devices, name, counted)
    assert devices.foreign_device(last, "meta") is None  # computed in the kernels
    ups = [n for way, n in calls if way == "_of_numbers"]
    assert len(set(ups)) == 13 and len(ups) <= 2 * 13 + 4, len(ups)
    assert len(calls) - len(ups) <= 2 * 13 + 4, len(calls)


def test_a_returned_host_scalar_stays_on_the_host():
    last, prod, out = _chain(2)
    assert devices.host_scalar(last, "meta")
    out.args = ((prod, last),)  # the graph returns it: its user gets it on the host
    last.users[out] = None
    assert not devices.host_scalar(last, "meta")
    assert devices.foreign_device(last, "meta") is not None


def test_a_host_scalar_read_by_a_returned_host_op_stays_on_the_host():
    # s = scalar_tensor(n) / 4 + 1; return x * s, s * 2: the returned s * 2 is the host's,
    # so s, which it reads, is too (found on a GPU: s was computed in the kernels, and the
    # host op then ran on the device's s and answered on the device)
    last, prod, out = _chain(2)
    twice = prod.graph.call_function(aten.mul.Tensor, (last, 2))
    twice.meta["val"] = torch.tensor(1.0)
    out.args = ((prod, twice),)
    assert not devices.host_scalar(twice, "meta")
    assert not devices.host_scalar(last, "meta")
    assert devices.foreign_device(last, "meta") is not None
    assert devices.foreign_device(twice, "meta") is not None
