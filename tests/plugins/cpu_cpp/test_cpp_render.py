"""The cpu_cpp renderer: hand-built IR kernels, rendered and compiled through the
plugin's hooks, run on torch tensors and compared with torch.

Every kernel of this file is built in one translation unit (one compiler run,
module fixture ``built``); the tests look their kernel up by name.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sympy
import torch

import sdk
import sdk.toolchain
from sdk import ir
from sdk.plugins import cpu_cpp
from sdk.plugins.cpu_cpp import render, toolchain

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
I32, I64, BOOL, U8 = torch.int32, torch.int64, torch.bool, torch.uint8
N = 97  # elements of the op kernels: not a multiple of the vector width


def _has_compiler() -> bool:
    try:
        sdk.toolchain.find_compiler(toolchain.LANGUAGE)
    except FileNotFoundError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _has_compiler(), reason="no C++ compiler")


# ----------------------------------------------------------------------------- IR helpers


def layout(
    sizes: tuple[int, ...],
    dtype: torch.dtype = F32,
    strides: tuple[int, ...] | None = None,
    offset: int = 0,
) -> ir.Layout:
    if strides is None:
        strides = tuple(torch.empty(sizes, device="meta").stride())
    return ir.Layout(tuple(sizes), tuple(strides), offset, dtype, "cpu")


def at(lay: ir.Layout, idx: tuple) -> sympy.Expr:
    """The linear index of ``idx``, counted from the tensor's data pointer (its offset)."""
    return sympy.expand(lay.linear(idx) - lay.offset)


def op(name: str, *args: ir.Expr, dtype: torch.dtype | None = None) -> ir.Op:
    if dtype is None:
        dtype = BOOL if name in ir.PREDICATES else args[-1].dtype
    return ir.Op(name, args, dtype)


def const(v: Any, dtype: torch.dtype = F32) -> ir.Const:
    return ir.Const(v, dtype)


def pointwise(
    name: str,
    sizes: tuple[int, ...],
    ins: dict[str, ir.Layout],
    out: ir.Layout,
    body: Callable[..., ir.Expr],
) -> ir.Kernel:
    """out[idx] = body(idx, load) over ``sizes``; ``load(name)`` reads input ``name`` at idx."""
    xs = tuple(ir.var(f"x{i}") for i in range(len(sizes)))

    def load(buf: str) -> ir.Load:
        return ir.Load(buf, at(ins[buf], xs), ins[buf].dtype)

    store = ir.Store("out", at(out, xs), body(xs, load))
    args = [ir.BufferArg(b, lay, "in") for b, lay in ins.items()] + [
        ir.BufferArg("out", out, "out")
    ]
    k = ir.Kernel(name, xs, sizes, [ir.Stage((), (), [], [store])], args, (f"{name}: test",))
    ir.check_kernel(k)
    return k


def row_reduction(
    name: str,
    rows: int,
    n: int,
    ops: list[str],
    value_dtype: torch.dtype,
    out_dtypes: list[torch.dtype],
) -> ir.Kernel:
    """out_i[x0] = reduce_i(x[x0, r0]) over r0 < n, one stage of reductions, one of stores."""
    x0, r0 = ir.var("x0"), ir.var("r0")
    lx = layout((rows, n), value_dtype)
    v = ir.Load("x", at(lx, (x0, r0)), value_dtype)
    if value_dtype == BOOL:
        v = op("ne", v, const(False, BOOL))
    reds = [ir.Reduction(f"red{i}", o, v, d) for i, (o, d) in enumerate(zip(ops, out_dtypes))]
    stores = [ir.Store(f"out{i}", x0, ir.LocalRef(f"red{i}", d)) for i, d in enumerate(out_dtypes)]
    args = [ir.BufferArg("x", lx, "in")] + [
        ir.BufferArg(f"out{i}", layout((rows,), d), "out") for i, d in enumerate(out_dtypes)
    ]
    k = ir.Kernel(
        name, (x0,), (rows,), [ir.Stage((r0,), (n,), reds, []), ir.Stage((), (), [], stores)], args
    )
    ir.check_kernel(k)
    return k


# ----------------------------------------------------------------------------- op cases

_FLOAT_SPECIALS = [
    float("nan"),
    float("inf"),
    float("-inf"),
    0.0,
    -0.0,
    0.5,
    1.5,
    2.5,
    -2.5,
    1.0,
    -1.0,
    3.0,
]


