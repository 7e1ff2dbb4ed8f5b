"""The cuda_triton plugin's renderer and launcher, on hand-built IR kernels.

Runs on a GPU when CUDA is available, else under Triton's interpreter
(``TRITON_INTERPRET=1``), which runs the generated kernels on CPU tensors.
Results are compared with torch. The conftest imports Triton (through
torch._dynamo) before this module can set the variable; the generated
kernels do not depend on that order (see ``plugins/cuda_triton/ops.py``).
"""

from __future__ import annotations

import math
import os
import pathlib
import re
import stat
import subprocess
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # read when @triton.jit decorates a kernel
pytest.importorskip("triton")
pytest.importorskip("numpy")

import sympy

import sdk
from sdk import ir
from sdk.core.guards import TensorSpec, parse_requires
from sdk.ir.index import size_hints
from sdk.plugins import cuda_triton
from sdk.plugins.cuda_triton import launch, render
from tests.ir_kernels import window_kernel
from tests.plugins.cuda_triton.test_split_reductions import _by_grid  # noqa: F401 (a fixture)

DEV = "cuda" if torch.cuda.is_available() else "cpu"
F32, BF16, I64 = torch.float32, torch.bfloat16, torch.int64


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDK_CACHE_DIR", str(tmp_path_factory.mktemp("sdk-cache")))
        yield


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    """conftest clears TRITON_INTERPRET for every test; without a GPU it must be on here."""
    if DEV == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")


# ---------------------------------------------------------------------------
# Building kernels
# ---------------------------------------------------------------------------


def lay(sizes, dtype=F32, strides=None, offset=0) -> ir.Layout:
    if strides is None:
        strides, acc = [], 1
        for s in reversed(sizes):
            strides.insert(0, acc)
            acc *= s
    return ir.Layout(tuple(sizes), tuple(strides), offset, dtype, DEV)


def V(*names: str):
    return [ir.var(n) for n in names]


def op(name: str, *args: ir.Expr, dtype=None) -> ir.Op:
    if dtype is None:
        dtype = torch.bool if name in ir.PREDICATES else args[-1].dtype
    return ir.Op(name, args, dtype)


def run(kernel: ir.Kernel, *tensors: torch.Tensor, debug: bool = False) -> sdk.KernelSource:
    """Render, compile and run ``kernel`` on ``tensors`` (in Kernel.args order)."""
    ir.check_kernel(kernel)
    src = render.render(kernel, debug=debug)
    compile(src.source, src.name, "exec")
    (fn,) = launch.compile_sources([src])
    fn(*tensors)
    return src


def pointwise(name: str, ins: dict[str, ir.Layout], out: ir.Layout, body) -> ir.Kernel:
    """out[i...] = body(load per input at the same logical index).

    Indices count from each argument's data pointer, which is at its offset.
    """
    vs = tuple(V(*[f"i{d}" for d in range(len(out.sizes))]))
    loads = {n: ir.Load(n, lo.linear(vs) - lo.offset, lo.dtype) for n, lo in ins.items()}
    value = body(**loads)
    args = [ir.BufferArg(n, lo, "in") for n, lo in ins.items()] + [ir.BufferArg("out", out, "out")]
    return ir.Kernel(
        name,
        vs,
        out.sizes,
        [ir.Stage((), (), [], [ir.Store("out", out.linear(vs), value)])],
        args,
        origins=(f"{name}: test",),
    )


def close(actual, expected, **kw):
    torch.testing.assert_close(actual.cpu(), expected.cpu(), equal_nan=True, **kw)


# ---------------------------------------------------------------------------
# Pointwise
# ---------------------------------------------------------------------------


def test_pointwise_chain_fp32():
    shape = (37, 50)
    k = pointwise(
        "fused_exp_mul_sigmoid_add",
        {"a": lay(shape), "b": lay(shape)},
        lay(shape),
        lambda a, b: op(
            "add",
            op("mul", op("exp", a), ir.Const(2.0, F32)),
            op("where", op("gt", b, ir.Const(0.0, F32)), op("sigmoid", b), op("neg", b)),
        ),
    )
    a, b = torch.randn(shape, device=DEV), torch.randn(shape, device=DEV)
    out = torch.empty(shape, device=DEV)
    src = run(k, a, b, out)
    close(out, a.exp() * 2 + torch.where(b > 0, b.sigmoid(), -b))
    assert "@triton.jit\ndef fused_exp_mul_sigmoid_add(" in src.source
    assert "# kernel fused_exp_mul_sigmoid_add: pointwise, int32 indices" in src.source
    assert "from fused_exp_mul_sigmoid_add: test" in src.source
    assert src.source.count("tl.load(a_ptr") == 1 and src.source.count("tl.load(b_ptr") == 1  # CSE
    assert src.meta["mode"] == "pointwise"


def test_kernels_the_same_up_to_names_compile_once():
    """A model's repeated blocks give kernels that differ only in their names and their
    buffers' names: they launch from one module under one canonical text (so Triton compiles
    them once), each on its own buffers; the renderer's source, which explain shows, keeps
    the names. A kernel computing something else gets its own text."""
    shape = (33, 20)

    def kernel(name, x, y, c):
        return pointwise(
            name, {x: lay(shape)}, lay(shape), lambda **ld: op("mul", ld[x], ir.Const(c, F32))
        )

    same = [kernel("k_mul_1", "buf3", "out", 2.0), kernel("k_mul_7", "arg12", "out", 2.0)]
    other = kernel("k_mul_2", "buf3", "out", 3.0)
    srcs = [render.render(k) for k in (*same, other)]
    assert "buf3_ptr" in srcs[0].source and "arg12_ptr" in srcs[1].source
    can = [launch.canonical(s) for s in srcs]
    assert can[0].source == can[1].source and can[0].entry == can[1].entry
    assert can[0].entry.startswith("k_mul_") and "buf3" not in can[0].source
    assert can[2].source != can[0].source
    before = len(launch._MODULES)
    fns = launch.compile_sources(srcs)
    assert len(launch._MODULES) - before <= 2  # one module for the two alike
    x = torch.randn(shape, device=DEV)
    for fn, c in zip(fns, (2.0, 2.0, 3.0)):
        out = torch.empty(shape, device=DEV)
        fn(x, out)
        close(out, x * c)


def test_bf16_in_out():
    shape = (10, 33)
    k = pointwise(
        "bf16_gelu_ish",
        {"a": lay(shape, BF16)},
        lay(shape, BF16),
        lambda a: op(
            "cast",
            op("mul", op("cast", a, dtype=F32), op("tanh", op("cast", a, dtype=F32))),
            dtype=BF16,
        ),
    )
    a = torch.randn(shape, device=DEV).to(BF16)
    out = torch.empty(shape, device=DEV, dtype=BF16)
    run(k, a, out)
    af = a.float()
    close(out, (af * af.tanh()).to(BF16), rtol=0, atol=0)


def test_half_precision_op_computes_in_fp32():
    k = pointwise("bf16_exp", {"a": lay((64,), BF16)}, lay((64,), BF16), lambda a: op("exp", a))
    a = torch.randn(64, device=DEV).to(BF16)
    out = torch.empty(64, device=DEV, dtype=BF16)
    run(k, a, out)
    close(out, a.exp(), rtol=0, atol=0)


_SPECIAL = [
    float("nan"),
    float("inf"),
    -float("inf"),
    -0.0,
    0.0,
    0.5,
    -0.5,
    1.5,
    2.5,
    -2.5,
    1.0,
    -1.0,
    3.0,
    -7.25,
    1e-3,
    100.0,
]


def _floats(n=48, seed=0, lo=-3.0, hi=3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n - len(_SPECIAL), generator=g) * (hi - lo) + lo
    return torch.cat([torch.tensor(_SPECIAL), x]).to(DEV)


UNARY_FLOAT = {
    "neg": torch.neg,
    "abs": torch.abs,
    "reciprocal": torch.reciprocal,
    "sign": torch.sign,
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": torch.log,
    "log2": torch.log2,
    "log10": torch.log10,
    "log1p": torch.log1p,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "sin": torch.sin,
    "cos": torch.cos,
    "tan": torch.tan,
    "asin": torch.asin,
    "acos": torch.acos,
    "atan": torch.atan,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "tanh": torch.tanh,
    "asinh": torch.asinh,
    "acosh": torch.acosh,
    "atanh": torch.atanh,
    "erf": torch.erf,
    "erfc": torch.erfc,
    "sigmoid": torch.sigmoid,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "trunc": torch.trunc,
    "round": torch.round,
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "signbit": torch.signbit,
    "logical_not": torch.logical_not,
}
BINARY_FLOAT = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "truediv": torch.div,
    "floordiv": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "pow": torch.pow,
    "atan2": torch.atan2,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "copysign": torch.copysign,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
}
BINARY_INT = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "floordiv": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor,
    "lshift": torch.bitwise_left_shift,
    "rshift": torch.bitwise_right_shift,
    "lt": torch.lt,
    "eq": torch.eq,
}
UNARY_INT = {
    "neg": torch.neg,
    "abs": torch.abs,
    "sign": torch.sign,
    "bitwise_not": torch.bitwise_not,
    "isnan": torch.isnan,
    "signbit": torch.signbit,
}


