"""Decompositions of torch's multi-tensor ops (``aten._foreach_*``) into their per-tensor ops.

``torch.optim``'s ``foreach=True`` path (torch's default on accelerators) and
``clip_grad_norm_(foreach=True)`` call ops such as ``_foreach_add_(params, grads)``; AOTAutograd
leaves their functional forms (``_foreach_add.List``) in the ATen graph, followed by ``copy_``
back into the inputs. Each such op is decomposed here into one call of its per-tensor op
(``aten.add``) per list element, as ATen's own CPU kernels for these ops do
(``ForeachOpsKernels.cpp``, the "slow" path): list arguments (``Tensor[]``, ``Scalar[]``) are
indexed per element, every other argument is passed to each call as it is. The per-tensor
ops then lower and fuse like any other (the ops of one parameter share a kernel).

The ops are found by name in torch's operator registry, so an op a later torch adds is
decomposed too where its per-tensor op takes the same arguments (the tests check each one
against eager). Where the per-tensor op is not ``aten.<name>`` or takes its arguments
otherwise, :data:`_BASE` and :func:`_per_tensor_value` say so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

PREFIX = "_foreach_"

#: foreach ops whose per-tensor op is not ``aten.<name>``: the op ATen's CPU kernel of the
#: foreach op calls for each tensor
_BASE = {
    "norm": "linalg_vector_norm",
    "powsum": "linalg__powsum",
    # ATen's kernels of _foreach_maximum/_foreach_minimum are clamp_min/clamp_max's (which
    # also take a Scalar, where aten.maximum takes only a tensor)
    "maximum": "clamp_min",
    "minimum": "clamp_max",
}


def foreach_ops() -> list[Any]:
    """Every functional ``aten._foreach_*`` overload torch defines (what AOTAutograd leaves
    in a graph; the in-place ``_foreach_add_`` forms are functionalized before)."""
    out = []
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name
        if not name.startswith("aten::" + PREFIX) or schema.is_mutable:
            continue
        packet = getattr(aten, name.split("::")[1], None)
        op = getattr(packet, schema.overload_name or "default", None) if packet else None
        if op is not None:
            out.append(op)
    return sorted(out, key=str)


def base_op(op: Any) -> Any:
    """The per-tensor op (an OpOverloadPacket) of the foreach op ``op``, or None."""
    name = op._schema.name.split("::")[1][len(PREFIX) :]
    return getattr(aten, _BASE.get(name, name), None)


@functools.cache
def foreach_decompositions() -> dict[Any, Callable[..., Any]]:
    """``{foreach op: its decomposition}`` for every foreach op with a per-tensor op."""
    table: dict[Any, Callable[..., Any]] = {}
    for op in foreach_ops():
        base = base_op(op)
        if base is not None:
            table[op] = _decomposition(op, base)
    return table


def _decomposition(op: Any, base: Any) -> Callable[..., Any]:
    """``op`` as one call of ``base`` per element of its list arguments."""
    arguments = op._schema.arguments
    keywords = _keywords(op, base)
    lists = {a.name for a in arguments if isinstance(a.type, torch.ListType)}
    by_value = _per_tensor_value(op)

    def decomposition(*args: Any, **kwargs: Any) -> list[Any]:
        bound = _bind(op, arguments, args, kwargs)
        n = _length(op, bound, lists)
        out = []
        for i in range(n):
            pos: list[Any] = []
            kw: dict[str, Any] = {}
            for a in arguments:
                if a.name not in bound:
                    continue
                value = bound[a.name][i] if a.name in lists else bound[a.name]
                if a.name in keywords:
                    kw[keywords[a.name]] = value
                else:
                    pos.append(value)
            out.append(by_value(i, n, pos, kw) if by_value else base(*pos, **kw))
        return out

    decomposition.__name__ = f"{op._schema.name.split('::')[1]}_{op._overloadname}"
    decomposition.__qualname__ = decomposition.__name__
    return decomposition


def _keywords(op: Any, base: Any) -> dict[str, str]:
    """``{argument of op: the name the per-tensor op takes it by}``, for the arguments it
    takes by keyword: one of the same name that it takes only by keyword (``_foreach_norm``'s
    ``dtype``), else the one at the same position, where only a keyword can give it
    (``_foreach_addcmul.ScalarList``'s ``scalars``, addcmul's ``value``); a keyword-only
    argument of ``op`` (``alpha``) by its own name. The others go by position."""
    schemas = [getattr(base, name)._schema.arguments for name in base.overloads()]
    only = {a.name for args in schemas for a in args if a.kwarg_only}
    out = {}
    for k, a in enumerate(op._schema.arguments):
        at = {(args[k].name, args[k].kwarg_only) for args in schemas if k < len(args)}
        if a.kwarg_only or a.name in only:
            out[a.name] = a.name
        elif len(at) == 1 and next(iter(at))[1]:
            out[a.name] = next(iter(at))[0]
    return out


def _bind(op: Any, arguments: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments given (by position or name), by name: those left out are left out
    (the per-tensor op's default applies, as the foreach op's is the same)."""
    if len(args) > len(arguments):
        raise TypeError(f"{op} takes {len(arguments)} arguments, {len(args)} given")
    bound = {a.name: v for a, v in zip(arguments, args, strict=False)}
    unknown = set(kwargs) - {a.name for a in arguments}
    if unknown:
        raise TypeError(f"{op} has no argument {sorted(unknown)[0]!r}")
    bound.update(kwargs)
    return bound


def _length(op: Any, bound: dict[str, Any], lists: set[str]) -> int:
    lengths = {name: len(bound[name]) for name in lists if name in bound}
    if len(set(lengths.values())) > 1:
        raise RuntimeError(
            f"{op}: the list arguments must have the same length, got "
            + ", ".join(f"{k} of {v}" for k, v in lengths.items())
        )
    return next(iter(lengths.values()), 0)


def _per_tensor_value(op: Any) -> Callable[[int, int, list[Any], dict[str, Any]], Any] | None:
    """The per-element call of ``_foreach_addcmul.Tensor`` and ``_foreach_addcdiv.Tensor``,
    whose ``scalars`` is a 1-d tensor of one value per element where ``aten.addcmul`` takes
    a number: ``self + scalars[i] * tensor1 * tensor2`` (``/ tensor2``), the order of
    ``value * tensor1 * tensor2`` in ATen's kernel (and in torch's decomposition of addcmul).
    ATen's kernel reads the values on the host (``scalars`` must be 1-d, one per element);
    here they stay a tensor (no host sync), each element's a 0-d view of it."""
    name = op._schema.name.split("::")[1][len(PREFIX) :]
    if op._overloadname != "Tensor" or name not in ("addcmul", "addcdiv"):
        return None
    combine = aten.mul.Tensor if name == "addcmul" else aten.div.Tensor

    def call(i: int, n: int, pos: list[Any], kw: dict[str, Any]) -> Any:
        self, tensor1, tensor2, scalars = (*pos, *kw.values())
        if scalars.dim() != 1 or scalars.shape[0] != n:
            raise RuntimeError(
                f"{op}: scalars must be a 1-d tensor of one value per element ({n}), "
                f"got one of shape {tuple(scalars.shape)}"
            )
        value = aten.select.int(scalars, 0, i)
        return aten.add.Tensor(self, combine(aten.mul.Tensor(tensor1, value), tensor2))

    return call
