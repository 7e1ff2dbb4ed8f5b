"""What a compiled graph assumes about its inputs, checked on every call.

Dynamo guards sizes, dtypes and devices of the user's inputs. Generated
kernels also bake in strides, storage offsets and pointer alignment, and a
backward graph's inputs are not Dynamo-guarded at all. A :class:`Specializing`
graph records those assumptions per variant and checks them with one
generated Python function (a handful of tuple compares per input); on a
mismatch it compiles a variant for the new layout instead of computing a wrong
result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

ALIGNMENT = 16  # bytes


@dataclass(frozen=True)
class TensorSpec:
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    device: torch.device
    aligned: bool

    @classmethod
    def of(cls, t: torch.Tensor, *, real: bool = True) -> TensorSpec:
        return cls(
            tuple(int(s) for s in t.shape),
            tuple(int(s) for s in t.stride()),
            int(t.storage_offset()),
            t.dtype,
            t.device,
            # fake tensors have no address: assume aligned, the first call checks
            (t.data_ptr() % ALIGNMENT == 0) if real else True,
        )


InputSpec = Any  # TensorSpec, or the int / float / None value of a non-tensor input


def spec_of(x: Any, *, real: bool = True) -> InputSpec:
    if isinstance(x, torch.Tensor):
        return TensorSpec.of(x, real=real)
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        return int(hint) if hint is not None else None
    return x


def make_check(specs: Sequence[InputSpec], layout_free: frozenset[int] = frozenset(),
               dynamo_guarded: bool = False, kernel_read: frozenset[int] | None = None
               ) -> Callable[[Sequence[Any]], bool]:
    """A generated function that is True when ``args`` match ``specs``.

    Per-call Python work grows with the input count (a convnet has two hundred
    parameters), so each input is checked for what the variant assumes of it:

    * ``layout_free`` (positions): handed whole to library calls, which take any
      strides: sizes only.
    * ``dynamo_guarded``: Dynamo's guards already hold every input's sizes, strides,
      dtype and device (the inputs of a forward or inference graph with static shapes),
      and views of inputs are taken relative to their storage offset, so what is left is
      the pointer alignment the kernels of ``kernel_read`` were compiled for.
    """
    lines = ["def check(args):"]
    env: dict[str, Any] = {}
    if dynamo_guarded and kernel_read is not None:
        for i, spec in enumerate(specs):
            if isinstance(spec, TensorSpec) and spec.aligned and i in kernel_read:
                lines += [f"    if args[{i}].data_ptr() % {ALIGNMENT}:", "        return False"]
        lines.append("    return True")
        exec("\n".join(lines), env)  # noqa: S102 - our own generated code
        return env["check"]
    for i, spec in enumerate(specs):
        if isinstance(spec, TensorSpec) and i in layout_free:
            env[f"s{i}"] = spec.sizes
            lines += [f"    if args[{i}].shape != s{i}:", "        return False"]
        elif isinstance(spec, TensorSpec):
            env[f"s{i}"], env[f"t{i}"], env[f"d{i}"] = spec.sizes, spec.strides, spec.device
            cond = (
                f"a.size() != s{i} or a.stride() != t{i} or a.storage_offset() != {spec.offset}"
                f" or a.device != d{i}"
            )
            if spec.aligned:
                cond += f" or a.data_ptr() % {ALIGNMENT}"
            lines += [f"    a = args[{i}]", f"    if {cond}:", "        return False"]
        elif isinstance(spec, (int, float, bool)) or spec is None:
            lines += [f"    if args[{i}] != {spec!r}:", "        return False"]
    lines.append("    return True")
    exec("\n".join(lines), env)  # noqa: S102 - our own generated code
    return env["check"]


class Specializing:
    """A compiled graph that re-specializes when an input breaks its assumptions.

    ``build(specs)`` compiles a variant for inputs of those specs. Called with a
    graph's inputs as positional arguments; returns the outputs.
    """

    def __init__(self, build: Callable[[tuple[InputSpec, ...]], Callable], specs: tuple,
                 dynamo_guarded: bool = False) -> None:
        self._build = build
        self._dynamo_guarded = dynamo_guarded
        self._lock = threading.Lock()
        self.variants: dict[tuple, Callable] = {}
        self._fn = self._install(specs)

    def _install(self, specs: tuple) -> Callable:
        fn = self.variants.get(specs)
        if fn is None:
            fn = self._build(specs)
            self.variants[specs] = fn
        self._check = make_check(specs, getattr(fn, "layout_free", frozenset()),
                                 self._dynamo_guarded, getattr(fn, "kernel_read", None))
        return fn

    _boxed_call = True  # AOTAutograd may pass the inputs as one list

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        if self._check(args):
            return self._fn(args)
        with self._lock:
            self._fn = self._install(tuple(spec_of(a) for a in args))
        return self._fn(args)
