"""Renderers as data: one loop-nest emitter for C-like targets, driven by a table.

A target whose kernels are C-like source (C with OpenMP, OpenCL C, a vendor's C dialect) is a
:class:`CTarget`: what each IR op (:data:`sdk.ir.OPS`) and reduction (:data:`sdk.ir.REDUCTIONS`)
becomes, as format strings, the C type of each dtype, a prelude and the kernel's head. The
emitter owns what every such target shares: the loop nest over a kernel's outer points and its
stages' inner ranges, index printing (``sdk.ir.print_index``), indirect indices clamped into
their extent, one ``const`` temporary per IR node (CSE on the hashable nodes), conversions
between storage and compute types (bf16/fp16 computed in float, rounded where the IR's dtype
says so) and reductions (accumulated in double for floating values, in int64 otherwise).

The kernel it renders, for ``relu(x * y + 1)`` over a 16x33 fp32 input::

    void k_mul_add_relu(const float* b0, const float* b1, float* b2) {
      #pragma omp parallel for if(528 >= 32768)       // outer points, in parallel when large
      for (int64_t p = 0; p < 528; ++p) {
        const int64_t i0 = p;                         // loop variables from the flat point
        {                                             // stage 0: no inner ranges
          const float t0 = b0[i0];                    // Load(x, i0)
          const float t1 = b1[i0];
          const float t2 = (t0 * t1);                 // Op("mul"): target.ops["mul"]
          const float t3 = (t2 + (float)0x1p+0);      // Const(1.0) printed exactly
          const float t4 = (t3 > 0 ? t3 : 0 * t3);    // ... whatever the table says
          b2[i0] = t4;                                // Store(out, i0)
        }
      }
    }

``CTarget.render(kernel)`` gives a :class:`sdk.KernelSource` (``meta["nargs"]``: pointers it
takes, in ``kernel.args`` order); ``CTarget.unit(sources)`` one translation unit for
:mod:`sdk.toolchain` (:func:`translation_unit`, which a plugin with its own renderer uses too).
:data:`C_TYPES` is the dtype -> C type table a target starts from (``{**C_TYPES, ...}``),
:data:`BF16_HELPERS` the exact bf16 conversions (C that C++ compiles too) a prelude includes.
An op or reduction the table lacks raises :class:`NotImplementedError` naming it: the graph
then runs through ATen (a plugin should refuse such ops in ``sdk_op_support`` so that only
they fall back).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy
import torch

import sdk
from sdk.ir import Const, Expr, IndexValue, Kernel, Load, LocalRef, Op, Stage, print_index, var

#: Exact bf16 <-> float conversions (round to nearest even, NaN kept quiet) and a bf16 rounding
#: for values the IR computes in bf16: C that C++ compiles too (cpu_cpp's prelude has them).
BF16_HELPERS = r"""static inline float sdk_bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline uint16_t sdk_float_to_bf16(float f) {
  uint32_t u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float sdk_round_bf16(float f) { return sdk_bf16_to_float(sdk_float_to_bf16(f)); }
"""

#: Headers and helpers of C targets: :data:`BF16_HELPERS` after C's headers.
C_PRELUDE = r"""#include <math.h>
#include <tgmath.h>
#include <stdint.h>
#include <stdbool.h>

""" + BF16_HELPERS

#: C types of storage; bf16 is stored as its bits, fp16 as C's _Float16 (GCC, Clang).
C_TYPES: dict[torch.dtype, str] = {
    torch.float32: "float", torch.float64: "double", torch.bfloat16: "uint16_t",
    torch.float16: "_Float16", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
}  # fmt: skip
#: (load, store, round) of the types computed in float: storage -> float, float -> storage,
#: float -> float rounded to the type.
C_HALF: dict[torch.dtype, tuple[str, str, str]] = {
    torch.bfloat16: ("sdk_bf16_to_float({x})", "sdk_float_to_bf16({x})", "sdk_round_bf16({x})"),
    torch.float16: ("(float)({x})", "(_Float16)({x})", "(float)(_Float16)({x})"),
}


@dataclass(frozen=True)
class Reducer:
    """One reduction: ``init`` (one C value, or (floating, integer)) and ``update``, a C
    statement over ``{acc}`` and ``{v}``; ``arg``: the result is the position ``{idx}``, which
    ``update`` sets to ``{pos}`` (argmax, argmin)."""

    init: str | tuple[str, str]
    update: str
    arg: bool = False


@dataclass(frozen=True)
class CTarget:
    """A C-like target, as data. ``ops`` maps an IR op to a C expression over ``{a}``, ``{b}``,
    ``{c}`` (its operands, already of the op's compute type), or to (floating, integer)."""

    name: str
    ops: Mapping[str, str | tuple[str, str]]
    reducers: Mapping[str, Reducer]
    types: Mapping[torch.dtype, str] = field(default_factory=lambda: dict(C_TYPES))
    half: Mapping[torch.dtype, tuple[str, str, str]] = field(default_factory=lambda: dict(C_HALF))
    prelude: str = C_PRELUDE
    head: str = "void {name}({params})"
    parallel: str = "#pragma omp parallel for if({work} >= 32768)"
    language: str = "c"

    def render(self, kernel: Kernel) -> sdk.KernelSource:
        name = re.sub(r"\W", "_", kernel.name)
        source = _Emitter(self, kernel).kernel(name)
        return sdk.KernelSource(kernel.name, self.language, source, name,
                                meta={"nargs": len(kernel.args)})

    def unit(self, sources: list[sdk.KernelSource]) -> str:
        """One translation unit: the prelude, then each kernel once."""
        return translation_unit([self.prelude], sources, self.name)

    def compute(self, dtype: torch.dtype) -> str:
        """The C type values of ``dtype`` are computed in."""
        return "float" if dtype in self.half else self.types[dtype]


class _Emitter:
    def __init__(self, target: CTarget, kernel: Kernel) -> None:
        self.t, self.k = target, kernel
        self.bufs = {a.name: f"b{i}" for i, a in enumerate(kernel.args)}
        self.layouts = {a.name: a.layout for a in kernel.args}
        self.subs: dict[sympy.Symbol, sympy.Expr] = {}
        self.locals: dict[str, str] = {}
        self.n = 0

    def fresh(self, prefix: str = "t") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def loop_vars(self, syms: tuple) -> list[str]:
        names = []
        for s in syms:
            names.append(self.fresh("i"))
            self.subs[s] = var(names[-1])
        return names

    def kernel(self, name: str) -> str:
        k, t = self.k, self.t
        params = ", ".join(f"{'const ' if a.role == 'in' else ''}{t.types[a.layout.dtype]}* "
                           f"{self.bufs[a.name]}" for a in k.args)
        outer = [int(s) for s in k.sizes]
        names = self.loop_vars(k.vars)
        points = math.prod(outer)
        work = points * max([1] + [math.prod(int(s) for s in st.sizes) for st in k.stages])
        body, stride = [], 1
        for v, size in reversed(list(zip(names, outer))):
            body.insert(0, f"const int64_t {v} = (p / {stride}) % {size};")
            stride *= size
        for st in k.stages:
            body += self.stage(st)
        lines = [t.head.format(name=name, params=params) + " {"]
        if t.parallel and points > 1:
            lines.append("  " + t.parallel.format(work=work))
        lines.append(f"  for (int64_t p = 0; p < {points}; ++p) {{")
        lines += ["    " + ln for ln in body] + ["  }", "}"]
        origins = ", ".join(k.origins).replace("\n", " ")
        return "\n".join([f"// kernel {k.name}: {origins}"] + lines) + "\n"

    def stage(self, st: Stage) -> list[str]:
        self.memo: dict[Expr, str] = {}
        self.lines: list[str] = []
        inner = self.loop_vars(st.vars)
        sizes = [int(s) for s in st.sizes]
        pre, post, updates = [], [], []
        for r in st.reductions:
            red = self.t.reducers.get(r.op)
            if red is None:
                raise NotImplementedError(f"{self.t.name}: no rendering of reduction {r.op!r}")
            floating = r.value.dtype.is_floating_point
            acc_t = "double" if floating else "int64_t"
            acc, idx = self.fresh("acc"), self.fresh("idx")
            init = red.init if isinstance(red.init, str) else red.init[0 if floating else 1]
            pre.append(f"{acc_t} {acc} = {init};")
            if red.arg:
                pre.append(f"int64_t {idx} = 0;")
            pos, stride = [], 1
            for v, size in reversed(list(zip(inner, sizes))):
                pos.insert(0, f"{v} * {stride}")
                stride *= size
            v = self.emit(r.value)
            updates.append(red.update.format(acc=acc, v=v, idx=idx, pos=" + ".join(pos) or "0"))
            out, value = self.fresh("red"), idx if red.arg else acc
            post.append(f"const {self.t.compute(r.dtype)} {out} = {self.convert(value, r.dtype)};")
            self.locals[r.name] = out
        stores = []
        for s in st.stores:
            value = self.emit(s.value)
            dt = self.layouts[s.buffer].dtype
            if dt in self.t.half:
                value = self.t.half[dt][1].format(x=value)
            stores.append(f"{self.bufs[s.buffer]}[{self.index(s.index)}] = {value};")
        body = self.lines + updates + stores
        for v, size in reversed(list(zip(inner, sizes))):
            body = [f"for (int64_t {v} = 0; {v} < {size}; ++{v}) {{"] + \
                ["  " + ln for ln in body] + ["}"]
        return pre + ["{"] + ["  " + ln for ln in body] + ["}"] + post

    def convert(self, code: str, dtype: torch.dtype) -> str:
        """``code`` (of any C arithmetic type) as a value of ``dtype``'s compute type."""
        if dtype == torch.bool:
            return f"({code} != 0)"
        if dtype in self.t.half:
            return self.t.half[dtype][2].format(x=f"(float)({code})")
        return f"({self.t.compute(dtype)})({code})"

    def index(self, e: sympy.Expr) -> str:
        return print_index(e.xreplace(self.subs), "c")

    def temp(self, dtype: torch.dtype, code: str) -> str:
        name = self.fresh()
        self.lines.append(f"const {self.t.compute(dtype)} {name} = {code};")
        return name

    def emit(self, node: Expr) -> str:
        if node not in self.memo:
            self.memo[node] = self._emit(node)
        return self.memo[node]

    def _emit(self, node: Expr) -> str:
        if isinstance(node, Const):
            return _literal(node.value, self.t.compute(node.dtype))
        if isinstance(node, LocalRef):
            return self.locals[node.name]
        if isinstance(node, IndexValue):
            return self.temp(node.dtype, self.convert(self.index(node.expr), node.dtype))
        if isinstance(node, Load):
            subs = {}
            for sym, value, extent in node.binds:  # indirect index, clamped into its extent
                v = self.emit(value)
                hi = int(extent) - 1 if isinstance(extent, (int, sympy.Integer)) else None
                code = f"({v} < 0 ? 0 : {v})" if hi is None else \
                    f"({v} < 0 ? 0 : {v} > {hi} ? {hi} : {v})"
                subs[sym] = var(self.temp(torch.int64, f"(int64_t){code}"))
            code = f"{self.bufs[node.buffer]}[{self.index(node.index.xreplace(subs))}]"
            if node.dtype in self.t.half:
                code = self.t.half[node.dtype][0].format(x=code)
            return self.temp(node.dtype, code)
        if isinstance(node, Op):
            return self.temp(node.dtype, self._op(node))
        raise NotImplementedError(f"{self.t.name}: cannot render {type(node).__name__}")

    def _op(self, node: Op) -> str:
        if node.name == "cast":
            return self.convert(self.emit(node.args[0]), node.dtype)
        fmt = self.t.ops.get(node.name)
        if fmt is None:
            raise NotImplementedError(f"{self.t.name}: no rendering of op {node.name!r}")
        if node.name == "where":
            want = [None, node.dtype, node.dtype]
        elif node.name in ("isnan", "isinf", "signbit", "logical_not") or \
                node.name.startswith("logical_"):
            want = [None] * len(node.args)
        elif node.dtype == torch.bool and len(node.args) == 2:  # compare in the promoted type
            want = [torch.promote_types(node.args[0].dtype, node.args[1].dtype)] * 2
        else:
            want = [node.dtype] * len(node.args)
        args = []
        for a, w in zip(node.args, want):
            code = self.emit(a)
            if w is not None and self.t.compute(w) != self.t.compute(a.dtype):
                code = self.convert(code, w)
            args.append(code)
        kind = next((w for w in want if w is not None), node.args[0].dtype)
        if isinstance(fmt, tuple):
            fmt = fmt[0 if kind.is_floating_point else 1]
        if fmt is None:
            raise NotImplementedError(f"{self.t.name}: no rendering of op {node.name!r} on {kind}")
        code = fmt.format(**dict(zip("abc", args)))
        if node.dtype in self.t.half:
            code = self.t.half[node.dtype][2].format(x=code)
        return code


def translation_unit(preludes: Sequence[str], sources: Sequence[sdk.KernelSource],
                     target: str) -> str:
    """One source file of a graph's kernels, for one compiler run: ``preludes``, then each
    kernel once (a graph may use one kernel twice), joined by newlines. Two different sources
    of one entry name raise :class:`ValueError` naming ``target``."""
    seen: dict[str, str] = {}
    for s in sources:
        if seen.setdefault(s.entry, s.source) != s.source:
            raise ValueError(f"{target}: two different kernels are both named {s.entry!r}")
    return "\n".join([*preludes, *seen.values()])


def _literal(value: object, ctype: str) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return f"(({ctype})NAN)"
        if math.isinf(value):
            return f"(({ctype})({'-' if value < 0 else ''}INFINITY))"
        return f"(({ctype}){value.hex()})"
    if value == -(2**63):
        return "INT64_MIN"
    return f"(({ctype}){value}LL)"
