"""What cpu_cpp builds its C++ with: flags, the prelude of every unit, the cache it keeps.

Building, caching and loading are :mod:`sdk.toolchain`'s (``language="c++"``); this module
holds only what is cpu_cpp's own.

Flags (:func:`default_flags`)
-----------------------------
``-O3 -shared -fPIC -fopenmp -march=native -std=c++17 -fno-math-errno -fno-trapping-math -fwrapv``

* ``-fno-math-errno``: math functions need not set ``errno``, so calls such as
  ``sqrtf`` become instructions and calls such as ``expf`` may be vectorized.
* ``-fno-trapping-math``: lets the vectorizer if-convert and speculate FP code.
* ``-fwrapv``: signed integer overflow wraps, as it does in torch.
* No ``-ffast-math``: it implies ``-ffinite-math-only`` (``isnan(x)`` folds to
  false, NaN/inf are not propagated) and ``-fassociative-math`` (reductions
  change results), which would break torch's semantics.

Vector math through glibc's libmvec
-----------------------------------
GCC vectorizes a loop calling ``expf`` only when ``expf`` is declared
``#pragma omp declare simd``; the vector body then calls libmvec's variants
(``_ZGVeN16v_expf``, ``_ZGVdN8v_expf``). glibc's ``<bits/math-vector.h>`` makes
those declarations only under ``__FAST_MATH__``, which GCC defines only when *all*
of ``-ffast-math`` is on: ``-ffast-math -fno-finite-math-only`` leaves it
undefined, and GCC 12 then emits scalar calls. So :data:`PRELUDE` declares the
variants itself (x86-64, glibc >= 2.35, where all of them exist). No extra flag
is needed: ``g++`` links ``-lm``, and glibc's ``libm.so`` is a linker script that
adds ``libmvec.so.1`` as needed. libmvec keeps NaN/inf semantics and is accurate
to a few ulp; a loop's scalar remainder uses the scalar function, so its last
bits may differ from the vector body's.

Measured (gcc 12.2, glibc 2.36, AMD EPYC Zen 4, 2 OpenMP threads),
``out[i] = x[i] * (1 / (1 + expf(-x[i]))) + tanhf(y[i])`` over 8M floats:
scalar calls 80 ms, libmvec 3.5 ms.

Cache
-----
:func:`compile_library` is :func:`sdk.toolchain.compile_library` with ``language="c++"``,
these flags, ``namespace="cpp"`` and the plugin version as ``key``: a library is keyed by
``stable_hash(source, compiler, compiler identity, flags, plugin_version)``, the identity
being ``--version`` plus what ``-march=native`` expands to, stored as
``<sha256(key)>.<sha256(library)[:16]>.so`` in ``cache_dir("cpp")`` with its full sha256 in
``DiskCache("cpp")``, and loaded only after its sha256, owner and mode check out.

Every unit starts with :data:`PRELUDE` and the renderer's helpers (``render.TARGET.prelude``),
which the plugin passes as ``prelude=``: the toolchain precompiles that text once (a
precompiled header in the same cache, :mod:`sdk._prelude`, at a process's fourth unit), and
each unit after is compiled against it. Measured (gcc 12): a unit of one kernel 0.32 s, against the precompiled prelude
0.11 s; parsing ``<cmath>``, ``<algorithm>`` and ``<vector>`` was the difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sdk import clike, toolchain

#: The language of cpu_cpp's sources, for :mod:`sdk.toolchain` (``$CXX``, else g++, c++,
#: clang++).
LANGUAGE = "c++"

_FLAGS = (
    "-O3",
    "-shared",
    "-fPIC",
    "-fopenmp",
    "-march=native",
    "-std=c++17",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fwrapv",
)

# libmvec's functions (float and double variants) of one and of two arguments.
_MVEC_UNARY = (
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cbrt", "cos", "cosh", "erf", "erfc",
    "exp", "exp2", "expm1", "log", "log10", "log1p", "log2", "sin", "sinh", "tan", "tanh",
)  # fmt: skip
_MVEC_BINARY = ("atan2", "hypot", "pow")


def _simd_declarations() -> str:
    lines = []
    for name in _MVEC_UNARY + _MVEC_BINARY:
        arity = 2 if name in _MVEC_BINARY else 1
        for ctype, symbol in (("float", name + "f"), ("double", name)):
            params = ", ".join([ctype] * arity)
            lines.append("#pragma omp declare simd notinbranch")
            lines.append(f"{ctype} {symbol}({params}) noexcept;")
    return "\n".join(lines)


#: The start of every generated kernel source. Helpers are ``static inline`` (no
#: exported symbols), so kernels declared ``extern "C"`` may use them freely.
PRELUDE = (
    """\
#include <cmath>
#include <cstdint>
#include <omp.h>

#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 35)
// Vector variants in glibc's libmvec; glibc declares them only under -ffast-math.
extern "C" {
"""
    + _simd_declarations()
    + """
}
#endif

"""
    + clike.HALF_HELPERS
)


def default_flags() -> tuple[str, ...]:
    """The compiler flags used when :func:`compile_library` gets none (see module doc)."""
    return _FLAGS


def _build(flags: tuple[str, ...] | None, plugin_version: str) -> dict:
    return {
        "language": LANGUAGE,
        "flags": default_flags() if flags is None else flags,
        "namespace": "cpp",
        "key": (plugin_version,),
    }


def compile_library(
    source: str,
    *,
    flags: tuple[str, ...] | None = None,
    plugin_version: str = "0",
    prelude: str = "",
) -> Path:
    """Compile ``source`` into a shared library, or reuse a verified cached one.

    Raises :class:`sdk.toolchain.CompileError` when the compiler fails or runs past
    ``SDK_COMPILE_TIMEOUT`` seconds (default 300).
    """
    return toolchain.compile_library(source, **_build(flags, plugin_version), prelude=prelude)


def compile_and_load(
    source: str,
    *,
    flags: tuple[str, ...] | None = None,
    plugin_version: str = "0",
    prelude: str = "",
) -> Any:
    """:func:`compile_library`, then the library loaded (built again where an ``sdk cache
    clear`` removed it in between: :func:`sdk.toolchain.compile_and_load`)."""
    return toolchain.compile_and_load(source, **_build(flags, plugin_version), prelude=prelude)
