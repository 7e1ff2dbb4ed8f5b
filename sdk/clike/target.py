"""A C-like target as data: :class:`CTarget` (ops, types, reducers, preludes, a
:class:`~sdk.clike.Spelling`), what a C target starts from (:data:`C_PRELUDE`,
:data:`C_INDEX_CHECKS`), and the translation unit of a graph's kernels
(:func:`translation_unit`).

The top of the emitter: :meth:`CTarget.render` runs :mod:`sdk.clike.emit`, which knows a
target only as the interface it asks (:class:`sdk.clike.expressions.EmitterTarget`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

import sdk
from sdk.ir import Kernel

from . import c, emit
from .c import C, Reducer, Spelling

#: An op table entry: a function ``(*operands, dtype, src) -> str`` (``dtype``: the type the
#: result is computed in, bf16/fp16 -> float32; ``src``: the operands' type, the same except
#: for predicates, ``where`` and ``cast``), or a format string over ``{a}``, ``{b}``, ``{c}``,
#: or a pair of those (floating, integer; picked by ``src``) where None means "not on this
#: kind".
OpCode = Callable[..., str] | str | tuple[str | None, str | None]


#: The start of a C translation unit: headers (<tgmath.h>: one math name serves float and
#: double), :data:`sdk.clike.HALF_HELPERS`, and the helpers the emitter's loops call.
C_PRELUDE = (
    """\
#include <math.h>
#include <tgmath.h>
#include <stdint.h>
#include <stdbool.h>
#include <omp.h>

