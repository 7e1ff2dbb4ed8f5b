"""Float -> narrow integer casts: cpu_cpp's op table and :class:`sdk.clike.CTarget`'s default
differ, on purpose, and this shows how.

cpu_cpp (``plugins/cpu_cpp/ops.py``, ``cast``) converts a float to every integer narrower than
64 bits through ``int64_t``; ``CTarget.cast`` (the C-like scaffold's) does so only for uint8,
as torch's scalar ``static_cast_with_inter_type`` does, and converts to the others directly.
In range both give torch's values. Out of range or NaN, C leaves the result undefined, torch
calls it undefined too, and the two disagree on x86-64: through int64 the value wraps modulo
2**32 (3e9 -> int32 -1294967296, NaN -> 0); directly, it is the CPU's "integer indefinite"
INT_MIN, which is also what eager torch gives on x86-64.
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

#: float32 inputs: in range, out of range of int8 only, of both, and NaN.
VALUES = (-7.75, 300.0, -129.5, 3e9, math.nan)
IN_RANGE = {torch.int8: (-7, 44, 127), torch.int32: (-7, 300, -129)}  # 300.0 -> int8 wraps
#: x86-64 results of the out-of-range values (3e9, NaN), per target.
THROUGH_INT64 = {torch.int8: (0, 0), torch.int32: (-1294967296, 0)}
DIRECT = {torch.int8: (0, 0), torch.int32: (-(2**31), -(2**31))}

C_TARGET = sdk.clike.CTarget(name="c_casts", ops={}, reducers={})
CTYPES = {torch.int8: ctypes.c_int8, torch.int32: ctypes.c_int32}


def _casts(target: sdk.clike.CTarget, language: str) -> dict[torch.dtype, object]:
    """One scalar function per dtype, ``<int> cast_<dtype>(float x)``, built from
    ``target``'s ``cast`` op (scalar: no vector conversion can saturate instead)."""
    cast = target.op("cast")
    head = "#include <stdint.h>\n" + ('extern "C" {\n' if language == "c++" else "")
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
    cpp = render.TARGET.op("cast")("x", dtype=torch.int32, src=torch.float32)
    c = C_TARGET.op("cast")("x", dtype=torch.int32, src=torch.float32)
    assert cpp == "static_cast<int32_t>(static_cast<int64_t>(x))"
    assert c == "((int32_t)(x))"


@pytest.mark.parametrize("dtype", list(CTYPES), ids=str)
def test_in_range_casts_agree_with_torch(built, dtype):
    eager = torch.tensor(VALUES[:3], dtype=torch.float32).to(dtype).tolist()
    assert tuple(eager) == IN_RANGE[dtype]
    for target in ("cpu_cpp", "c"):
        assert tuple(built[target][dtype](v) for v in VALUES[:3]) == IN_RANGE[dtype], target


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"),
    reason="out-of-range float -> int conversion is undefined; x86-64 values",
)
@pytest.mark.parametrize("dtype", list(CTYPES), ids=str)
def test_out_of_range_and_nan_casts_differ_between_the_tables(built, dtype):
    cpp = tuple(built["cpu_cpp"][dtype](v) for v in VALUES[3:])
    c = tuple(built["c"][dtype](v) for v in VALUES[3:])
    assert cpp == THROUGH_INT64[dtype]
    assert c == DIRECT[dtype]
    eager = tuple(torch.tensor(VALUES[3:], dtype=torch.float32).to(dtype).tolist())
    assert eager == DIRECT[dtype]  # eager torch on x86-64 matches the direct conversion
