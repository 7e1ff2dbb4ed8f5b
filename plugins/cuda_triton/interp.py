"""Making generated kernels run well under ``TRITON_INTERPRET=1``.

:func:`prepare` is applied by the launcher to each generated module when it
is imported under the interpreter; compiled kernels on a GPU never see this
module. It does two things, both specific to Triton's interpreter internals
(written against 3.9, and a no-op where those internals are missing):

* ``libdevice``: the interpreter has no ``extern_elementwise``; a call of
  ``triton.language.extra.libdevice.tan`` in an interpreted kernel returns
  ``None``. The module's ``libdevice`` name is rebound to :data:`libdevice`,
  whose functions apply the NumPy equivalent to the interpreter's tensors
  (``tl.tensor`` wrapping a ``TensorHandle`` whose ``.data`` is a NumPy array).
* Rounding: the interpreter converts float32 to bfloat16 by truncation where
  compiled Triton (and torch) round to nearest even; a long chain of bf16
  intermediates then drifts (gradients with cancellation fail their
  tolerances). That one conversion is made to round to nearest even, and casts between
  bfloat16 and other types than float32 (which the interpreter did on the raw bits) go
  through float32.
* Reductions: ``tl.reduce`` with a combine function that is not one of
  Triton's own runs a Python loop per element. The module's combine helpers
  (``_sum``, ``_maximum``, ``_argmax_combine``, ...) are tagged with what
  they compute, and ``ReduceOps.apply_impl`` is wrapped once to reduce tagged
  combines with NumPy (same semantics: NaN-propagating max/min, first index
  of the extremum). Untagged reductions are left to Triton.
* Memory safety: the interpreter reads and writes raw host addresses, so a
  load outside its buffer reads whatever lies there (or segfaults) where a GPU
  raises an illegal memory access. :func:`checking_bounds` makes every active
  lane of every load and store of a launch prove that its address lies inside
  one of the launch's buffers, and raises ``IndexError`` naming the kernel
  otherwise: CI then catches out-of-bounds kernels a GPU would crash on.
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


def _erfc(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erfc, otypes=[x.dtype])(x)


def _np(fn: Callable[..., np.ndarray]) -> Callable[..., Any]:
    def call(*args: Any, **_kw: Any) -> Any:
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        ref = next(a for a in args if isinstance(a, tl.tensor))
        datas = [a.handle.data if isinstance(a, tl.tensor) else a for a in args]
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*datas)).astype(ref.handle.data.dtype, copy=False)
        scalar = ref.dtype
        ty = tl.block_type(scalar, list(out.shape)) if out.ndim else scalar
        return tl.tensor(TensorHandle(out, scalar), ty)

    return call


#: Every libdevice function the renderer emits, by name.
FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "pow": np.power,
    "atan2": np.arctan2,
    "copysign": np.copysign,
    "expm1": np.expm1,
    "log10": np.log10,
    "log1p": np.log1p,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "erfc": _erfc,
    "trunc": np.trunc,
    "rint": np.rint,
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "erf": lambda x: np.vectorize(__import__("math").erf, otypes=[x.dtype])(x),
    "floor": np.floor,
    "ceil": np.ceil,
}

libdevice = types.SimpleNamespace(**{name: _np(fn) for name, fn in FUNCTIONS.items()})


#: Combine helper of the generated source -> what it reduces.
REDUCERS = {
    "_sum": "sum",
    "_prod": "prod",
    "_maximum": "max",
    "_minimum": "min",
    "_argmax_combine": "argmax",
    "_argmin_combine": "argmin",
}


def _fast_reduce(op: Any, inputs: tuple[Any, ...], kind: str) -> Any:
    axis, keep = op.axis, op.keep_dims
    datas = [t.handle.data for t in inputs]
    with np.errstate(all="ignore"):
        if kind in ("argmax", "argmin"):
            v, i = datas
            m = (np.max if kind == "argmax" else np.min)(v, axis=axis, keepdims=True)
            hit = v == m
            if v.dtype.kind == "f":
                hit |= np.isnan(m) & np.isnan(v)  # NaN is the extremum
            idx = np.where(hit, i, np.iinfo(i.dtype).max).min(axis=axis, keepdims=keep)
            m = m if keep else np.squeeze(m, axis=axis)
            return [op.to_tensor(m, inputs[0].dtype), op.to_tensor(idx, inputs[1].dtype)]
        fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[kind]
        return op.to_tensor(fn(datas[0], axis=axis, keepdims=keep), inputs[0].dtype)


def _install_fast_reduce() -> None:
    try:
        from triton.runtime.interpreter import ReduceOps
    except ImportError:
        return
    if getattr(ReduceOps, "_sdk_fast_reduce", False) or not hasattr(ReduceOps, "apply_impl"):
        return
    original = ReduceOps.apply_impl

    def apply_impl(self: Any, inputs: Any) -> Any:
        kind = getattr(self.combine_fn, "_sdk_reduce", None)
        if kind is None or self.axis is None:
            return original(self, inputs)
        return _fast_reduce(self, inputs, kind)

    ReduceOps.apply_impl = apply_impl
    ReduceOps._sdk_fast_reduce = True


def _f32_to_bf16_rtne(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even, NaN kept quiet."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def _install_bf16_rounding() -> None:
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return
    original = getattr(interpreter, "_convert_float", None)
    if original is None or getattr(original, "_sdk_rtne", False):
        return

    def convert(input: Any, input_dtype: Any, output_dtype: Any, rounding_mode: Any) -> Any:
        if rounding_mode is None and input_dtype == tl.float32 and output_dtype == tl.bfloat16:
            return _f32_to_bf16_rtne(np.asarray(input).view(np.float32))
        return original(input, input_dtype, output_dtype, rounding_mode)

    convert._sdk_rtne = True  # type: ignore[attr-defined]
    interpreter._convert_float = convert


def _install_bf16_casts() -> None:
    """Casts between bfloat16 and anything but float32 go through float32, as compiled
    Triton and torch convert. The interpreter keeps bfloat16 as its uint16 bits and casts
    other types with NumPy's ``astype``: float64 -> bfloat16 gave zeros and NaNs, and
    bfloat16 -> float64 or an integer read the bits as a number."""
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:
        return
    original = getattr(InterpreterBuilder, "cast_impl", None)
    if original is None or getattr(original, "_sdk_bf16", False):
        return

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        a, b = src.dtype.scalar, dst_type.scalar
        if a != b and tl.float32 not in (a, b) and tl.bfloat16 in (a, b):
            return original(self, original(self, src, tl.float32), dst_type)
        return original(self, src, dst_type)

    cast_impl._sdk_bf16 = True  # type: ignore[attr-defined]
    InterpreterBuilder.cast_impl = cast_impl


_BOUNDS: contextvars.ContextVar[tuple[str, list[tuple[int, int]]] | None] = contextvars.ContextVar(
    "sdk_triton_interp_bounds", default=None
)


@contextlib.contextmanager
def checking_bounds(name: str, tensors: list[Any], *, asserts: bool = False) -> Iterator[None]:
    """Within: loads and stores outside ``tensors``' storages raise ``IndexError``;
    with ``asserts``, ``tl.device_assert`` runs too, as in a kernel compiled with
    ``debug=True`` (the interpreter skips asserts otherwise).

    Only CPU tensors are checked (the interpreter reads them in place; other
    devices' tensors are copied to the host first, at other addresses).
    """
    with _asserts(asserts), _checking(name, tensors):
        yield


@contextlib.contextmanager
def _asserts(on: bool) -> Iterator[None]:
    """The interpreter's options for one launch: ``debug`` where ``on``, and never Triton's
    integer-overflow check. A compiled kernel has no such check (:mod:`.launch` turns it off
    with ``debug`` too); the interpreter's default has it on, and without ``debug`` computed
    every int32 add, sub and mul again in int64 with two comparisons, then dropped the assert
    that would have read them: about half of an interpreted kernel's time, for nothing."""
    try:
        from triton.runtime.interpreter import interpreter_builder as builder
    except ImportError:
        builder = None
    if builder is None or not hasattr(builder, "options"):
        yield
        return
    import dataclasses

    saved = builder.options
    builder.options = dataclasses.replace(saved, debug=on or saved.debug, sanitize_overflow=False)
    try:
        yield
    finally:
        builder.options = saved


@contextlib.contextmanager
def _checking(name: str, tensors: list[Any]) -> Iterator[None]:
    import torch

    spans = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        if t.device.type != "cpu":
            yield
            return
        st = t.untyped_storage()
        spans.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
    _install_bounds_check()
    token = _BOUNDS.set((name, spans))
    try:
        yield
    finally:
        _BOUNDS.reset(token)


def _check(ptrs: Any, mask: Any, what: str) -> None:
    state = _BOUNDS.get()
    if state is None:
        return
    name, spans = state
    p = np.asarray(ptrs.data, dtype=np.uint64)
    m = np.broadcast_to(np.asarray(mask.data, dtype=bool), p.shape)
    p = p[m]
    if p.size == 0:
        return
    width = np.dtype(_np_dtype(ptrs)).itemsize
    ok = np.zeros(p.shape, dtype=bool)
    for lo, hi in spans:
        ok |= (p >= lo) & (p + width <= hi)
    if not ok.all():
        bad = int(p[~ok][0])
        raise IndexError(
            f"kernel {name} would {what} address {bad:#x}, outside every buffer "
            f"of the launch ({len(spans)} buffers): an out-of-bounds access a GPU "
            "reports as an illegal memory access"
        )


def _np_dtype(ptrs: Any) -> Any:
    from triton.runtime.interpreter import _get_np_dtype

    return _get_np_dtype(ptrs.get_element_ty())


def _install_bounds_check() -> None:
    try:
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:
        return
    if getattr(InterpreterBuilder, "_sdk_bounds", False):
        return
    load, store = InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store

    def create_masked_load(self: Any, ptrs: Any, mask: Any, *rest: Any) -> Any:
        _check(ptrs, mask, "read")
        return load(self, ptrs, mask, *rest)

    def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any) -> Any:
        _check(ptrs, mask, "write")
        return store(self, ptrs, value, mask, *rest)

    InterpreterBuilder.create_masked_load = create_masked_load
    InterpreterBuilder.create_masked_store = create_masked_store
    InterpreterBuilder._sdk_bounds = True


def prepare(mod: types.ModuleType) -> None:
    """Rebind ``libdevice``, tag the combine helpers, fix bf16 rounding (see above)."""
    mod.libdevice = libdevice  # type: ignore[attr-defined]
    _install_fast_reduce()
    _install_bf16_rounding()
    _install_bf16_casts()
    for name, kind in REDUCERS.items():
        fn = getattr(mod, name, None)
        if fn is not None:
            fn._sdk_reduce = kind
