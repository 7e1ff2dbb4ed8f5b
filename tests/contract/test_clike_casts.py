"""Float -> integer casts: cpu_cpp's op table and :class:`sdk.clike.CTarget`'s default differ,
on purpose, and this shows how.

cpu_cpp (``plugins/cpu_cpp/ops.py``, ``cast``) converts as eager does on the CPU, bit for bit:
to int32 and int64 through its prelude's ``sdk_f2i32``/``sdk_f2i64`` (C leaves a value out of
range, NaN or inf undefined; these define it as the CPU's own conversion: x86-64's "integer
indefinite" INT_MIN), to int8/int16 through int32 and to uint8 through int64, as eager's
(``tests/e2e/test_eager_edge_values.py`` compares the compiled kernels with eager).
``CTarget.cast`` (the C-like scaffold's) converts directly, through int64 for uint8 only, as
torch's scalar ``static_cast_with_inter_type`` reads: in range both give torch's values; out of
range its result is C's undefined one (on x86-64 without vectorization, int32's INT_MIN too).
"""

from __future__ import annotations

import ctypes
import math
import platform

import pytest
import torch

import sdk.clike
from sdk import toolchain
from sdk.plugins.cpu_cpp import render

#: float32 inputs: in range, out of range of int8 only, of int16 only, of all three, NaN, inf.
VALUES = (-7.75, 300.0, -129.5, 40000.0, 3e9, math.nan, -math.inf)
IN_RANGE = {
    torch.int8: (-7, 44, 127),  # 300.0 -> int8 wraps
    torch.int16: (-7, 300, -129),
    torch.int32: (-7, 300, -129),
}
#: eager's on x86-64 for VALUES[3:]: int32's INT_MIN, and its low bits for the narrower ones
OUT_OF_RANGE = {
    torch.int8: (64, 0, 0, 0),  # 40000 wraps
    torch.int16: (-25536, 0, 0, 0),
    torch.int32: (40000, -(2**31), -(2**31), -(2**31)),
}

C_TARGET = sdk.clike.CTarget(name="c_casts", ops={}, reducers={})
CTYPES = {torch.int8: ctypes.c_int8, torch.int16: ctypes.c_int16, torch.int32: ctypes.c_int32}


def _casts(target: sdk.clike.CTarget, language: str) -> dict[torch.dtype, object]:
    """One scalar function per dtype, ``<int> cast_<dtype>(float x)``, built from
    ``target``'s ``cast`` op after its preludes (scalar: no vector conversion can saturate
    instead)."""
    cast = target.op("cast")
    head = "\n".join(target.preludes) + "\n" + ('extern "C" {\n' if language == "c++" else "")
    body = "".join(
        f"{target.ctype(dt)} cast_{str(dt)[6:]}(float x) "
        f"{{ return {cast('x', dtype=dt, src=torch.float32)}; }}\n"
        for dt in CTYPES
    )
    source = head + body + ("}\n" if language == "c++" else "")
    lib = toolchain.load_library(toolchain.compile_library(source, language=language))
    out = {}
    for dt, ct in CTYPES.items():
        fn = getattr(lib, f"cast_{str(dt)[6:]}")
        fn.argtypes, fn.restype = [ctypes.c_float], ct
        out[dt] = fn
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    mp = pytest.MonkeyPatch()
    mp.setenv("SDK_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        yield {"cpu_cpp": _casts(render.TARGET, "c++"), "c": _casts(C_TARGET, "c")}
    finally:
        mp.undo()


def test_the_two_tables_spell_the_cast_differently():
    cpp = render.TARGET.op("cast")
    c = C_TARGET.op("cast")
    assert cpp("x", dtype=torch.int32, src=torch.float32) == "sdk_f2i32(x)"
    assert cpp("x", dtype=torch.int8, src=torch.float32) == "static_cast<int8_t>(sdk_f2i32(x))"
    assert cpp("x", dtype=torch.uint8, src=torch.float32) == "static_cast<uint8_t>(sdk_f2i64(x))"
    assert c("x", dtype=torch.int32, src=torch.float32) == "((int32_t)(x))"


@pytest.mark.parametrize("dtype", list(CTYPES), ids=str)
def test_in_range_casts_agree_with_torch(built, dtype):
    eager = torch.tensor(VALUES[:3], dtype=torch.float32).to(dtype).tolist()
    assert tuple(eager) == IN_RANGE[dtype]
    for target in ("cpu_cpp", "c"):
        assert tuple(built[target][dtype](v) for v in VALUES[:3]) == IN_RANGE[dtype], target


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"),
    reason="out-of-range float -> int conversion is undefined in C; x86-64 values",
)
@pytest.mark.parametrize("dtype", list(CTYPES), ids=str)
def test_out_of_range_nan_and_inf_casts_are_eagers_in_cpu_cpp(built, dtype):
    eager = tuple(torch.tensor(VALUES[3:], dtype=torch.float32).to(dtype).tolist())
    assert eager == OUT_OF_RANGE[dtype]
    assert tuple(built["cpu_cpp"][dtype](v) for v in VALUES[3:]) == eager