"""
    + c.HALF_HELPERS
    + "\n"
    + c.loop_helpers(C)
)

#: Follows :data:`C_PRELUDE` in a C translation unit where some kernel checks its indirect
#: indices (:func:`sdk.clike.index_checks` in C).
C_INDEX_CHECKS = c.index_checks(C)


def wide(dtype: torch.dtype) -> torch.dtype:
    """Accumulate floating values in double and integers in int64 (:attr:`CTarget.accumulate`)."""
    if dtype == torch.bool:
        return dtype
    return torch.float64 if dtype.is_floating_point else torch.int64


def as_computed(dtype: torch.dtype) -> torch.dtype:
    """Accumulate in the type the values are computed in (float for fp32, bf16 and fp16)."""
    return dtype


@dataclass(frozen=True)
class CTarget:
    """A C-like target, as data: :func:`sdk.clike.render` and :meth:`render` turn a kernel
    into its source with these tables, :meth:`unit` makes a graph's translation unit.

    ``ops``: IR op (:data:`sdk.ir.OPS`) -> :data:`OpCode`; ``cast`` defaults to
    :meth:`cast`. ``reducers``: reduction (:data:`sdk.ir.REDUCTIONS`) -> :class:`Reducer`.
    ``types``: dtype -> C type of storage. ``half``: dtypes stored as bits and computed in
    float -> (to float, from float) format strings over ``{x}``. ``accumulate``: the
    accumulator dtype of a reduction computed in a dtype; ``accumulate_columns``: that of a
    column reduction (a bias gradient: each column adds its rows in order, one chain of
    additions as long as the column, where a row reduction's ``simd`` lanes split theirs),
    None for ``accumulate``'s. ``preludes``: what every
    translation unit starts with; ``checks``: added when a kernel checks indirect indices
    (it defines ``sdk_index_errors``, ``sdk_index_error``, ``sdk_checked_index`` and
    :data:`sdk.clike.TAKE_INDEX_ERROR`). ``language``: ``"c"`` or ``"c++"``, for
    :mod:`sdk.toolchain` and :attr:`sdk.KernelSource.language`."""

    name: str
    ops: Mapping[str, OpCode]
    reducers: Mapping[str, Reducer]
    types: Mapping[torch.dtype, str] = field(default_factory=lambda: dict(c.C_TYPES))
    half: Mapping[torch.dtype, tuple[str, str]] = field(default_factory=lambda: dict(c.C_HALF))
    accumulate: Callable[[torch.dtype], torch.dtype] = wide
    accumulate_columns: Callable[[torch.dtype], torch.dtype] | None = None
    spelling: Spelling = C
    preludes: tuple[str, ...] = (C_PRELUDE,)
    checks: str = C_INDEX_CHECKS
    language: str = "c"
    _code: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._code.update(
            {name: _callable(self.name, name, code) for name, code in self.ops.items()}
        )
        self._code.setdefault("cast", self.cast)

    def render(self, kernel: Kernel) -> sdk.KernelSource:
        """``kernel`` as source (see :func:`sdk.clike.render`)."""
        return emit.render(self, kernel)

    def unit(self, sources: list[sdk.KernelSource]) -> str:
        """One translation unit: the preludes, the index checks when a kernel checks, then
        each kernel once."""
        checks = [self.checks] if any(s.meta.get("index_checks") for s in sources) else []
        return translation_unit([*self.preludes, *checks], sources, self.name)

    @property
    def prelude(self) -> str:
        """What every :meth:`unit` starts with (the preludes): pass it to
        :func:`sdk.toolchain.compile_library` as ``prelude=``, which parses it once."""
        return "".join(p + "\n" for p in self.preludes)

    # -- what the emitter asks
    def op(self, name: str) -> Callable[..., str]:
        try:
            return self._code[name]
        except KeyError:
            raise NotImplementedError(f"{self.name}: no rendering of op {name!r}") from None

    def reducer(self, name: str) -> Reducer:
        try:
            return self.reducers[name]
        except KeyError:
            raise NotImplementedError(f"{self.name}: no rendering of reduction {name!r}") from None

    def ctype(self, dtype: torch.dtype) -> str:
        try:
            return self.types[dtype]
        except KeyError:
            raise NotImplementedError(f"{self.name}: no C type for {dtype}") from None

    def compute(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype arithmetic on ``dtype`` runs in (half types compute in float32)."""
        return torch.float32 if dtype in self.half else dtype

    def cast(self, x: str, *, dtype: torch.dtype, src: torch.dtype) -> str:
        """The ``cast`` op unless ``ops`` has one: ``x`` (computed in ``src``) converted to
        ``dtype`` as torch converts (c10's ``static_cast_with_inter_type``)."""
        if dtype == src:
            return x
        if dtype == torch.bool:
            return f"({x} != 0)"
        convert = self.spelling.convert
        if src.is_floating_point and dtype == torch.uint8:
            x = convert.format(T="int64_t", x=x)  # through int64: -1.0 -> 255, 300.0 -> 44
        return convert.format(T=self.ctype(dtype), x=x)

    def literal(self, value: object, dtype: torch.dtype) -> str:
        """A literal of ``dtype`` (parenthesised when negative; bf16/fp16 as their bits)."""
        if dtype == torch.bool:
            return "true" if value else "false"
        if dtype in self.half:
            bits = torch.tensor(float(value), dtype=dtype).view(torch.int16).item() & 0xFFFF
            return self.spelling.ctor.format(T=self.ctype(dtype), x=f"0x{bits:04x}")
        if dtype.is_floating_point:
            v = float(value)
            if dtype == torch.float32:
                v = torch.tensor(v, dtype=dtype).item()  # the float32 value, printed exactly
            if math.isnan(v):
                s = "NAN"
            elif v in (float("inf"), float("-inf")):
                s = "INFINITY" if v > 0 else "-INFINITY"
            else:
                s = _shortest(v, dtype) + ("f" if dtype == torch.float32 else "")
            return f"({s})" if s.startswith("-") else s
        v = int(value)
        if -(2**31) < v < 2**31:
            s = str(v)
        elif v == -(2**63):
            s = "INT64_MIN"
        else:
            s = f"{v}ULL" if v >= 2**63 else f"{v}LL"
        return f"({s})" if s.startswith("-") else s


def translation_unit(
    preludes: Sequence[str], sources: Sequence[sdk.KernelSource], target: str
) -> str:
    """One source file of a graph's kernels, for one compiler run: ``preludes``, then each
    kernel once (a graph may use one kernel twice), joined by newlines. Two different sources
    of one entry name raise :class:`ValueError` naming ``target``."""
    seen: dict[str, str] = {}
    for s in sources:
        if seen.setdefault(s.entry, s.source) != s.source:
            raise ValueError(f"{target}: two different kernels are both named {s.entry!r}")
    return "\n".join([*preludes, *seen.values()])


def _shortest(v: float, dtype: torch.dtype) -> str:
    """The shortest decimal that reads back as ``v`` in ``dtype`` (with a '.' or 'e')."""
    s = repr(v)
    if dtype == torch.float32:
        for digits in range(1, 10):
            s = f"{v:.{digits}g}"
            if torch.tensor(float(s), dtype=torch.float32).item() == v:
                break
    return s if any(ch in s for ch in ".en") else s + ".0"


def _callable(target: str, op: str, code: OpCode) -> Callable[..., str]:
    """An op table entry as the function the emitter calls."""
    if callable(code):
        return code
    pair = (code, code) if isinstance(code, str) else code

    def fmt(*operands: str, dtype: torch.dtype, src: torch.dtype) -> str:
        chosen = pair[0 if src.is_floating_point else 1]
        if chosen is None:
            raise NotImplementedError(f"{target}: no rendering of op {op!r} on {src}")
        return chosen.format(**dict(zip("abc", operands)))

    return fmt