def _floats(seed: int, dtype: torch.dtype = F32, lo: float = -4, hi: float = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(N, generator=g, dtype=F64) * (hi - lo) + lo
    t[: len(_FLOAT_SPECIALS)] = torch.tensor(_FLOAT_SPECIALS, dtype=F64)
    return t.to(dtype)


def _ints(
    seed: int, lo: int, hi: int, dtype: torch.dtype = I32, nonzero: bool = False
) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(lo, hi, (N,), generator=g).to(dtype)
    if nonzero:
        t[t == 0] = 1
    return t


def _bools(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(N, generator=g) > 0.5


_UNARY_FLOAT = {
    "neg": torch.neg, "abs": torch.abs, "reciprocal": torch.reciprocal, "sign": torch.sign,
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log,
    "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh,
    "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh, "acosh": torch.acosh,
    "atanh": torch.atanh, "erf": torch.erf, "erfc": torch.erfc, "sigmoid": torch.sigmoid,
    "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "round": torch.round,
    "isnan": torch.isnan, "isinf": torch.isinf, "signbit": torch.signbit,
}  # fmt: skip
_BINARY_FLOAT = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.true_divide,
    "floordiv": torch.floor_divide, "remainder": torch.remainder, "fmod": torch.fmod,
    "pow": torch.pow, "atan2": torch.atan2, "maximum": torch.maximum,
    "minimum": torch.minimum, "copysign": torch.copysign,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
    "ge": torch.ge,
}  # fmt: skip


def _op_cases() -> dict[str, tuple[str, list[torch.Tensor], Callable[..., torch.Tensor], dict]]:
    """case id -> (op, inputs, torch reference, extra: out dtype / tolerance)."""
    cases: dict[str, Any] = {}
    for name, fn in _UNARY_FLOAT.items():
        cases[f"{name}-f32"] = (name, [_floats(1)], fn, {})
    for name in ("exp", "tanh", "sqrt", "abs", "round", "signbit"):
        cases[f"{name}-f64"] = (name, [_floats(1, F64)], _UNARY_FLOAT[name], {})
    for name, fn in _BINARY_FLOAT.items():
        a, b = _floats(2), _floats(3)
        if name == "pow":
            b = _floats(3, lo=-3, hi=3).round()  # integral exponents: negative bases stay real
            b[2] = 0.5
        cases[f"{name}-f32"] = (name, [a, b], fn, {})
    # NaN/inf in either position, both orders
    sp = torch.tensor([float("nan"), 1.0, float("inf"), float("-inf"), float("nan"), -0.0] * N)[:N]
    sq = torch.tensor([1.0, float("nan"), 2.0, 3.0, float("nan"), 0.0] * N)[:N]
    for name in ("maximum", "minimum"):
        cases[f"{name}-nan"] = (name, [sp, sq], _BINARY_FLOAT[name], {})
    cases["isnan-inf"] = ("isnan", [sp], torch.isnan, {})
    # integers
    ai, bi = _ints(4, -50, 50), _ints(5, -7, 8, nonzero=True)
    for name, fn in [
        ("add", torch.add),
        ("sub", torch.sub),
        ("mul", torch.mul),
        ("floordiv", torch.floor_divide),
        ("remainder", torch.remainder),
        ("fmod", torch.fmod),
        ("maximum", torch.maximum),
        ("minimum", torch.minimum),
        ("eq", torch.eq),
        ("lt", torch.lt),
    ]:
        cases[f"{name}-i32"] = (name, [ai, bi], fn, {})
    cases["truediv-i32"] = ("truediv", [ai, bi], torch.true_divide, {"dtype": F32})
    for name in ("neg", "abs", "sign"):
        cases[f"{name}-i32"] = (name, [ai], _UNARY_FLOAT[name], {})
    cases["add-i8-wraps"] = (
        "add",
        [_ints(6, -128, 128, torch.int8), _ints(7, -128, 128, torch.int8)],
        torch.add,
        {},
    )
    cases["pow-i64"] = ("pow", [_ints(8, -3, 4, I64), _ints(9, -2, 6, I64)], torch.pow, {})
    cases["floordiv-i64"] = (
        "floordiv",
        [_ints(4, -50, 50, I64), _ints(5, -7, 8, I64, True)],
        torch.floor_divide,
        {},
    )
    for name, fn in [
        ("bitwise_and", torch.bitwise_and),
        ("bitwise_or", torch.bitwise_or),
        ("bitwise_xor", torch.bitwise_xor),
    ]:
        cases[f"{name}-i32"] = (name, [ai, _ints(10, -50, 50)], fn, {})
    cases["bitwise_not-i32"] = ("bitwise_not", [ai], torch.bitwise_not, {})
    cases["bitwise_not-bool"] = ("bitwise_not", [_bools(11)], torch.bitwise_not, {})
    cases["bitwise_and-bool"] = ("bitwise_and", [_bools(11), _bools(12)], torch.bitwise_and, {})
    shifts = _ints(12, 0, 40)
    cases["lshift-i32"] = ("lshift", [ai, shifts], torch.bitwise_left_shift, {})
    cases["rshift-i32"] = ("rshift", [ai, shifts], torch.bitwise_right_shift, {})
    cases["lshift-i64"] = ("lshift", [ai.long(), shifts.long() * 2], torch.bitwise_left_shift, {})
    # logic
    for name, fn in [
        ("logical_and", torch.logical_and),
        ("logical_or", torch.logical_or),
        ("logical_xor", torch.logical_xor),
    ]:
        cases[f"{name}-bool"] = (name, [_bools(13), _bools(14)], fn, {})
        cases[f"{name}-f32"] = (name, [_floats(2).round(), _floats(3)], fn, {})
    cases["logical_not-bool"] = ("logical_not", [_bools(13)], torch.logical_not, {})
    cases["logical_not-f32"] = ("logical_not", [_floats(2).round()], torch.logical_not, {})
    # one rounding of a * b + c: the exact product (float64 holds it) and sum, rounded once
    cases["fma-f32"] = (
        "fma",
        [_floats(2), _floats(3), _floats(4)],
        lambda a, b, c: (a.double() * b.double() + c.double()).float(),
        {},
    )
    # selection and conversion
    cases["where-f32"] = ("where", [_bools(15), _floats(2), _floats(3)], torch.where, {})
    cases["where-bf16"] = (
        "where",
        [_bools(15), _floats(2, BF16), _floats(3, BF16)],
        torch.where,
        {},
    )
    casts = [
        (F32, I32, _floats(2, lo=-1e4, hi=1e4)),
        (F32, BOOL, _floats(2)),
        (I32, F32, ai),
        (F32, F64, _floats(2)),
        (F64, F32, _floats(2, F64)),
        (F32, U8, _floats(2, lo=-100, hi=300).nan_to_num(0, 0, 0)),
        (F32, torch.int8, _floats(2, lo=-200, hi=200).nan_to_num(0, 0, 0)),
        (BOOL, F32, _bools(3)),
        (I64, I32, _ints(3, -(2**40), 2**40, I64)),
        (F32, BF16, _floats(4, lo=-1e3, hi=1e3)),
        (BF16, F32, _floats(4, BF16)),
        (F32, F16, _floats(4, lo=-1e5, hi=1e5)),
        (F16, F32, _floats(4, F16)),
        (BF16, F16, _floats(4, BF16)),
        (I32, BF16, ai * 1001),
    ]
    for src, dst, x in casts:
        if not dst.is_floating_point and dst != BOOL:
            x = x.nan_to_num(0, 0, 0)
        cases[f"cast-{str(src)[6:]}-{str(dst)[6:]}"] = (
            "cast",
            [x.to(src)],
            lambda t, d=dst: t.to(d),
            {"dtype": dst},
        )
    return cases


OP_CASES = _op_cases()


def _op_kernel(case: str) -> ir.Kernel:
    name, inputs, ref, extra = OP_CASES[case]
    out_dtype = extra.get("dtype") or ref(*inputs).dtype
    ins = {f"in{i}": layout((N,), t.dtype) for i, t in enumerate(inputs)}

    def body(xs: Any, load: Callable[[str], ir.Load]) -> ir.Expr:
        return ir.Op(name, tuple(load(b) for b in ins), out_dtype)

    return pointwise("op_" + re.sub(r"\W", "_", case), (N,), ins, layout((N,), out_dtype), body)


# ----------------------------------------------------------------------------- other kernels

#: one thread per row; few long rows (all threads per row); a kernel with both
#: variants whose 10 rows are enough for one thread per row on up to 2 threads
SOFTMAX_SHAPES = [(64, 1000), (3, 100003), (10, 5000)]


def softmax_kernel(rows: int, n: int) -> ir.Kernel:
    """The scheduler's shape of softmax: max, sum of exp(x - max), exp(x - max) / sum."""
    x0, r0 = ir.var("x0"), ir.var("r0")
    lx = layout((rows, n))
    x = ir.Load("x", at(lx, (x0, r0)), F32)
    e = op("exp", op("sub", x, ir.LocalRef("amax", F32)))
    stages = [
        ir.Stage((r0,), (n,), [ir.Reduction("amax", "max", x, F32)]),
        ir.Stage((r0,), (n,), [ir.Reduction("sum", "sum", e, F32)]),
        ir.Stage(
            (r0,),
            (n,),
            [],
            [ir.Store("out", at(lx, (x0, r0)), op("truediv", e, ir.LocalRef("sum", F32)))],
        ),
    ]
    args = [ir.BufferArg("x", lx, "in"), ir.BufferArg("out", lx, "out")]
    return ir.Kernel(
        f"softmax_{rows}x{n}", (x0,), (rows,), stages, args, ("softmax: aten._softmax.default",)
    )


def pw_chain_kernel(rows: int, cols: int) -> ir.Kernel:
    """((x * sigmoid(x) + y).relu() * 0.5 - tanh(y))"""
    lay = layout((rows, cols))

    def body(xs: Any, load: Callable[[str], ir.Load]) -> ir.Expr:
        x, y = load("x"), load("y")
        relu = op("maximum", op("add", op("mul", x, op("sigmoid", x)), y), const(0.0))
        return op("sub", op("mul", relu, const(0.5)), op("tanh", y))

    return pointwise(f"pw_chain_{rows}x{cols}", (rows, cols), {"x": lay, "y": lay}, lay, body)


def bf16_kernel(dtype: torch.dtype) -> ir.Kernel:
    """bf16/fp16 in and out: sigmoid(x) * 2 + y computed in float32."""
    lay = layout((33, 129), dtype)

    def body(xs: Any, load: Callable[[str], ir.Load]) -> ir.Expr:
        x, y = (op("cast", load(b), dtype=F32) for b in ("x", "y"))
        v = op("add", op("mul", op("sigmoid", x), const(2.0)), y)
        return op("cast", v, dtype=dtype)

    return pointwise(f"half_{str(dtype)[6:]}", (33, 129), {"x": lay, "y": lay}, lay, body)


def full_sum_kernel(n: int) -> ir.Kernel:
    """out[0] = sum(x): no outer range."""
    r0 = ir.var("r0")
    lx = layout((n,))
    red = ir.Reduction("total", "sum", ir.Load("x", r0, F32), F32)
    stages = [
        ir.Stage((r0,), (n,), [red]),
        ir.Stage((), (), [], [ir.Store("out", sympy.Integer(0), ir.LocalRef("total", F32))]),
    ]
    args = [ir.BufferArg("x", lx, "in"), ir.BufferArg("out", layout((1,)), "out")]
    return ir.Kernel(f"sum_all_{n}", (), (), stages, args)


def transpose_offset_kernel() -> ir.Kernel:
    """out[i, j] = xt[i, j] + z[i, j], xt the transpose of a (40, 30) tensor, z at offset 7."""
    lt = layout((30, 40), strides=(1, 30))
    lz = layout((30, 40), offset=7)
    return pointwise(
        "transpose_offset",
        (30, 40),
        {"xt": lt, "z": lz},
        layout((30, 40)),
        lambda xs, load: op("add", load("xt"), load("z")),
    )


def embedding_kernel(vocab: int, dim: int, batch: int) -> ir.Kernel:
    """out[b, d] = weight[idx[b] (negative wraps), d]: an indirect (bind) load."""
    x0, x1, ind = ir.var("x0"), ir.var("x1"), ir.var("ind0")
    lw, li, lo = layout((vocab, dim)), layout((batch,), I64), layout((batch, dim))
    i = ir.Load("idx", at(li, (x0,)), I64)
    wrapped = op("where", op("lt", i, const(0, I64)), op("add", i, const(vocab, I64)), i)
    g = ir.Load("weight", at(lw, (ind, x1)), F32, ((ind, wrapped, vocab),))
    args = [
        ir.BufferArg("weight", lw, "in"),
        ir.BufferArg("idx", li, "in"),
        ir.BufferArg("out", lo, "out"),
    ]
    return ir.Kernel(
        "embedding",
        (x0, x1),
        (batch, dim),
        [ir.Stage((), (), [], [ir.Store("out", at(lo, (x0, x1)), g)])],
        args,
    )


def random_kernel(name: str, which: str, n: int) -> ir.Kernel:
    """out[i] = rand/randn(seed[0], base[0] + i)."""
    x0 = ir.var("x0")
    seed = ir.Load("seed", sympy.Integer(0), I64)
    offset = op("add", ir.Load("base", sympy.Integer(0), I64), ir.IndexValue(x0))
    args = [
        ir.BufferArg("seed", layout((1,), I64), "in"),
        ir.BufferArg("base", layout((1,), I64), "in"),
        ir.BufferArg("out", layout((n,)), "out"),
    ]
    store = ir.Store("out", x0, op(which, seed, offset, dtype=F32))
    return ir.Kernel(name, (x0,), (n,), [ir.Stage((), (), [], [store])], args)


def sum_dims_kernel() -> ir.Kernel:
    """out[a] = sum over (b, c) of x.permute(1, 0, 2)[a, b, c]: two inner ranges."""
    x0, r0, r1 = ir.var("x0"), ir.var("r0"), ir.var("r1")
    lx = layout((6, 5, 300), strides=(300, 1800, 1))  # a (5, 6, 300) tensor, dims 0/1 swapped
    red = ir.Reduction("s", "sum", ir.Load("x", at(lx, (x0, r0, r1)), F32), F32)
    stages = [
        ir.Stage((r0, r1), (5, 300), [red]),
        ir.Stage((), (), [], [ir.Store("out", x0, ir.LocalRef("s", F32))]),
    ]
    args = [ir.BufferArg("x", lx, "in"), ir.BufferArg("out", layout((6,)), "out")]
    return ir.Kernel("sum_dims", (x0,), (6,), stages, args)


def sum_middle_kernel() -> ir.Kernel:
    """out[a, c] = sum over b of x[a, b, c]: two outer ranges that do not merge."""
    x0, x1, r0 = ir.var("x0"), ir.var("x1"), ir.var("r0")
    lx, lo = layout((6, 300, 5)), layout((6, 5))
    red = ir.Reduction("s", "sum", ir.Load("x", at(lx, (x0, r0, x1)), F32), F32)
    stages = [
        ir.Stage((r0,), (300,), [red]),
        ir.Stage((), (), [], [ir.Store("out", at(lo, (x0, x1)), ir.LocalRef("s", F32))]),
    ]
    args = [ir.BufferArg("x", lx, "in"), ir.BufferArg("out", lo, "out")]
    return ir.Kernel("sum_middle", (x0, x1), (6, 5), stages, args)


def broadcast_kernel() -> ir.Kernel:
    """out[i, j, k] = x[i, j, k] * s[j]: a broadcast load hoisted out of the inner loop;
    three dimensions that do not merge, the innermost cut into two blocks."""
    lx, ls = layout((3, 50, 5000)), layout((50,))
    xs = (ir.var("x0"), ir.var("x1"), ir.var("x2"))
    v = op("mul", ir.Load("x", at(lx, xs), F32), ir.Load("s", at(ls, (xs[1],)), F32))
    args = [
        ir.BufferArg("x", lx, "in"),
        ir.BufferArg("s", ls, "in"),
        ir.BufferArg("out", lx, "out"),
    ]
    return ir.Kernel(
        "broadcast",
        xs,
        (3, 50, 5000),
        [ir.Stage((), (), [], [ir.Store("out", at(lx, xs), v)])],
        args,
    )


REDUCTION_CASES: dict[str, tuple[list[str], torch.dtype, list[torch.dtype]]] = {
    "float_ops": (
        ["sum", "prod", "max", "min", "argmax", "argmin"],
        F32,
        [F32, F32, F32, F32, I64, I64],
    ),
    "int_ops": (["sum", "max", "min", "argmax"], I32, [I64, I32, I32, I64]),
    "bool_ops": (["any", "all"], BOOL, [BOOL, BOOL]),
    "half_ops": (["sum", "max", "argmax"], BF16, [BF16, BF16, I64]),
}
REDUCTION_SHAPES = [(7, 33), (2, 50001), (1, 200003)]


def all_kernels() -> list[ir.Kernel]:
    ks = [_op_kernel(c) for c in OP_CASES]
    ks += [softmax_kernel(*s) for s in SOFTMAX_SHAPES]
    ks += [pw_chain_kernel(5, 7), pw_chain_kernel(256, 1000)]
    ks += [
        bf16_kernel(BF16),
        bf16_kernel(F16),
        full_sum_kernel(10**6),
        transpose_offset_kernel(),
        embedding_kernel(50, 64, 300),
        random_kernel("rand_k", "rand", 100_000),
        random_kernel("randn_k", "randn", 100_000),
        sum_dims_kernel(),
        sum_middle_kernel(),
        broadcast_kernel(),
    ]
    for case, (ops, vd, ods) in REDUCTION_CASES.items():
        for rows, n in REDUCTION_SHAPES:
            ks.append(row_reduction(f"red_{case}_{rows}x{n}", rows, n, ops, vd, ods))
    return ks


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every kernel of this file, rendered through the hook and built in one compile."""
    ctx = sdk.CompileContext("cpu_cpp", "cpu", "inference", "test_cpp_render", {}, frozenset())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDK_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        kernels = all_kernels()
        sources = [cpu_cpp.sdk_render_kernel(ctx=ctx, kernel=k) for k in kernels]
        fns = cpu_cpp.sdk_compile_kernels(ctx=ctx, sources=sources)
    return {
        "fn": {k.name: f for k, f in zip(kernels, fns)},
        "src": {k.name: s for k, s in zip(kernels, sources)},
        "ctx": ctx,
    }


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))


# ----------------------------------------------------------------------------- tests: ops


def test_op_cases_cover_every_op() -> None:
    assert {c[0] for c in OP_CASES.values()} >= set(ir.OPS) - {"rand", "randn"}
    assert set(render.CODE_FOR_OP) == set(ir.OPS)
    assert set(render.REDUCERS) == set(ir.REDUCTIONS)


@pytest.mark.parametrize("case", list(OP_CASES))
def test_op(built: dict, case: str) -> None:
    name, inputs, ref, extra = OP_CASES[case]
    expect = ref(*inputs)
    if "dtype" in extra:
        expect = expect.to(extra["dtype"])
    out = torch.empty_like(expect)
    built["fn"]["op_" + re.sub(r"\W", "_", case)](*inputs, out)
    if expect.dtype.is_floating_point:
        # libmvec is accurate to a few ulp; low-precision results compare at their ulp
        tol = {F32: (1e-5, 1e-6), F64: (1e-12, 1e-14)}.get(expect.dtype, (0, 0))
        torch.testing.assert_close(out, expect, rtol=tol[0], atol=tol[1], equal_nan=True)
        if name in ("maximum", "minimum", "isnan", "round", "sign"):
            assert torch.equal(out.isnan(), expect.isnan())
    else:
        assert torch.equal(out, expect), f"{case}: {out} != {expect}"


# ----------------------------------------------------------------------------- tests: kernels


def test_pw_chain(built: dict) -> None:
    for rows, cols in [(5, 7), (256, 1000)]:  # serial and parallel (blocked) paths
        g = torch.Generator().manual_seed(rows)
        x, y = torch.randn(rows, cols, generator=g), torch.randn(rows, cols, generator=g)
        out = torch.empty_like(x)
        built["fn"][f"pw_chain_{rows}x{cols}"](x, y, out)
        expect = (x * torch.sigmoid(x) + y).relu() * 0.5 - torch.tanh(y)
        torch.testing.assert_close(out, expect, rtol=1e-5, atol=1e-6)


def test_pw_chain_source_is_readable(built: dict) -> None:
    src = built["src"]["pw_chain_256x1000"]
    assert src.language == "c++" and src.entry == "pw_chain_256x1000"
    assert src.meta == {"nargs": 3}
    assert "// kernel pw_chain_256x1000" in src.source and "pw_chain_256x1000: test" in src.source
    # the 2-D loop is merged into one; blocks run in parallel, each a simd loop
    assert "#pragma omp parallel for" in src.source and "#pragma omp simd" in src.source
    assert "256000" in src.source and "x0" not in src.source.split("{", 1)[1]


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_half_in_out(built: dict, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(33, 129, generator=g).to(dtype) for _ in range(2))
    out = torch.empty_like(x)
    built["fn"][f"half_{str(dtype)[6:]}"](x, y, out)
    expect = (torch.sigmoid(x.float()) * 2 + y.float()).to(dtype)
    torch.testing.assert_close(out, expect)  # dtype's default tolerance
    # rounding is to nearest even: nearly all elements are bit-identical
    assert (out == expect).float().mean() > 0.99


@pytest.mark.parametrize("rows,n", SOFTMAX_SHAPES)
def test_softmax(built: dict, rows: int, n: int) -> None:
    x = torch.randn(rows, n, generator=torch.Generator().manual_seed(n)) * 5
    out = torch.empty_like(x)
    built["fn"][f"softmax_{rows}x{n}"](x, out)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-7)


def test_softmax_is_one_function_with_one_parallel_loop(built: dict) -> None:
    src = built["src"]["softmax_64x1000"].source
    assert src.count('extern "C"') == 1
    assert src.count("#pragma omp parallel") == 1
    assert src.count("reduction(max:") == 1 and src.count("reduction(+:") == 1
    # few long rows: a variant reduces each row with all threads
    small = built["src"]["softmax_3x100003"].source
    assert "omp_get_max_threads()" in small and "#pragma omp barrier" in small


def test_sum_of_all_elements(built: dict) -> None:
    x = torch.randn(10**6, generator=torch.Generator().manual_seed(1))
    out = torch.empty(1)
    built["fn"]["sum_all_1000000"](x, out)
    assert math.isclose(out.item(), x.double().sum().item(), rel_tol=1e-5, abs_tol=1e-2)


@pytest.mark.parametrize("rows,n", REDUCTION_SHAPES)
def test_float_reductions(built: dict, rows: int, n: int) -> None:
    g = torch.Generator().manual_seed(n)
    x = torch.rand(rows, n, generator=g) + 0.5  # prod stays finite for the short rows
    x[:, n // 3] = 7.0  # ties: the first occurrence wins
    x[:, 2 * n // 3] = 7.0
    x[:, n // 4] = -1.0
    x[:, n - 1] = -1.0
    x[0, n // 2] = float("nan")  # NaN counts as max and as min; max/min propagate it
    outs = [torch.empty(rows) for _ in range(4)] + [torch.empty(rows, dtype=I64) for _ in range(2)]
    built["fn"][f"red_float_ops_{rows}x{n}"](x, *outs)
    s, p, mx, mn, amx, amn = outs
    torch.testing.assert_close(s, x.double().sum(1).float(), rtol=1e-5, atol=1e-3, equal_nan=True)
    if n < 100:
        torch.testing.assert_close(p, x.prod(1), rtol=1e-4, atol=0, equal_nan=True)
    torch.testing.assert_close(mx, x.amax(1), equal_nan=True)
    torch.testing.assert_close(mn, x.amin(1), equal_nan=True)
    assert torch.equal(amx, x.argmax(1)), (amx, x.argmax(1))
    assert torch.equal(amn, x.argmin(1)), (amn, x.argmin(1))
    assert amx[0] == n // 2 and (rows == 1 or amx[1] == n // 3)


def test_argmax_edge_rows(built: dict) -> None:
    rows = torch.tensor(
        [
            [1.0, 5.0, 5.0, 2.0] + [0.0] * 29,
            [1.0, float("nan"), 3.0, float("nan")] + [0.0] * 29,
            [float("-inf")] * 33,
            [2.0] * 33,
            [float("inf")] * 2 + [0.0] * 31,
            [0.0] * 32 + [float("nan")],
            [-1.0] * 33,
        ]
    )
    outs = [torch.empty(7) for _ in range(4)] + [torch.empty(7, dtype=I64) for _ in range(2)]
    built["fn"]["red_float_ops_7x33"](rows, *outs)
    assert outs[4].tolist() == rows.argmax(1).tolist() == [1, 1, 0, 0, 0, 32, 0]
    assert outs[5].tolist() == rows.argmin(1).tolist()


@pytest.mark.parametrize("rows,n", REDUCTION_SHAPES)
def test_int_and_bool_reductions(built: dict, rows: int, n: int) -> None:
    g = torch.Generator().manual_seed(n)
    x = torch.randint(-1000, 1000, (rows, n), generator=g, dtype=I32)
    x[:, n // 2] = 5000
    x[:, n - 1] = 5000
    outs = [torch.empty(rows, dtype=d) for d in (I64, I32, I32, I64)]
    built["fn"][f"red_int_ops_{rows}x{n}"](x, *outs)
    assert torch.equal(outs[0], x.sum(1))
    assert torch.equal(outs[1], x.amax(1)) and torch.equal(outs[2], x.amin(1))
    assert torch.equal(outs[3], x.argmax(1))
    b = torch.zeros(rows, n, dtype=BOOL)
    b[0, n - 1] = True
    b[-1, :] = True
    outs = [torch.empty(rows, dtype=BOOL) for _ in range(2)]
    built["fn"][f"red_bool_ops_{rows}x{n}"](b, *outs)
    assert torch.equal(outs[0], b.any(1)) and torch.equal(outs[1], b.all(1))


@pytest.mark.parametrize("rows,n", REDUCTION_SHAPES)
def test_bf16_reductions(built: dict, rows: int, n: int) -> None:
    x = torch.randn(rows, n, generator=torch.Generator().manual_seed(n)).to(BF16)
    outs = [torch.empty(rows, dtype=d) for d in (BF16, BF16, I64)]
    built["fn"][f"red_half_ops_{rows}x{n}"](x, *outs)
    torch.testing.assert_close(outs[0], x.float().sum(1).to(BF16))  # accumulated in float32
    assert torch.equal(outs[1], x.amax(1)) and torch.equal(outs[2], x.argmax(1))


def test_two_inner_ranges(built: dict) -> None:
    base = torch.randn(5, 6, 300, generator=torch.Generator().manual_seed(2))
    out = torch.empty(6)
    built["fn"]["sum_dims"](base, out)
    torch.testing.assert_close(out, base.permute(1, 0, 2).sum((1, 2)), rtol=1e-5, atol=1e-4)


def test_sum_over_middle_dim(built: dict) -> None:
    x = torch.randn(6, 300, 5, generator=torch.Generator().manual_seed(5))
    out = torch.empty(6, 5)
    built["fn"]["sum_middle"](x, out)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-4)


def test_transposed_and_offset_loads(built: dict) -> None:
    g = torch.Generator().manual_seed(3)
    base_x = torch.randn(40, 30, generator=g)  # read through strides (1, 30): its transpose
    base_z = torch.randn(7 + 30 * 40, generator=g)  # read from offset 7
    out = torch.empty(30, 40)
    xt, z = base_x.t(), base_z[7:].view(30, 40)  # the tensors the layouts describe
    built["fn"]["transpose_offset"](xt, z, out)
    torch.testing.assert_close(out, xt + z)
    # the same buffers passed as the views the layouts describe


def test_broadcast_load(built: dict) -> None:
    x, s = torch.randn(3, 50, 5000), torch.randn(50)
    out = torch.empty_like(x)
    built["fn"]["broadcast"](x, s, out)
    torch.testing.assert_close(out, x * s[:, None])
    src = built["src"]["broadcast"].source
    hoisted = src.index("s[") < src.index("#pragma omp simd")
    assert hoisted, "the broadcast load should sit outside the simd loop"


def test_embedding_gather(built: dict) -> None:
    g = torch.Generator().manual_seed(4)
    weight = torch.randn(50, 64, generator=g)
    idx = torch.randint(-50, 50, (300,), generator=g)
    out = torch.empty(300, 64)
    built["fn"]["embedding"](weight, idx, out)
    assert torch.equal(out, weight[idx])


# ----------------------------------------------------------------------------- tests: random

_M32 = 0xFFFFFFFF


def _philox_ref(seed: int, offset: int) -> tuple[int, int]:
    """triton.language.random's randint4x (first two outputs), in Python integers."""
    c0, c1, c2, c3 = offset & _M32, (offset >> 32) & _M32, 0, 0
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    for _ in range(10):
        a0, a2 = c0, c2
        c0 = ((0xCD9E8D57 * a2) >> 32) ^ c1 ^ k0
        c2 = ((0xD2511F53 * a0) >> 32) ^ c3 ^ k1
        c1, c3 = (0xCD9E8D57 * a2) & _M32, (0xD2511F53 * a0) & _M32
        k0, k1 = (k0 + 0x9E3779B9) & _M32, (k1 + 0xBB67AE85) & _M32
    return c0, c1


def _uniform_ref(x: int) -> float:
    i = x - (1 << 32) if x >= 1 << 31 else x
    i = ~i if i < 0 else i
    f = torch.tensor(float(i), dtype=F32)  # int32 -> float32 rounds, then a float32 multiply
    return (f * torch.tensor(4.6566127342e-10, dtype=F32)).item()


def _run_random(built: dict, name: str, seed: int, base: int) -> torch.Tensor:
    out = torch.empty(100_000)
    built["fn"][name](torch.tensor([seed]), torch.tensor([base]), out)
    return out


def test_rand(built: dict) -> None:
    a = _run_random(built, "rand_k", 1234, 0)
    assert a.min() >= 0 and a.max() < 1
    assert abs(a.mean().item() - 0.5) < 0.01
    assert torch.equal(a, _run_random(built, "rand_k", 1234, 0))  # same seed+offset, same bits
    assert torch.equal(a[10:], _run_random(built, "rand_k", 1234, 10)[:-10])  # offsets shift
    assert (a != _run_random(built, "rand_k", 1235, 0)).float().mean() > 0.99
    # the bits of triton's tl.rand
    big = _run_random(built, "rand_k", 2**40 + 17, 2**33)
    for i in (0, 1, 99_999):
        assert a[i].item() == _uniform_ref(_philox_ref(1234, i)[0])
        assert big[i].item() == _uniform_ref(_philox_ref(2**40 + 17, 2**33 + i)[0])


def test_randn(built: dict) -> None:
    a = _run_random(built, "randn_k", 7, 0)
    assert abs(a.mean().item()) < 0.02 and abs(a.std().item() - 1) < 0.02
    assert torch.equal(a, _run_random(built, "randn_k", 7, 0))
    r0, r1 = _philox_ref(7, 5)
    u1, u2 = max(1e-7, _uniform_ref(r0)), _uniform_ref(r1)
    expect = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
    assert math.isclose(a[5].item(), expect, rel_tol=1e-4, abs_tol=1e-5)


# ----------------------------------------------------------------------------- tests: build


def test_simd_loops_vectorize(built: dict, tmp_path: Path) -> None:
    """gcc reports every ``omp simd`` loop of the hot kernels as vectorized."""
    names = [
        "pw_chain_256x1000",
        "softmax_64x1000",
        "softmax_3x100003",
        "sum_all_1000000",
        "half_bfloat16",
        "rand_k",
        "red_int_ops_7x33",
    ]
    srcs = [built["src"][n] for n in names]
    unit = render.TARGET.unit(srcs)
    path = tmp_path / "unit.cpp"
    path.write_text(unit)
    flags = [f for f in toolchain.default_flags() if f not in ("-shared", "-fPIC")]
    proc = subprocess.run(
        [
            sdk.toolchain.find_compiler(toolchain.LANGUAGE),
            *flags,
            "-fopt-info-vec-optimized",
            "-S",
            "-o",
            str(tmp_path / "unit.s"),
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    vectorized = {
        int(m.group(1))
        for m in re.finditer(
            r"unit\.cpp:(\d+):\d+: optimized: loop "
            r"vectorized",
            proc.stderr,
        )
    }
    lines = unit.splitlines()
    missing, loops = [], 0
    for i, ln in enumerate(lines):
        if ln.strip().startswith("#pragma omp simd"):
            loops += 1
            indent = ln[: len(ln) - len(ln.lstrip())]
            end = lines.index(indent + "}", i)  # the loop's closing brace
            # gcc reports a loop at its pragma, its header or a line of its body
            if not any(i + 1 <= n <= end + 1 for n in vectorized):
                missing.append(lines[i + 1].strip())
    assert loops > 5
    assert not missing, missing


def test_duplicate_kernel_names_rejected(built: dict) -> None:
    a = render.render_kernel(pw_chain_kernel(5, 7))
    b = render.render_kernel(pw_chain_kernel(5, 7))
    assert render.TARGET.unit([a, b]).count(a.source) == 1  # same kernel: once
    b.source += "// changed\n"
    with pytest.raises(ValueError, match="both named"):
        render.TARGET.unit([a, b])