def _unary(name, fn, x, dtype):
    out_dtype = torch.bool if name in ir.PREDICATES else dtype
    k = pointwise(
        f"op_{name}",
        {"a": lay(x.shape, dtype)},
        lay(x.shape, out_dtype),
        lambda a: op(name, a, dtype=out_dtype),
    )
    out = torch.empty(x.shape, device=DEV, dtype=out_dtype)
    run(k, x, out)
    close(out, fn(x), rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
def test_unary_float_ops(name):
    _unary(name, UNARY_FLOAT[name], _floats(), F32)


@pytest.mark.parametrize("name", ["exp", "log", "sin", "sqrt", "tanh", "sigmoid", "floor", "erf"])
def test_unary_float64_ops(name):
    _unary(name, UNARY_FLOAT[name], _floats().double(), torch.float64)


@pytest.mark.parametrize("name", sorted(BINARY_FLOAT))
def test_binary_float_ops(name):
    a = _floats(seed=1)
    b = torch.roll(_floats(seed=2), 3)
    if name == "pow":
        a = a.abs()
    out_dtype = torch.bool if name in ir.PREDICATES else F32
    k = pointwise(
        f"op_{name}",
        {"a": lay(a.shape), "b": lay(b.shape)},
        lay(a.shape, out_dtype),
        lambda a, b: op(name, a, b, dtype=out_dtype),
    )
    out = torch.empty(a.shape, device=DEV, dtype=out_dtype)
    run(k, a, b, out)
    close(out, BINARY_FLOAT[name](a, b), rtol=2e-5, atol=1e-5)


def test_fma_rounds_once():
    a, b, c = _floats(seed=1), torch.roll(_floats(seed=2), 3), _floats(seed=3)
    k = pointwise(
        "op_fma",
        {"a": lay(a.shape), "b": lay(b.shape), "c": lay(c.shape)},
        lay(a.shape),
        lambda a, b, c: op("fma", a, b, c),
    )
    out = torch.empty(a.shape, device=DEV)
    run(k, a, b, c, out)
    close(out, (a.double() * b.double() + c.double()).float(), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(BINARY_INT))
def test_binary_int_ops(name):
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-50, 50, (64,), generator=g, dtype=torch.int32).to(DEV)
    b = torch.randint(-9, 9, (64,), generator=g, dtype=torch.int32).to(DEV)
    if name in ("floordiv", "remainder", "fmod"):
        b = torch.where(b == 0, 7, b)
    if name in ("lshift", "rshift"):
        b = b.abs() % 5
    out_dtype = torch.bool if name in ir.PREDICATES else torch.int32
    k = pointwise(
        f"iop_{name}",
        {"a": lay((64,), torch.int32), "b": lay((64,), torch.int32)},
        lay((64,), out_dtype),
        lambda a, b: op(name, a, b, dtype=out_dtype),
    )
    out = torch.empty(64, device=DEV, dtype=out_dtype)
    run(k, a, b, out)
    close(out, BINARY_INT[name](a, b), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_integer_pow_wraps_and_takes_negative_exponents_as_eager(dtype):
    """Eager's integer power: exact where it fits, wrapping where it overflows (3 ** 41 in
    int64, 7 ** 100), and for a negative exponent 1 for a base of 1, -1 or 1 for -1, else 0
    (0 ** -1 too). A power in float64 is inexact past 2 ** 53 and saturates or gives inf."""
    signed = dtype.is_signed
    base = [0, 1, 2, 3, -1, -3, 7, 5, -2, 10] if signed else [0, 1, 2, 3, 255, 7, 5, 10, 16, 128]
    expo = [0, 5, 62, 41, 7, 40, 100, 27, 63, 19] if signed else [0, 5, 7, 9, 3, 100, 27, 8, 2, 1]
    if signed:
        base += [0, 2, -1, -1, 1, 5]
        expo += [-1, -2, -3, -4, -5, 0]
    a = torch.tensor(base, dtype=dtype, device=DEV)
    b = torch.tensor(expo, dtype=dtype, device=DEV)
    n = len(base)
    k = pointwise(
        "ipow",
        {"a": lay((n,), dtype), "b": lay((n,), dtype)},
        lay((n,), dtype),
        lambda a, b: op("pow", a, b, dtype=dtype),
    )
    out = torch.empty(n, device=DEV, dtype=dtype)
    run(k, a, b, out)
    assert out.tolist() == torch.pow(a.cpu(), b.cpu()).tolist()


@pytest.mark.parametrize("name", sorted(UNARY_INT))
def test_unary_int_ops(name):
    x = torch.arange(-20, 20, dtype=torch.int64, device=DEV)
    _unary(name, UNARY_INT[name], x, I64)


def test_casts_and_where_on_ints():
    x = torch.tensor([-2.7, -0.5, 0.0, 0.4, 3.9, 1e3], device=DEV)
    k = pointwise(
        "casts",
        {"a": lay((6,))},
        lay((6,), I64),
        lambda a: op(
            "where",
            op("cast", a, dtype=torch.bool),
            op("cast", a, dtype=torch.int32),
            ir.Const(-1, I64),
            dtype=I64,
        ),
    )
    out = torch.empty(6, device=DEV, dtype=I64)
    run(k, x, out)
    close(out, torch.where(x.bool(), x.to(torch.int32).long(), -1))


@pytest.mark.parametrize("other", [torch.float64, torch.int64, torch.int32, torch.float16])
def test_casts_between_bf16_and_other_types(other):
    """Both ways, as torch converts (on the interpreter, where bf16 is its uint16 bits, these
    once read or wrote the bits as numbers: float64 -> bf16 gave zeros and NaNs)."""
    x = torch.tensor([-2.7, -0.51, 0.0, 0.4, 3.9, 1e3, 1e-3, 300.5], device=DEV)
    src = x.to(other)
    k = pointwise(
        "to_bf16_and_back",
        {"a": lay((8,), other)},
        lay((8,), BF16),
        lambda a: op("cast", a, dtype=BF16),
    )
    out = torch.empty(8, device=DEV, dtype=BF16)
    run(k, src, out)
    close(out, src.to(BF16), rtol=0, atol=0)
    b = src.to(BF16)
    k = pointwise(
        "from_bf16", {"a": lay((8,), BF16)}, lay((8,), other), lambda a: op("cast", a, dtype=other)
    )
    back = torch.empty(8, device=DEV, dtype=other)
    run(k, b, back)
    close(back, b.to(other), rtol=0, atol=0)


# ---------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------


def softmax_kernel(rows: int, cols: int) -> ir.Kernel:
    (i,) = V("i")
    r0, r1, r2 = V("r0", "r1", "r2")
    X, Y = lay((rows, cols)), lay((rows, cols))

    def x(r):
        return ir.Load("x", X.linear((i, r)), F32)

    mx, sm = ir.LocalRef("mx", F32), ir.LocalRef("sm", F32)

    def e(r):
        return op("exp", op("sub", x(r), mx))

    return ir.Kernel(
        f"softmax_{rows}x{cols}",
        (i,),
        (rows,),
        [
            ir.Stage((r0,), (cols,), [ir.Reduction("mx", "max", x(r0), F32)]),
            ir.Stage((r1,), (cols,), [ir.Reduction("sm", "sum", e(r1), F32)]),
            ir.Stage(
                (r2,), (cols,), [], [ir.Store("y", Y.linear((i, r2)), op("truediv", e(r2), sm))]
            ),
        ],
        [ir.BufferArg("x", X, "in"), ir.BufferArg("y", Y, "out")],
        origins=(
            "amax: aten.amax",
            "sub: aten.sub",
            "exp: aten.exp",
            "sum: aten.sum",
            "div: aten.div",
        ),
    )


@pytest.mark.parametrize("shape,mode", [((8, 1000), "persistent"), ((4, 5000), "looped")])
def test_softmax_three_stages(shape, mode):
    x = torch.randn(shape, device=DEV) * 3
    y = torch.empty(shape, device=DEV)
    src = run(softmax_kernel(*shape), x, y)
    assert src.meta["mode"] == mode
    close(y, x.softmax(-1), rtol=1e-5, atol=1e-6)


def test_looped_softmax_reads_max_and_sum_in_one_loop():
    """Online softmax: the maximum and the rescaled sum of exponentials share one loop
    over the row, then one loop stores; the values are softmax's."""
    x = torch.randn(4, 5000, device=DEV) * 3
    y = torch.empty_like(x)
    src = run(softmax_kernel(4, 5000), x, y)
    assert src.meta["mode"] == "looped"
    assert src.source.count("for roffset") == 2, src.source
    close(y, x.softmax(-1), rtol=1e-5, atol=1e-6)


def _hints(source: str) -> list[str]:
    return re.findall(r"eviction_policy='(\w+)'", source)


def test_eviction_hints_follow_inductors_rule_where_turned_on(monkeypatch):
    """Off by default (measured: they cost the kernel after the one they speed), no load has
    a hint. On (``EVICTION_HINTS``): a load inside a reduction loop that streams is
    ``evict_last`` where a later loop of the kernel reads its buffer again and
    ``evict_first`` on the last one; a strided load ``evict_last``. The values stay
    softmax's and the sums'."""
    from sdk.plugins.cuda_triton import heuristics

    x = torch.randn(4, 5000, device=DEV) * 3
    y = torch.empty_like(x)
    assert _hints(run(softmax_kernel(4, 5000), x, y).source) == []
    monkeypatch.setattr(heuristics, "EVICTION_HINTS", True)
    src = run(softmax_kernel(4, 5000), x, y)
    assert src.meta["mode"] == "looped"
    assert _hints(src.source) == ["evict_last", "evict_first"], src.source
    close(y, x.softmax(-1), rtol=1e-5, atol=1e-6)

    # every second column of every row: no variable with a step of one element
    (i,), (r,) = V("i"), V("r")
    rows, cols = 4, 6000
    X, O = lay((rows, cols), strides=(2 * cols, 2)), lay((rows,))
    k = ir.Kernel(
        "strided_sum",
        (i,),
        (rows,),
        [
            ir.Stage(
                (r,), (cols,), [ir.Reduction("s", "sum", ir.Load("x", X.linear((i, r)), F32), F32)]
            ),
            ir.Stage((), (), [], [ir.Store("out", O.linear((i,)), ir.LocalRef("s", F32))]),
        ],
        [ir.BufferArg("x", X, "in"), ir.BufferArg("out", O, "out")],
    )
    base = torch.randn(rows, 2 * cols, device=DEV)
    out = torch.empty(rows, device=DEV)
    src = run(k, base, out)
    assert src.meta["mode"] == "looped" and _hints(src.source) == ["evict_last"], src.source
    close(out, base[:, ::2].double().sum(-1).float(), rtol=1e-5, atol=1e-4)


def test_online_softmax_special_values():
    """Rows with -inf entries (masked attention), all -inf (NaN, as eager), a NaN, a +inf,
    and the maximum in the last chunk (the running sum is rescaled)."""
    rows, cols = 6, 3000
    x = torch.randn(rows, cols, device=DEV)
    x[0, ::3] = float("-inf")
    x[1] = float("-inf")
    x[2, 1234] = float("nan")
    x[3, 17] = float("inf")
    x[4, :2900] = -50.0
    x[4, -1] = 40.0
    x[5, :1000] = float("-inf")
    y = torch.empty_like(x)
    run(softmax_kernel(rows, cols), x, y)
    close(y, x.softmax(-1), rtol=1e-5, atol=1e-6)


def reduce_kernel(name, n_rows, n_cols, reds, dtype=F32, split_ok=True) -> ir.Kernel:
    """out_<op>[i] = op(x[i, :]) for each op in ``reds``; rows == 1 drops the outer range."""
    (i,), (r,) = V("i"), V("r")
    X = lay((n_rows, n_cols), dtype)
    outer = ((i,), (n_rows,)) if n_rows > 1 else ((), ())
    idx = X.linear((i if n_rows > 1 else sympy.Integer(0), r))
    x = ir.Load("x", idx, dtype)
    reductions, stores, args = [], [], [ir.BufferArg("x", X, "in")]
    for opname in reds:
        out_dtype = (
            I64 if opname.startswith("arg") else (torch.bool if opname in ("any", "all") else F32)
        )
        value = (
            x
            if opname.startswith("arg") or opname in ("any", "all")
            else (x if dtype == F32 else op("cast", x, dtype=F32))
        )
        reductions.append(ir.Reduction(opname, opname, value, out_dtype))
        O = lay((n_rows,), out_dtype)
        args.append(ir.BufferArg(f"out_{opname}", O, "out"))
        at = O.linear((i,)) if n_rows > 1 else sympy.Integer(0)
        stores.append(ir.Store(f"out_{opname}", at, ir.LocalRef(opname, out_dtype)))
    return ir.Kernel(
        name, *outer, [ir.Stage((r,), (n_cols,), reductions), ir.Stage((), (), [], stores)], args
    )


REF = {
    "sum": lambda x: x.float().sum(-1),
    "max": lambda x: x.float().amax(-1),
    "min": lambda x: x.float().amin(-1),
    "prod": lambda x: x.float().prod(-1),
    "argmax": lambda x: x.argmax(-1),
    "argmin": lambda x: x.argmin(-1),
    "any": lambda x: x.bool().any(-1),
    "all": lambda x: x.bool().all(-1),
}


def _reduce(x, reds, mode, **tol):
    rows, cols = x.shape
    k = reduce_kernel(f"reduce_{'_'.join(reds)}_{rows}x{cols}", rows, cols, reds, x.dtype)
    outs = [torch.empty(rows, device=DEV, dtype=a.layout.dtype) for a in k.args[1:]]
    src = run(k, x, *outs)
    assert src.meta["mode"] == mode
    for red, out in zip(reds, outs):
        close(out, REF[red](x), **tol)


def test_full_sum_split():
    x = torch.randn(1, 100000, device=DEV)
    k = reduce_kernel("sum_all", 1, 100000, ["sum", "max", "min"])
    outs = [torch.empty((), device=DEV) for _ in range(3)]
    src = run(k, x, *outs)
    assert src.meta["mode"] == "split" and src.meta["split"] >= 2
    # a partial per chunk for each reduction, and the last program's counter
    assert src.meta["scratch"][:3] == [[src.meta["split"], "float32"]] * 3, src.meta["scratch"]
    assert src.meta["scratch"][3:] == [[1, "int32"]], src.meta["scratch"]
    close(outs[0], x.double().sum().float(), rtol=1e-5, atol=1e-3)
    close(outs[1], x.max())
    close(outs[2], x.min())
    # the launcher reuses its scratch: a second call gives the same answer
    again = [torch.empty((), device=DEV) for _ in range(3)]
    (fn,) = launch.compile_sources([src])
    for _ in range(2):  # (the counter is back at 0 after each call)
        fn(x, *again)
        assert all(torch.equal(a, b) for a, b in zip(outs, again))


def _ties(rows, cols, nan_row=True):
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 5, (rows, cols), generator=g).float()  # many ties
    x[0, :] = -float("inf")  # all equal: first index
    x[1, cols // 3] = x[1, cols - 2] = 9.0
    if nan_row and rows > 2:
        x[2, cols // 2] = float("nan")
        x[2, cols - 1] = float("nan")
    return x.to(DEV)


@pytest.mark.parametrize(
    "rows,cols,mode", [(6, 37, "persistent"), (3, 5000, "looped"), (1, 100000, "split")]
)
def test_argmax_argmin_ties(rows, cols, mode):
    if rows == 1:  # ties across split chunks
        x = torch.ones(1, cols, device=DEV)
        x[0, 50000] = x[0, 70000] = 2.0
        x[0, 60000] = x[0, 99999] = -1.0
    else:
        x = _ties(rows, cols)
    _reduce(x, ["argmax", "argmin", "max", "min"], mode, rtol=0, atol=0)


def test_by_default_batchnorm_shaped_reductions_split():
    """BatchNorm's statistics over 64 channels of 16x56x56 split by default, rows (NCHW) and
    columns (channels-last); a full sum too; 2048 rows of as many elements do not."""
    from sdk.plugins.cuda_triton import heuristics

    assert heuristics.plan(64, [16 * 56 * 56], True).mode == "split"
    assert heuristics.plan(64, [16 * 56 * 56], True, outer=True).mode == "split"
    assert heuristics.plan(1, [100000], True).mode == "split"
    assert heuristics.plan(2048, [2048], True).mode != "split"


def test_without_split_by_grid_a_split_is_what_it_was_before(monkeypatch):
    """``SPLIT_BY_GRID`` off: BatchNorm-shaped reductions (64 channels of 16x56x56, rows or
    columns) and kernels of several reduction stages are not split; a full sum still is."""
    from sdk.plugins.cuda_triton import heuristics

    monkeypatch.setattr(heuristics, "SPLIT_BY_GRID", False)
    assert heuristics.plan(64, [16 * 56 * 56], True).mode == "looped"
    assert heuristics.plan(64, [16 * 56 * 56], True, outer=True).mode == "looped"
    assert heuristics.plan(1, [100000], True).mode == "split"
    x = torch.randn(4, 20000, device=DEV)
    src = run(_normalize_kernel(4, 20000), x, torch.empty_like(x))
    assert src.meta["mode"] == "looped", src.meta["mode"]


def _chain(src: sdk.KernelSource) -> list[list[str]]:
    """A split kernel's chain of kernels (``[fn, "pre" or "main"]``), checked against its
    source: one ``@triton.jit`` function per kernel, and the header's line."""
    chain = src.meta["chain"]
    for fn, _kind in chain:
        assert f"def {fn}(" in src.source, fn
    assert f"# split: {len(chain)} kernels" in src.source, src.source[:2000]
    return chain


@pytest.fixture(params=["last_program", "last_program_looped", "second_kernel"])
def _combine(request, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where a split reduction combines its partials: in the last program of each block of
    rows (the default; ``_looped``: over the partials 2 at a time, so the combine loops
    several times with a partial last step), or in a second kernel per stage."""
    from sdk.plugins.cuda_triton import heuristics

    monkeypatch.setattr(heuristics, "SPLIT_LAST_PROGRAM_COMBINES", request.param != "second_kernel")
    if request.param == "last_program_looped":
        monkeypatch.setattr(heuristics, "SPLIT_COMBINE_BLOCK", 2)
    return request.param


def _kinds(combine: str, kinds: list[str]) -> list[str]:
    """A chain's kinds as written for second kernels, as ``combine`` makes them: the last
    program's combine leaves the first kernels alone."""
    return kinds if combine == "second_kernel" else [k for k in kinds if k == "pre"]


@pytest.mark.usefixtures("_by_grid")
def test_split_rows_beyond_32_rows(_combine):
    """36 rows of 16500 elements, with the real constants: one program per row would be 36
    programs on a GPU of 132 SMs, so the rows are cut into chunks (more than the 32 rows a
    split took before); sums, maxima and first indices of ties across chunks are eager's,
    whichever program combines the chunks, and at every call (the last program's counters
    are back at 0 after each launch)."""
    rows, cols = 36, 16500
    x = _ties(rows, cols)
    x[5, cols - 1] = 7.0  # the maximum in the last (partial) chunk
    x[6, 4001] = x[6, 12000] = 8.0  # a tie across chunks
    x[7, 3333] = x[7, 9999] = -2.0  # and of the minimum
    reds = ["sum", "argmax", "argmin"]
    k = reduce_kernel(f"rows_{rows}x{cols}", rows, cols, reds)
    outs = [torch.empty(rows, device=DEV, dtype=a.layout.dtype) for a in k.args[1:]]
    src = run(k, x, *outs)
    assert src.meta["mode"] == "split" and src.meta["split"] >= 2, src.meta
    assert [kind for _fn, kind in _chain(src)] == _kinds(_combine, ["pre", "main"])
    for red, out in zip(reds, outs):
        close(out, REF[red](x), rtol=0, atol=0)
    (again,) = launch.compile_sources([src])
    for _ in range(2):
        x = _ties(rows, cols)
        x[8, cols - 2] = x[8, 5] = 9.0
        again(x, *outs)
        for red, out in zip(reds, outs):
            close(out, REF[red](x), rtol=0, atol=0)


def _normalize_kernel(rows: int, cols: int, columns: bool = False) -> ir.Kernel:
    """y = (x - mean) / (mean of squared deviations + 1), per row: two reduction passes and a
    store (BatchNorm's statistics' form, over rows). ``columns``: per column instead (the
    columns contiguous: BatchNorm over channels-last activations)."""
    (o,) = V("j" if columns else "i")
    r0, r1, r2 = V("r0", "r1", "r2")
    X, Y = lay((rows, cols)), lay((rows, cols))
    outer, inner = (cols, rows) if columns else (rows, cols)

    def at(r):
        return (r, o) if columns else (o, r)

    def x(r):
        return ir.Load("x", X.linear(at(r)), F32)

    n = ir.Const(float(inner), F32)
    mean = op("truediv", ir.LocalRef("s", F32), n)

    def dev(r):
        return op("sub", x(r), mean)

    var = op("add", op("truediv", ir.LocalRef("q", F32), n), ir.Const(1.0, F32))
    return ir.Kernel(
        f"normalize{'_columns' if columns else ''}_{rows}x{cols}",
        (o,),
        (outer,),
        [
            ir.Stage((r0,), (inner,), [ir.Reduction("s", "sum", x(r0), F32)]),
            ir.Stage((r1,), (inner,), [ir.Reduction("q", "sum", op("mul", dev(r1), dev(r1)), F32)]),
            ir.Stage(
                (r2,), (inner,), [], [ir.Store("y", Y.linear(at(r2)), op("truediv", dev(r2), var))]
            ),
        ],
        [ir.BufferArg("x", X, "in"), ir.BufferArg("y", Y, "out")],
    )


def _normalize_ref(x: torch.Tensor) -> torch.Tensor:
    d = x.double() - x.double().mean(-1, keepdim=True)
    return (d / (d.square().mean(-1, keepdim=True) + 1)).float()


@pytest.fixture(params=[True, False], ids=["flat_stores", "stores_on_chunks"])
def _flat(request, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether a split chain's store-only stage is a flat pointwise kernel (the default) or
    runs on the first kernels' grid of chunks."""
    from sdk.plugins.cuda_triton import heuristics

    monkeypatch.setattr(heuristics, "SPLIT_FLAT_STORES", request.param)
    return request.param


@pytest.mark.usefixtures("_by_grid")
def test_split_kernel_of_several_passes_is_a_chain_of_kernels(_combine, _flat):
    """A kernel of several stages over a long row (a sum, the sum of squared deviations from
    its mean, a store) splits too: each stage in chunks, each reduction combined (by the last
    program of its block of rows, or by a second kernel) and handed to the later kernels
    through scratch; the store, a flat kernel over every element or on the chunks."""
    x = torch.randn(4, 20000, device=DEV) * 3 + 1
    x[1, 19990] = 30.0  # in the last chunk
    x[3, 7] = float("nan")
    y = torch.empty_like(x)
    src = run(_normalize_kernel(4, 20000), x, y)
    assert src.meta["mode"] == "split", src.meta["mode"]
    kinds = [kind for _fn, kind in _chain(src)]
    last = "flat" if _flat else "pre"
    assert kinds == _kinds(_combine, ["pre", "main", "pre", "main"]) + [last], kinds
    assert src.meta["scratch"].count([4, "float32"]) == 2  # sum and squares, per row
    close(y, _normalize_ref(x), rtol=1e-4, atol=1e-5)


def test_softmax_over_few_long_rows_stays_one_online_loop():
    """Softmax's two passes are one loop (online softmax) however few its rows: not a chain
    of five kernels."""
    x = torch.randn(4, 20000, device=DEV) * 3
    y = torch.empty_like(x)
    src = run(softmax_kernel(4, 20000), x, y)
    assert src.meta["mode"] == "looped", src.meta["mode"]
    close(y, x.softmax(-1), rtol=1e-5, atol=1e-6)


def _column_sum_kernel(rows: int, cols: int) -> ir.Kernel:
    """out[j] = sum(x[:, j]): a column reduction (the loads contiguous along j)."""
    (j,), (r,) = V("j"), V("r")
    X, O = lay((rows, cols)), lay((cols,))
    red = ir.Reduction("s", "sum", ir.Load("x", X.linear((r, j)), F32), F32)
    return ir.Kernel(
        f"colsum_{rows}x{cols}",
        (j,),
        (cols,),
        [
            ir.Stage((r,), (rows,), [red]),
            ir.Stage((), (), [], [ir.Store("out", O.linear((j,)), ir.LocalRef("s", F32))]),
        ],
        [ir.BufferArg("x", X, "in"), ir.BufferArg("out", O, "out")],
    )


@pytest.mark.parametrize("whole", [False, True], ids=["chunks", "whole_tiles"])
@pytest.mark.usefixtures("_by_grid")
def test_split_column_normalization_stores_each_element_once(_combine, _flat, whole, monkeypatch):
    """A column reduction's chain (BatchNorm's statistics over channels-last activations)
    ending in a store-only stage: flat, one tile a program (40 columns: not a power of 2;
    3001 rows: the last tile partial), or on the chunks; the chunks as planned, or rounded
    up to whole tiles. Each element is eager's, and none outside the output is written."""
    from sdk.plugins.cuda_triton import heuristics

    monkeypatch.setattr(heuristics, "SPLIT_MIN_INNER_COLUMNS", 1024)
    monkeypatch.setattr(heuristics, "SPLIT_OUTER_MIN_PROGRAMS", 0)
    monkeypatch.setattr(heuristics, "SPLIT_WHOLE_TILES", whole)
    rows, cols = 3001, 40
    x = torch.randn(rows, cols, device=DEV) * 2 - 1
    x[3000, 39] = 25.0  # the last element
    store = torch.full((rows * cols + 64,), 7.0, device=DEV)
    y = store[: rows * cols].view(rows, cols)
    src = run(_normalize_kernel(rows, cols, columns=True), x, y)
    assert src.meta["mode"] == "split" and src.meta["split"] >= 2, src.meta
    if whole:
        assert src.meta["chunk"] % src.meta["config"]["pre"]["RBLOCK"] == 0, src.meta
    kinds = [kind for _fn, kind in _chain(src)]
    assert kinds[-1] == ("flat" if _flat else "pre"), kinds
    d = x.double() - x.double().mean(0)
    close(y, (d / (d.square().mean(0) + 1)).float(), rtol=1e-4, atol=1e-5)
    assert (store[rows * cols :] == 7.0).all()


@pytest.mark.parametrize("outer", [True, False], ids=["columns", "normalize_rows"])
@pytest.mark.usefixtures("_by_grid")
def test_split_configurations_offered_to_measure_give_the_same_values(outer, monkeypatch):
    """Every configuration a GPU would measure for a split kernel (its first kernels' RBLOCK
    and warps; a column reduction's XBLOCK kept) computes the same values: the chunks are
    the source's, each a loop over RBLOCK steps. Columns: 40 of them over 4000 rows (two
    blocks of 32 columns, the second part masked; 8 chunks of 500 rows, with the thresholds
    set to keep the interpreter's programs few); rows: a two-pass normalization's chain
    of five kernels."""
    from sdk.plugins.cuda_triton import heuristics

    if outer:
        monkeypatch.setattr(heuristics, "SPLIT_MIN_INNER_COLUMNS", 1024)
        monkeypatch.setattr(heuristics, "SPLIT_OUTER_MIN_CHUNK", 16384)
        monkeypatch.setattr(heuristics, "SPLIT_OUTER_MIN_PROGRAMS", 0)
        x = torch.randn(4000, 40, device=DEV)
        src, want = render.render(_column_sum_kernel(4000, 40)), x.double().sum(0).float()
    else:
        x = torch.randn(2, 16400, device=DEV)
        src, want = render.render(_normalize_kernel(2, 16400)), _normalize_ref(x)
    assert src.meta["mode"] == "split", src.meta["mode"]
    configs = heuristics.candidates(src.meta)
    assert {c["pre"]["XBLOCK"] for c in configs} == ({32} if outer else {1}), configs
    assert len({c["pre"]["RBLOCK"] for c in configs}) >= 3, configs
    for cfg in configs:
        out = torch.empty(want.shape, device=DEV)
        launch.bind(src, cfg)(x, out)
        close(out, want, rtol=1e-5, atol=1e-4, msg=heuristics.label(cfg))


def test_reductions_bf16_prod_any_all():
    x = (torch.rand(5, 300, device=DEV) * 0.2 + 0.9).to(BF16)
    _reduce(x, ["sum", "prod", "max"], "persistent", rtol=1e-4, atol=1e-4)
    b = torch.rand(4, 200, device=DEV) > 0.97
    b[1] = False
    b[2] = True
    _reduce(b.to(torch.uint8), ["any", "all"], "persistent")


def test_reduce_two_inner_dims_strided_and_nan():
    """out[j] = sum/max over (i, k) of x[i, j, k]: outer var in the middle, inner strided."""
    j, i, kk = V("j", "i", "k")
    X = lay((6, 5, 7))
    x = ir.Load("x", X.linear((i, j, kk)), F32)
    O1, O2 = lay((5,)), lay((5,))
    kern = ir.Kernel(
        "sum_max_dims_0_2",
        (j,),
        (5,),
        [
            ir.Stage(
                (i, kk),
                (6, 7),
                [ir.Reduction("s", "sum", x, F32), ir.Reduction("m", "max", x, F32)],
            ),
            ir.Stage(
                (),
                (),
                [],
                [
                    ir.Store("o1", O1.linear((j,)), ir.LocalRef("s", F32)),
                    ir.Store("o2", O2.linear((j,)), ir.LocalRef("m", F32)),
                ],
            ),
        ],
        [ir.BufferArg("x", X, "in"), ir.BufferArg("o1", O1, "out"), ir.BufferArg("o2", O2, "out")],
    )
    t = torch.randn(6, 5, 7, device=DEV)
    t[3, 2, 4] = float("nan")
    o1, o2 = torch.empty(5, device=DEV), torch.empty(5, device=DEV)
    run(kern, t, o1, o2)
    close(o1, t.sum((0, 2)), rtol=1e-5, atol=1e-5)
    close(o2, t.amax((0, 2)))
    assert math.isnan(o2[2].item())


def test_stages_of_different_inner_sizes():
    """One kernel: a = sum(x[i, :30]); b = max(y[i, :50]); out[i] = a * b (two r groups)."""
    i, r, s = V("i", "r", "s")
    X, Y, O = lay((9, 30)), lay((9, 50)), lay((9,))
    kern = ir.Kernel(
        "two_groups",
        (i,),
        (9,),
        [
            ir.Stage(
                (r,), (30,), [ir.Reduction("a", "sum", ir.Load("x", X.linear((i, r)), F32), F32)]
            ),
            ir.Stage(
                (s,), (50,), [ir.Reduction("b", "max", ir.Load("y", Y.linear((i, s)), F32), F32)]
            ),
            ir.Stage(
                (),
                (),
                [],
                [
                    ir.Store(
                        "o", O.linear((i,)), op("mul", ir.LocalRef("a", F32), ir.LocalRef("b", F32))
                    )
                ],
            ),
        ],
        [ir.BufferArg("x", X, "in"), ir.BufferArg("y", Y, "in"), ir.BufferArg("o", O, "out")],
    )
    x, y, o = (
        torch.randn(9, 30, device=DEV),
        torch.randn(9, 50, device=DEV),
        torch.empty(9, device=DEV),
    )
    run(kern, x, y, o)
    close(o, x.sum(1) * y.amax(1), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Layouts, indirect loads, random numbers, index width
# ---------------------------------------------------------------------------


def test_non_contiguous_offset_and_broadcast_loads():
    """out[i, j] = xt[i, j] * 2 + row[j]: xt a transposed view at an offset, row broadcast."""
    base = torch.randn(200, device=DEV)
    Xt = lay((5, 7), strides=(1, 9), offset=13)  # a transposed window of a (7, 9) matrix
    R = lay((5, 7), strides=(0, 3), offset=2)  # row[j] = base2[2 + 3 j], stride 0 over i
    base2 = torch.randn(30, device=DEV)
    k = pointwise(
        "strided",
        {"xt": Xt, "row": R},
        lay((5, 7)),
        lambda xt, row: op("add", op("mul", xt, ir.Const(2.0, F32)), row),
    )
    out = torch.empty(5, 7, device=DEV)
    xt = torch.as_strided(base, (5, 7), (1, 9), 13)
    row = torch.as_strided(base2, (5, 7), (0, 3), 2)
    src = run(k, xt, row, out)  # each data pointer at its view's offset
    close(out, xt * 2 + row)
    assert src.meta["clamped"] == 0, src.source  # in bounds, provably


@pytest.mark.parametrize("sizes,perm", [((37, 70), (1, 0)), ((3, 20, 45), (0, 2, 1))])
def test_transposing_pointwise_is_tiled_2d(sizes, perm):
    """out = x.permute(perm) * 2 + y: x is read across its rows, so the kernel tiles in 2D."""
    base = lay(sizes)
    out_sizes = tuple(sizes[p] for p in perm)
    xt = lay(out_sizes, strides=tuple(base.strides[p] for p in perm))
    k = pointwise(
        "permute_mul_add",
        {"x": xt, "y": lay(out_sizes)},
        lay(out_sizes),
        lambda x, y: op("add", op("mul", x, ir.Const(2.0, F32)), y),
    )
    x, y = torch.randn(sizes, device=DEV), torch.randn(out_sizes, device=DEV)
    out = torch.empty(out_sizes, device=DEV)
    src = run(k, x, y, out)
    assert src.meta["mode"] == "pointwise2d" and "YBLOCK" in src.source
    close(out, x.permute(perm) * 2 + y)


@pytest.mark.parametrize("sizes,perm", [((37, 70), (1, 0)), ((3, 20, 45), (0, 2, 1))])
def test_transposing_store_is_tiled_2d(sizes, perm):
    """out = x * 2 + y, every load contiguous along the last variable, the output laid out
    permuted (Swin's attention writes ``k`` transposed for its batched matmul): the store
    runs across the rows, so the kernel tiles in 2D."""
    order = sorted(range(len(sizes)), key=lambda d: perm[d])  # out's dims in memory order
    dense = lay(tuple(sizes[p] for p in perm))
    out_lay = lay(sizes, strides=tuple(dense.strides[order[d]] for d in range(len(sizes))))
    k = pointwise(
        "mul_add_permuted_out",
        {"x": lay(sizes), "y": lay(sizes)},
        out_lay,
        lambda x, y: op("add", op("mul", x, ir.Const(2.0, F32)), y),
    )
    x, y = torch.randn(sizes, device=DEV), torch.randn(sizes, device=DEV)
    out = torch.empty(dense.sizes, device=DEV).permute(order)
    assert out.shape == x.shape and out.stride() == out_lay.strides
    src = run(k, x, y, out)
    assert src.meta["mode"] == "pointwise2d" and "YBLOCK" in src.source
    close(out, x * 2 + y)


@pytest.mark.parametrize("transposed", [False, True])
def test_row_broadcast_tile_gets_two_warps(transposed):
    """out[i, j] = x[i, j] * s[i]: the per-row vector s tiles the kernel in 2D, but nothing
    spans the columns across them (a row-wise kernel): 2 warps. With x read transposed, the
    same tile is a transpose and keeps 4."""
    x_lay = lay((70, 90), strides=(1, 70)) if transposed else lay((70, 90))
    k = pointwise(
        "row_scale",
        {"x": x_lay, "s": lay((70, 90), strides=(1, 0))},
        lay((70, 90)),
        lambda x, s: op("mul", x, s),
    )
    x = torch.randn(90, 70, device=DEV).t() if transposed else torch.randn(70, 90, device=DEV)
    s = torch.randn(70, device=DEV)
    out = torch.empty(70, 90, device=DEV)
    src = run(k, x, s.as_strided((70, 90), (1, 0)), out)
    close(out, x * s[:, None])
    assert src.meta["mode"] == "pointwise2d"
    assert src.meta["config"] == {"XBLOCK": 64, "YBLOCK": 64, "num_warps": 4 if transposed else 2}


def _embedding_kernel(rows: int = 10) -> ir.Kernel:
    i, j, kk = V("i", "j", "k")
    s = ir.var("s")
    W, IDX, O = lay((rows, 16)), lay((4, 5), I64), lay((4, 5, 16))
    index = ir.Load("idx", IDX.linear((i, j)), I64)
    value = ir.Load("w", W.linear((s, kk)), F32, binds=((s, index, rows),))
    return ir.Kernel(
        "embedding",
        (i, j, kk),
        (4, 5, 16),
        [ir.Stage((), (), [], [ir.Store("out", O.linear((i, j, kk)), value)])],
        [ir.BufferArg("w", W, "in"), ir.BufferArg("idx", IDX, "in"), ir.BufferArg("out", O, "out")],
    )


@pytest.mark.parametrize("debug", [False, True])
def test_indirect_embedding_load(debug):
    """out[i, j, k] = weight[idx[i, j], k]; the bind is checked by a device-side assert
    in every mode (the kernel compiles with asserts on) and clamped in range."""
    w = torch.randn(10, 16, device=DEV)
    idx = torch.randint(0, 10, (4, 5), device=DEV)
    out = torch.empty(4, 5, 16, device=DEV)
    src = run(_embedding_kernel(), w, idx, out, debug=debug)
    close(out, w[idx], rtol=0, atol=0)
    assert "tl.device_assert" in src.source and src.meta["debug"] is True
    assert "tl.minimum(tl.maximum(" in src.source  # the clamp: no read outside w
    assert src.meta["clamped"] == 0  # the direct index w[s, k] is provably in bounds


def test_computed_index_proven_in_range_is_not_checked():
    """An index computed by integer ops whose bounds the renderer proves inside its buffer
    (a pooling window's row) is loaded as is: no device-side assert, no debug build. One
    that can reach past the buffer keeps the assert."""
    x = torch.randn(5, device=DEV)
    out = torch.empty(12, device=DEV)
    src = run(window_kernel(0, DEV), x, out)
    ii = torch.arange(12)
    close(out, x[((ii + 1) // 2 - 1).clamp(0, 4).to(DEV)], rtol=0, atol=0)
    assert "tl.device_assert" not in src.source and "debug" not in src.meta
    assert "tl.device_assert" in render.render(window_kernel(1, DEV)).source


def _out_of_range(bad: int) -> None:
    w = torch.randn(10, 16, device=DEV)
    idx = torch.randint(0, 10, (4, 5), device=DEV)
    idx[2, 3] = bad
    out = torch.empty(4, 5, 16, device=DEV)
    run(_embedding_kernel(), w, idx, out)
    if DEV == "cuda":
        torch.cuda.synchronize()


@pytest.mark.parametrize("bad", [10, -1])
def test_out_of_range_indirect_index_raises_in_default_mode(bad):
    if DEV != "cuda":
        with pytest.raises(Exception, match="index out of bounds"):
            _out_of_range(bad)
        return
    # on a GPU the device-side assert leaves the process's CUDA context unusable (every
    # later test of an xdist worker failed after it): it fires in a process of its own
    code = f"from {__name__} import _out_of_range; _out_of_range({bad})"
    root = pathlib.Path(__file__).resolve().parents[3]
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert child.returncode != 0 and "index out of bounds" in child.stderr, child.stderr[-2000:]


def test_indirect_load_from_an_empty_buffer_reads_nothing():
    """A bind into a buffer of zero rows: the assert fires, and no load is emitted."""
    src = render.render(_embedding_kernel(rows=0))
    assert "tl.load(w_ptr" not in src.source and "tl.device_assert" in src.source


def test_unprovable_direct_load_is_clamped_into_its_buffer():
    """x[(i * 7) % 5 + i // 3]: bounds the renderer cannot prove stay inside x."""
    (i,) = V("i")
    X, O = lay((8,)), lay((12,))
    idx = ir.Mod(i * 7 + 20, 5) + ir.FloorDiv(i, 3) - 2  # may leave [0, 8) as far as it knows
    value = ir.Load("x", idx, F32)
    kern = ir.Kernel(
        "odd",
        (i,),
        (12,),
        [ir.Stage((), (), [], [ir.Store("out", i, value)])],
        [ir.BufferArg("x", X, "in"), ir.BufferArg("out", O, "out")],
    )
    x = torch.randn(8, device=DEV)
    out = torch.empty(12, device=DEV)
    src = run(kern, x, out)
    assert src.meta["clamped"] == 1
    ii = torch.arange(12)
    want = ((ii * 7 + 20) % 5 + ii // 3 - 2).clamp(0, 7)
    close(out, x[want.to(DEV)], rtol=0, atol=0)


@pytest.mark.skipif(DEV != "cpu", reason="the interpreter's check (CPU tensors)")
def test_interpreter_rejects_a_load_outside_every_buffer():
    """The CI net under the clamps: an out-of-bounds address raises, naming the kernel."""
    import triton
    import triton.language as tl

    from sdk.plugins.cuda_triton.interp import checking_bounds

    @triton.jit
    def past_the_end(x_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs + 1))

    x, out = torch.randn(8), torch.empty(8)
    with (
        pytest.raises(Exception, match="outside every buffer"),
        checking_bounds("past_the_end", [x, out]),
    ):
        past_the_end[(1,)](x, out, N=8)
    y = torch.randn(9)
    with checking_bounds("in_bounds", [y, out]):
        past_the_end[(1,)](y, out, N=8)  # 9 elements: in bounds
    close(out, y[1:])


def _rand_kernel(name: str, n: int) -> ir.Kernel:
    (i,) = V("i")
    seed = ir.Load("seed", sympy.Integer(0), I64)
    offset = op("add", ir.IndexValue(i), ir.Const(1000, I64))
    return ir.Kernel(
        name,
        (i,),
        (n,),
        [ir.Stage((), (), [], [ir.Store("out", i, ir.Op(name, (seed, offset), F32))])],
        [ir.BufferArg("seed", lay((1,), I64), "in"), ir.BufferArg("out", lay((n,)), "out")],
    )


def test_rand_uniform_and_normal():
    n = 4096
    seed = torch.tensor([1234], device=DEV)
    u, u2, u3 = (torch.empty(n, device=DEV) for _ in range(3))
    run(_rand_kernel("rand", n), seed, u)
    assert u.min().item() >= 0.0 and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.03 and u.unique().numel() > n - 10
    run(_rand_kernel("rand", n), seed, u2)
    assert torch.equal(u, u2)  # counter-based: same seed and offsets, same numbers
    run(_rand_kernel("rand", n), seed + 1, u3)
    assert not torch.equal(u, u3)
    z = torch.empty(n, device=DEV)
    run(_rand_kernel("randn", n), seed, z)
    assert abs(z.mean().item()) < 0.1 and abs(z.std().item() - 1) < 0.1


def test_int64_indices_when_an_index_can_reach_2_31():
    i, j = V("i", "j")
    big = lay((3, 2**30), strides=(2**30, 1))
    k = ir.Kernel(
        "huge",
        (i, j),
        (3, 2**30),
        [
            ir.Stage(
                (),
                (),
                [],
                [ir.Store("out", big.linear((i, j)), ir.Load("x", big.linear((i, j)), F32))],
            )
        ],
        [ir.BufferArg("x", big, "in"), ir.BufferArg("out", big, "out")],
    )
    src = render.render(k)
    assert src.meta["int64"] and "tl.program_id(0).to(tl.int64)" in src.source
    small = render.render(softmax_kernel(8, 1000))
    assert not small.meta["int64"] and "int64" not in small.source.split("@triton.jit")[-1]


def _symbolic_rows(dtype=F32, every_other=False) -> ir.Kernel:
    """out[i, j] = x[i, j] * 2 over (s0, s1) rows, row-major: index s1*i + j; with
    ``every_other`` over x's even rows, (s0 + 1) // 2 of them (``x[::2]``)."""
    s0, s1 = ir.size_var("s0"), ir.size_var("s1")
    i, j = V("i", "j")
    x = lay((s0, s1), dtype, strides=(s1, 1))
    out = x
    if every_other:
        out = lay((ir.FloorDiv(s0 + 1, 2), s1), dtype, strides=(s1, 1))
        x = lay((ir.FloorDiv(s0 + 1, 2), s1), dtype, strides=(2 * s1, 1))
    value = ir.Op("mul", (ir.Load("x", x.linear((i, j)), dtype), ir.Const(2.0, dtype)), dtype)
    return ir.Kernel(
        "rows",
        (i, j),
        out.sizes,
        [ir.Stage((), (), [], [ir.Store("out", out.linear((i, j)), value)])],
        [ir.BufferArg("x", x, "in"), ir.BufferArg("out", out, "out")],
        size_args=(s0, s1),
    )


def test_symbolic_sizes_index_in_32_bits_under_stated_bounds():
    """A kernel of symbolic sizes indexes in 32 bits where its indices' bounds (polynomials
    in the size symbols) fit at the compiling call's sizes, and states those bounds in
    ``requires`` for the program to check per call; where they do not fit there, it indexes
    in 64 bits and requires nothing."""
    s0, s1 = ir.size_var("s0"), ir.size_var("s1")
    with size_hints({s0: 64, s1: 768}):
        src = render.render(_symbolic_rows())
    assert not src.meta["int64"] and "int64" not in src.source.split("@triton.jit")[-1]
    assert src.requires, "32-bit indices over symbolic sizes must state their bounds"
    for text, limit in src.requires:
        expr = sympy.sympify(text, locals={"s0": s0, "s1": s1})
        assert limit == 2**31 - 2 and expr.free_symbols <= {s0, s1}
    bounds = [sympy.sympify(t, locals={"s0": s0, "s1": s1}) for t, _ in src.requires]
    # the bounds cover the largest index (s0*s1 - 1) and the grid's overhang at any sizes
    for n0, n1 in ((2, 2), (64, 768), (3000, 50257)):
        worst = max(int(b.subs({s0: n0, s1: n1})) for b in bounds)
        assert worst >= n0 * n1 + 4096 - 1, (n0, n1, src.requires)
    with size_hints({s0: 2**22, s1: 768}):  # 3.2e9 elements at the compiling call
        big = render.render(_symbolic_rows())
    assert big.meta["int64"] and not big.requires
    # a range that is a floor division (x[::2]): its bounds are still size arithmetic, which
    # the core reads, and still cover x's largest index, 2*s1*((s0 + 1)//2 - 1) + s1 - 1
    with size_hints({s0: 64, s1: 768}):
        halves = render.render(_symbolic_rows(every_other=True))
    assert not halves.meta["int64"]
    parsed = parse_requires(halves.requires)
    for n0, n1 in ((3, 2), (65, 768), (3001, 50257)):
        at = {sympy.Symbol("s0", integer=True, positive=True): n0}
        at[sympy.Symbol("s1", integer=True, positive=True)] = n1
        worst = max(e.subs(at) for e, _ in parsed)
        assert worst >= 2 * n1 * ((n0 + 1) // 2 - 1) + n1 - 1, (n0, n1, halves.requires)


def test_a_call_past_a_symbolic_programs_32_bit_bounds_runs_a_variant_of_its_sizes(
    monkeypatch, specializations, graph_reports
):
    """The program of symbolic sizes checks its kernels' ``requires`` per call: sizes past
    them (here a lowered 32-bit limit) run a variant compiled for those sizes, and a call
    within them goes back to the symbolic program."""
    from sdk.plugins.cuda_triton import planning

    monkeypatch.setattr(planning, "INT32_LIMIT", 9000)

    def f(x):
        return torch.relu(x) * 2 + x.sum(-1, keepdim=True)

    compiled = torch.compile(f, backend="sdk:cuda_triton", dynamic=True)
    for rows in (4, 9, 1200, 5):  # 1200 x 8 elements and the grid's overhang: past 9000
        x = torch.randn(rows, 8, device=DEV)
        close(compiled(x), f(x))
    [report] = graph_reports
    assert report.sizes.startswith("symbolic") and "requires" in report.sizes, report.sizes
    [program] = specializations
    sizes = [next(s for s in key if isinstance(s, TensorSpec)).sizes for key in program.variants]
    assert len(sizes) == 2 and (1200, 8) in sizes, sizes  # the symbolic one, then 1200's


def test_a_program_of_symbolic_sizes_from_the_cache_keeps_its_bounds(
    monkeypatch, tmp_path, specializations, graph_reports
):
    """The size requirements are part of the program the whole-graph cache keeps: a second
    compile that loads it still sends a call past them to a variant of its own sizes."""
    from sdk.plugins.cuda_triton import planning

    monkeypatch.setattr(planning, "INT32_LIMIT", 9000)
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    def f(x):
        return torch.relu(x) * 2 + x.sum(-1, keepdim=True)

    for attempt in range(2):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="sdk:cuda_triton", dynamic=True)
        for rows in (4, 9, 1200, 5):
            x = torch.randn(rows, 8, device=DEV)
            close(compiled(x), f(x))
            if attempt == 1 and rows == 9:  # (before the variant's build reports too)
                report = graph_reports[-1]
                assert report.cache == "hit" and "requires" in report.sizes, report
    assert [len(p.variants) for p in specializations] == [2, 2]


# ---------------------------------------------------------------------------
# Plugin hooks and the launcher's module cache
# ---------------------------------------------------------------------------


def _ctx(**options) -> sdk.CompileContext:
    return sdk.CompileContext(
        "cuda_triton",
        DEV,
        "inference",
        "g0",
        {"debug": False, "autotune": False, **options},
        frozenset(cuda_triton.sdk_plugin_info().capabilities),
    )


@pytest.mark.parametrize("autotune", [False, True])
def test_hooks_render_compile_and_offer_configurations_to_measure(autotune):
    """The kernel's other launch configurations (sdk_kernel_choices) each compute what the
    rendered one does; under the interpreter none is offered (nothing is timed there)."""
    k = softmax_kernel(8, 1000)
    src = cuda_triton.sdk_render_kernel(ctx=_ctx(), kernel=k)
    assert isinstance(src, sdk.KernelSource) and src.language == "triton"
    assert src.entry == "softmax_8x1000" and "# outer: x0 < 8" in src.source
    (fn,) = cuda_triton.sdk_compile_kernels(ctx=_ctx(), sources=[src])
    x, y = torch.randn(8, 1000, device=DEV), torch.empty(8, 1000, device=DEV)
    fn(x, y)
    close(y, x.softmax(-1), rtol=1e-5, atol=1e-6)
    choices = cuda_triton.sdk_kernel_choices(ctx=_ctx(autotune=autotune), kernel=k, source=src)
    if DEV == "cpu":
        assert choices is None
        return
    assert isinstance(choices, sdk.KernelChoices) and choices.synchronize is not None
    few = cuda_triton.sdk_kernel_choices(ctx=_ctx(), kernel=k, source=src)
    assert 0 < len(few.alternatives) <= len(choices.alternatives)
    configs = [a.source.meta["config"] for a in choices.alternatives]
    assert src.meta["config"] not in configs
    fns = cuda_triton.sdk_compile_kernels(
        ctx=_ctx(), sources=[a.source for a in choices.alternatives]
    )
    for a, f in zip(choices.alternatives, fns, strict=True):
        y.zero_()
        f(x, y)
        close(y, x.softmax(-1), rtol=1e-5, atol=1e-6, msg=a.label)


def test_op_support_refuses_complex_accepts_float64():
    import torch.fx

    g = torch.fx.Graph()
    a = g.placeholder("a")
    a.meta["val"] = torch.empty(3, dtype=torch.complex64)
    n = g.call_function(torch.ops.aten.abs.default, (a,))
    n.meta["val"] = torch.empty(3)
    verdict = cuda_triton.sdk_op_support(ctx=_ctx(), op=torch.ops.aten.abs.default, node=n)
    assert verdict is not None and not verdict.ok and "complex" in verdict.reason
    a.meta["val"] = torch.empty(3, dtype=torch.float64)
    n.meta["val"] = torch.empty(3, dtype=torch.float64)
    assert cuda_triton.sdk_op_support(ctx=_ctx(), op=torch.ops.aten.abs.default, node=n) is None


def test_modules_are_cached_per_process_in_a_private_dir():
    src = render.render(softmax_kernel(8, 1000))
    m1, m2 = launch.load_module(src.source), launch.load_module(src.source)
    assert m1 is m2
    path = m1.__file__
    with open(path) as f:
        assert f.read() == src.source
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700


@pytest.mark.skipif(DEV == "cuda", reason="checks the interpreter's NumPy shortcut")
def test_combine_helpers_without_the_interpreter_shortcut(monkeypatch):
    """The interpreter reduces our combine helpers with NumPy; run the helpers themselves once."""
    from sdk.plugins.cuda_triton import interp

    monkeypatch.setattr(interp, "REDUCERS", {})
    x = _ties(3, 40)
    k = reduce_kernel("slow_reduce_3x40", 3, 40, ["argmax", "argmin", "max", "min", "sum", "prod"])
    outs = [torch.empty(3, device=DEV, dtype=a.layout.dtype) for a in k.args[1:]]
    run(k, x, *outs)
    for red, out in zip(["argmax", "argmin", "max", "min", "sum", "prod"], outs):
        close(out, REF[red](x), rtol=1e-5, atol=1e-5)


def test_launch_path_and_repeated_calls():
    """On a GPU the second call on skips Triton's dispatch; results stay the same."""
    k = pointwise(
        "launch_path", {"a": lay((300,))}, lay((300,)), lambda a: op("mul", a, ir.Const(3.0, F32))
    )
    ir.check_kernel(k)
    (fn,) = launch.compile_sources([render.render(k)])
    a = torch.randn(300, device=DEV)
    outs = [torch.empty(300, device=DEV) for _ in range(3)]
    for o in outs:
        fn(a, o)
    assert fn.path() == ("fast" if DEV == "cuda" else "portable")
    for o in outs:
        close(o, a * 3, rtol=0, atol=0)


def test_narrow_column_reduction_takes_long_tiles():
    """A column sum over few columns (few programs) loops in [16, 1024] tiles; wide ones (a
    vocabulary's bias gradient) in [32, 64] tiles."""
    from sdk.plugins.cuda_triton import heuristics

    narrow = heuristics.plan(768, [4096], False, outer=True)
    assert (narrow.mode, narrow.config) == (
        "looped",
        {"XBLOCK": 16, "RBLOCK": 1024, "num_warps": 8},
    )
    for columns in (8192, 30522):
        wide = heuristics.plan(columns, [4096], False, outer=True)
        assert wide.config == {"XBLOCK": 32, "RBLOCK": 64, "num_warps": 8}, columns


def test_rows_up_to_8192_are_read_in_one_chunk():
    """A looped row of up to 8192 elements is one chunk, so the storing loop's read of the row
    hits the cache (softmax 8192x8192 fp32 on an H100: 99 % of copy bandwidth against 88 %);
    longer rows (a vocabulary) keep 4096-element chunks. The values stay softmax's."""
    from sdk.plugins.cuda_triton import heuristics

    for cols, rblock in ((5000, 8192), (8192, 8192), (50257, 4096)):
        p = heuristics.plan(8192, [cols, cols, cols], False)
        assert (p.mode, p.config) == ("looped", {"XBLOCK": 1, "RBLOCK": rblock, "num_warps": 16})
    x = torch.randn(3, 5000, device=DEV) * 3
    y = torch.empty_like(x)
    src = run(softmax_kernel(3, 5000), x, y)
    assert src.meta["config"]["RBLOCK"] == 8192, src.meta
    close(y, x.softmax(-1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("outer", [False, True])
@pytest.mark.parametrize("channels", [64, 128, 256])
@pytest.mark.usefixtures("_by_grid")
def test_batchnorm_statistics_plan_split(channels, outer):
    """BatchNorm's statistics and gradients over N*H*W = 16*56*56 elements per channel: rows
    in NCHW, columns in channels-last (and gamma/beta's gradients). Unsplit, a channel per
    program (rows) or a block of 16 to 32 channels (columns) would launch 4 to 256 programs
    on a 132-SM GPU; split, the grid covers chunks x rows, about SPLIT_TARGET_PROGRAMS."""
    from sdk.plugins.cuda_triton import heuristics

    rnumel = 16 * 56 * 56
    p = heuristics.plan(channels, [rnumel, rnumel], True, outer=outer)
    assert p.mode == "split", p
    pre = p.pre_config
    assert p.split * p.chunk >= rnumel > (p.split - 1) * p.chunk
    assert pre["XBLOCK"] == (min(32, channels) if outer else 1), pre
    programs = p.split * heuristics.cdiv(channels, pre["XBLOCK"])
    if outer:
        min_chunk, target = heuristics.SPLIT_OUTER_MIN_CHUNK, heuristics.SPLIT_OUTER_TARGET_PROGRAMS
    else:
        min_chunk, target = heuristics.SPLIT_MIN_CHUNK, heuristics.SPLIT_TARGET_PROGRAMS
    # programs enough for the GPU, or as many as chunks of ``min_chunk`` elements allow
    fewest = min(heuristics.MIN_PROGRAMS, channels * rnumel // min_chunk)
    assert fewest <= programs <= 2 * target, programs
    assert 2 * p.chunk * pre["XBLOCK"] >= min_chunk, p
    # the same shape where the kernel has no split form, or its sizes are symbolic: unsplit
    assert heuristics.plan(channels, [rnumel], False, outer=outer).mode == "looped"
    assert heuristics.plan(channels, [rnumel], True, outer=outer, looped=True).mode != "split"


def test_column_reductions_split_from_short_columns():
    """A column reduction of one stage (a bias or LayerNorm gradient) or several (BatchNorm
    over channels-last activations: statistics, then per channel, then per element) splits
    from ``SPLIT_MIN_INNER_COLUMNS`` rows where it would run few programs unsplit:
    resnet50's later stages (512 channels of 12544 rows, 1024 of 3136, 2048 of 1568 and of
    784) ran 32 to 128 programs unsplit, T5-small's RMSNorm weight gradients (512 columns of
    4096 and of 1024 rows) 32. Split, they run at least twice as many: each program reduces
    ``SPLIT_OUTER_MIN_CHUNK`` elements or more where that leaves ``SPLIT_OUTER_MIN_PROGRAMS``
    programs, else shorter chunks, of ``SPLIT_MIN_CHUNK`` elements or more, reach towards
    that many."""
    from sdk.plugins.cuda_triton import heuristics

    shapes = ((512, 12544), (1024, 3136), (2048, 1568), (2048, 784), (512, 4096), (512, 1024))
    for channels, rows in shapes:
        for stages in ([rows], [rows, rows]):
            p = heuristics.plan(channels, stages, True, outer=True)
            assert p.mode == "split", (channels, stages, p)
            blocks = heuristics.cdiv(channels, p.pre_config["XBLOCK"])
            programs, elements = p.split * blocks, p.chunk * p.pre_config["XBLOCK"]
            assert programs >= 2 * heuristics.cdiv(channels, heuristics.OUTER_MIN_ROWS), p
            assert 2 * elements >= heuristics.SPLIT_MIN_CHUNK, p
            long_chunks = 2 * elements >= heuristics.SPLIT_OUTER_MIN_CHUNK
            assert long_chunks or programs < heuristics.SPLIT_OUTER_MIN_PROGRAMS + blocks, p
        # rows (NCHW): many enough programs either way
        assert heuristics.plan(channels, [rows, rows], True).mode != "split"
    # the floor: towards SPLIT_OUTER_MIN_PROGRAMS programs, in chunks of 4096 elements or more
    p = heuristics.plan(512, [1024], True, outer=True)
    assert p.split * heuristics.cdiv(512, p.pre_config["XBLOCK"]) == 128, p  # 8 chunks: the most
    p = heuristics.plan(512, [4096], True, outer=True)
    floor = heuristics.SPLIT_OUTER_MIN_PROGRAMS
    assert floor <= p.split * heuristics.cdiv(512, p.pre_config["XBLOCK"]) < floor + 16, p
    # too short to split: under the threshold, or a single chunk
    assert heuristics.plan(512, [256, 256], True, outer=True).mode != "split"
    assert heuristics.plan(512, [256], True, outer=True).mode != "split"
    assert heuristics.plan(8, [4096, 4096], True, outer=True).mode == "split"
    assert heuristics.plan(8, [600, 600], True, outer=True).mode == "split"  # 2 chunks of 2400
    assert heuristics.plan(8, [500, 500], True, outer=True).mode != "split"


def test_split_is_kept_for_short_reductions_and_full_grids():
    """Shapes the split leaves as they were: rows enough for the GPU (512 channels, a
    vocabulary's rows), reductions under SPLIT_MIN_INNER, columns enough for narrow tiles
    (8192)."""
    from sdk.plugins.cuda_triton import heuristics

    assert heuristics.plan(512, [16 * 56 * 56], True).mode == "looped"
    assert heuristics.plan(8192, [50257], True).mode == "looped"
    assert heuristics.plan(200, [8192], True).mode == "looped"
    assert heuristics.plan(8192, [65536], True, outer=True).mode == "looped"
    assert heuristics.plan(8192, [4096], True, outer=True).mode == "looped"
    # few rows, long: split as before
    assert heuristics.plan(1, [100000], True).mode == "split"


def test_a_long_column_sum_on_few_programs_splits():
    """A bias gradient over 384 columns of 8 x 1500 rows (Whisper-tiny's encoder) ran on 24
    programs unsplit, at 74 GB/s on an H200; from ``SPLIT_MIN_INNER_COLUMNS`` rows such a
    column sum splits onto at least ``MIN_PROGRAMS`` programs, each reducing at least about
    ``SPLIT_OUTER_MIN_CHUNK`` elements. Columns enough for the GPU stay unsplit."""
    from sdk.plugins.cuda_triton import heuristics

    p = heuristics.plan(384, [12000], True, outer=True)
    assert p.mode == "split", p
    blocks = heuristics.cdiv(384, p.pre_config["XBLOCK"])
    assert p.split * blocks >= heuristics.MIN_PROGRAMS, p
    assert 2 * p.chunk * p.pre_config["XBLOCK"] >= heuristics.SPLIT_OUTER_MIN_CHUNK, p
    assert heuristics.plan(384, [256], True, outer=True).mode == "looped"
    assert heuristics.plan(8192, [12000], True, outer=True).mode == "looped"


def test_int64_index_math_that_fits_runs_in_32_bits_and_what_does_not_in_64():
    """A pooling window's row, ``(i + 1) // 2 - 1`` clamped: int64 in the IR, computed in 32
    bits (a GPU's 64-bit division takes many instructions) where it and what it is computed
    from fit, and widened where an int64 value is needed. A product of two values that fit,
    which does not (``(i + 50000) ** 2``), is computed in 64 bits; so is everything after it."""
    i = ir.var("i0")
    n = 12
    row = op("sub", op("floordiv", ir.IndexValue(i + 1), ir.Const(2, I64)), ir.Const(1, I64))
    row = op("minimum", op("maximum", row, ir.Const(0, I64)), ir.Const(4, I64))
    big = ir.IndexValue(i + 50000)
    square = op("floordiv", op("mul", big, big), ir.Const(3, I64))
    k = pointwise(
        "narrow",
        {},
        lay((n,), I64),
        lambda: op("add", op("mul", row, ir.Const(1000, I64)), square),
    )
    out = torch.empty(n, device=DEV, dtype=I64)
    src = run(k, out)
    want = [min(max((v + 1) // 2 - 1, 0), 4) * 1000 + (v + 50000) ** 2 // 3 for v in range(n)]
    assert out.tolist() == want
    body = src.source.split("def narrow", 1)[1]
    assert "tl.full([1], 2, tl.int32)" in body, body  # the window's row: 32 bits
    # the square: of the two values widened to 64 bits, as is the row for the sum
    assert re.search(r"\((tmp\d+)\.to\(tl\.int64\) \* \1\.to\(tl\.int64\)\)", body), body
    assert re.search(r"\(tmp\d+\.to\(tl\.int64\) \+ tmp\d+\)", body), body


def test_an_index_value_widened_in_two_looped_stages_is_computed_in_each():
    """``r // 3`` summed as int64 by two looped stages (each a loop over the row's chunks):
    its 32-bit value, and its 64-bit one for the sum, belong to each loop; the second stage
    reusing the first loop's name read the first loop's last chunk."""
    (i,), (r,) = V("i"), V("r")
    rows, cols = 3, 40000  # (several chunks: the last one's minimum is not 0)
    third = op("floordiv", ir.IndexValue(r), ir.Const(3, I64))
    outs = [lay((rows,), I64), lay((rows,), I64)]
    stages = [
        ir.Stage((r,), (cols,), [ir.Reduction("a", "sum", third, I64)]),
        ir.Stage((r,), (cols,), [ir.Reduction("b", "min", third, I64)]),
        ir.Stage(
            (),
            (),
            [],
            [
                ir.Store("out_a", outs[0].linear((i,)), ir.LocalRef("a", I64)),
                ir.Store("out_b", outs[1].linear((i,)), ir.LocalRef("b", I64)),
            ],
        ),
    ]
    args = [ir.BufferArg("out_a", outs[0], "out"), ir.BufferArg("out_b", outs[1], "out")]
    k = ir.Kernel("two_loops", (i,), (rows,), stages, args)
    a, b = (torch.empty(rows, device=DEV, dtype=I64) for _ in range(2))
    src = run(k, a, b)
    assert "for roffset" in src.source, src.source  # looped stages
    want = torch.arange(cols) // 3
    assert a.tolist() == [int(want.sum())] * rows and b.tolist() == [0] * rows
