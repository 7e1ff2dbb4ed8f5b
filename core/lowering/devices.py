"""Which nodes of a graph run on another device than its kernels (CPU index arithmetic
beside a CUDA model): those run through ATen, op by op (:meth:`Lowerer._call`)."""

from __future__ import annotations

import torch
import torch.fx

from ..adapters.torch_private import aten

#: ops that move a tensor across devices
DEVICE_MOVES = frozenset({aten._to_copy.default, aten.copy_.default, aten.copy.default})


def foreign_device(n: torch.fx.Node, device_type: str) -> str | None:
    """Why call node ``n`` runs through ATen in a graph whose kernels run on ``device_type``:
    it makes a tensor on another device (index arithmetic on the CPU beside a CUDA model),
    or copies a tensor of more than one element across devices (a kernel reading a host
    tensor reads its device copy: one copy, then the kernel, where ATen's one copy does).
    None for a node on the graph's device that reads at most host scalars, and for a host
    scalar computed from scalars (:func:`host_scalar`): that runs on the graph's device."""
    if host_scalar(n, device_type):
        return None
    val = n.meta.get("val")
    for v in val if isinstance(val, (list, tuple)) else (val,):
        if isinstance(v, torch.Tensor) and v.device.type != device_type:
            return f"computes on {v.device.type}, where the graph's kernels run on {device_type}"
    for a in n.all_input_nodes:
        v = a.meta.get("val")
        if (
            isinstance(v, torch.Tensor)
            and v.device.type != device_type
            and (v.dim() > 0 or n.target in DEVICE_MOVES)
            and not host_scalar(a, device_type)
        ):
            return f"copies a {v.device.type} tensor to {device_type}"
    return None


def host_scalar(n: torch.fx.Node, device_type: str, _memo: dict | None = None) -> bool:
    """Whether ``n`` makes a 0-dim tensor on another device than the graph's kernels (the
    host's) from numbers and such tensors only (:func:`_of_numbers`), and every reader of
    it reads it on the kernels' device (:func:`_read_inside`): no output of the graph, and
    no host op whose result stays on the host, gets it.

    Such a tensor is a number: the graph's kernels read it as one, and computing it in them
    gives the same value. (torch 2.11 makes the scale ``1 / (HxW * cpg)`` of GroupNorm's
    gradient a CPU ``scalar_tensor`` where a size is symbolic.)"""
    memo = {} if _memo is None else _memo  # (each node once a way: nodes share relatives)
    return _of_numbers(n, device_type, memo) and _read_inside(n, device_type, memo)


def _of_numbers(n: torch.fx.Node, device_type: str, memo: dict) -> bool:
    """``n`` is an op making a 0-dim tensor off ``device_type`` from numbers and such tensors."""
    key = ("of numbers", n)
    if key not in memo:
        val = n.meta.get("val")
        memo[key] = (
            n.op == "call_function"
            and isinstance(val, torch.Tensor)
            and val.dim() == 0
            and val.device.type != device_type
            and all(
                not isinstance(a.meta.get("val"), torch.Tensor) or _of_numbers(a, device_type, memo)
                for a in n.all_input_nodes
            )
        )
    return memo[key]


def _read_inside(n: torch.fx.Node, device_type: str, memo: dict) -> bool:
    """Every user of ``n`` makes only tensors on ``device_type``, or is itself a host scalar
    that computes in the kernels: moving ``n`` there changes no device a user sees."""
    key = ("read inside", n)
    if key not in memo:
        memo[key] = all(
            u.op == "call_function"
            and (
                _on_device(u, device_type)
                or (_of_numbers(u, device_type, memo) and _read_inside(u, device_type, memo))
            )
            for u in n.users
        )
    return memo[key]


def _on_device(n: torch.fx.Node, device_type: str) -> bool:
    val = n.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else (val,)
    return bool(vals) and all(
        isinstance(v, torch.Tensor) and v.device.type == device_type for v in vals
    )
