"""Python numbers where an op's schema takes a Tensor: made tensors before anything runs.

Dynamo passes some numbers straight to ops whose schema takes a Tensor: on torch 2.13,
``x.addcmul_(a, b, value=v)`` becomes ``prims.fma(mul(a, b), v, x)``. ATen's own C++ kernels
take such a number as a wrapped-number tensor (which the native runner makes, as torch's
Python argument parser does). An op whose autograd kernel is Python (a ``torch.library`` op
such as ``prims.fma``) is handed the wrapped number back as a Python float and gives the float
to the dispatcher, which refuses it (``Expected a value of type 'Tensor' for argument 'b'``)
when the graph runs, after the program may have written its inputs. Inductor never calls
such an op (it lowers it); the SDK calls it wherever a plugin leaves it to ATen.

:func:`numbers_as_tensors` therefore feeds every number an op outside ATen's namespace takes
as a Tensor through ``aten.scalar_tensor``, when the graph is compiled, in the dtype the op
computes in: its result's, or float32 for a bfloat16 or float16 result (a zero-dimensional
tensor of the operands' category does not take part in type promotion, and an op reads it
at its compute precision, so the result is the wrapped number's). A plugin's kernel takes
the fill as a constant. The graph the program, the op-level fallback and the warm start's
stored graph run is the rewritten one.
"""

from __future__ import annotations

import torch
import torch.fx

from .adapters.torch_private import OpOverload, aten, fake_call

_TENSOR_TYPES = frozenset({"Tensor", "Tensor?", "Optional[Tensor]"})
_NUMBERS = (bool, int, float)


def numbers_as_tensors(gm: torch.fx.GraphModule) -> int:
    """Rewrite, in place, every call of ``gm`` of an op outside ATen's namespace that is given
    a Python number for a Tensor argument; returns how many calls changed."""
    changed = 0
    for n in list(gm.graph.nodes):
        positions = _number_positions(n)
        if not positions:
            continue
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        dtype = _computes_in(val.dtype)
        args = list(n.args)
        with gm.graph.inserting_before(n):
            for i in positions:
                number = args[i]
                t = gm.graph.call_function(
                    aten.scalar_tensor.default, (number,), {"dtype": dtype, "device": val.device}
                )
                t.meta["val"] = fake_call(
                    val, torch.scalar_tensor, number, dtype=dtype, device=val.device
                )
                args[i] = t
        n.args = tuple(args)
        changed += 1
    if changed:
        gm.recompile()
    return changed


def _number_positions(n: torch.fx.Node) -> list[int]:
    """The positional arguments of call ``n`` that are Python numbers where the schema takes
    a Tensor (ATen's own ops take those: only other namespaces are asked)."""
    if n.op != "call_function" or not isinstance(n.target, OpOverload):
        return []
    if n.target.namespace == "aten":
        return []
    formals = n.target._schema.arguments
    return [
        i
        for i, x in enumerate(n.args)
        if i < len(formals) and isinstance(x, _NUMBERS) and str(formals[i].type) in _TENSOR_TYPES
    ]


def _computes_in(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
