"""Compile C++ kernel sources into shared libraries and load them (cpu_cpp plugin).

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
The key is ``stable_hash(source, compiler, compiler identity, flags,
plugin_version)``; the identity is ``--version`` plus what ``-march=native``
expands to, so hosts with different CPUs sharing a home directory do not load
each other's libraries. The library is stored as
``<sha256(key)>.<sha256(library)[:16]>.so`` in ``cache_dir("cpp")``, its full
sha256 in ``DiskCache("cpp")``. A library is loaded only after its sha256,
owner and mode check out; anything else is a miss and is recompiled. Naming by
content means two processes racing on one key never replace a library another
one has verified, and a recompiled library with new content never collides with
a loaded one of the same name (``dlopen`` reuses loaded objects by name).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from sdk.cache import DiskCache, stable_hash, write_atomic

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

static inline uint32_t sdk_f2u(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float sdk_u2f(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }

static inline float sdk_bf16_to_float(uint16_t h) { return sdk_u2f((uint32_t)h << 16); }

// Round to nearest even; NaN stays a quiet NaN with its sign.
static inline uint16_t sdk_float_to_bf16(float f) {
  uint32_t u = sdk_f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float sdk_fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, a = h & 0x7fffu;
  uint32_t bits = a >= 0x7c00u ? 0x7f800000u | (a << 13)   // inf, NaN
                : a >= 0x0400u ? (a << 13) + 0x38000000u   // normal: rebias 15 -> 127
                : sdk_f2u((float)a * 0x1p-24f);            // subnormal, zero: exact
  return sdk_u2f(sign | bits);
}

// Round to nearest even; NaN stays a quiet NaN with its sign.
static inline uint16_t sdk_float_to_fp16(float f) {
  uint32_t u = sdk_f2u(f), a = u & 0x7fffffffu;
  uint32_t bits = a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu)                // NaN
                : a >= 0x477ff000u ? 0x7c00u                                      // to inf
                : a >= 0x38800000u ? (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13
                : sdk_f2u(sdk_u2f(a) + 0.5f) - 0x3f000000u;  // subnormal: the FPU rounds
  return (uint16_t)(((u >> 16) & 0x8000u) | bits);
}
"""
)

_HEX_DIGEST = re.compile(rb"[0-9a-f]{64}")


class CompileError(RuntimeError):
    """The C++ compiler rejected a source; the message has the command, its output
    and the path of the full source."""


def find_compiler() -> str:
    """Path of the C++ compiler: ``$CXX``, else the first of g++, c++, clang++ on PATH."""
    requested = os.environ.get("CXX")
    for name in [requested] if requested else ["g++", "c++", "clang++"]:
        path = shutil.which(name)
        if path:
            return path
    if requested:
        raise FileNotFoundError(
            f"$CXX is {requested!r}, which is not an executable (on PATH). "
            "Fix: set CXX to a C++ compiler such as g++, or unset it."
        )
    raise FileNotFoundError(
        "no C++ compiler found: none of g++, c++, clang++ is on PATH. "
        "Fix: install one (e.g. `apt install g++`) or set CXX to a compiler's path."
    )


def default_flags() -> tuple[str, ...]:
    """The compiler flags used when :func:`compile_library` gets none (see module doc)."""
    return _FLAGS


@functools.cache
def _compiler_identity(compiler: str) -> str:
    """``--version`` output plus what ``-march=native`` expands to on this host."""
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=False
    ).stdout
    native = subprocess.run(
        [compiler, "-march=native", "-v", "-E", "-x", "c++", os.devnull, "-o", os.devnull],
        capture_output=True,
        text=True,
        check=False,
    ).stderr
    return version + native


def _trusted_digest(path: str | os.PathLike[str]) -> str | None:
    """sha256 hex of a regular file owned by us and writable by nobody else, else None."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return None
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _library_path(cache: DiskCache, key: str, digest: str) -> Path:
    return cache.path_for(key, f".{digest[:16]}.so")


def _build(compiler: str, source: str, flags: tuple[str, ...], cache: DiskCache, key: str) -> str:
    """Compile ``source`` into the cache; return the library's sha256 hex."""
    src = cache.path_for(key, ".cpp")  # kept: error messages and debugging point at it
    write_atomic(src, source.encode())
    fd, tmp = tempfile.mkstemp(dir=src.parent, prefix=".tmp-", suffix=".so")
    os.close(fd)
    cmd = [compiler, str(src), "-o", tmp, *flags]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-40:])
            raise CompileError(
                f"C++ compilation failed (exit status {proc.returncode}).\n"
                f"command: {shlex.join(cmd)}\n"
                f"full source: {src}\n"
                f"compiler output (last lines):\n{tail}"
            )
        os.chmod(tmp, 0o700)  # the linker creates its output under the umask
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        os.replace(tmp, _library_path(cache, key, digest))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return digest


def compile_library(
    source: str, *, flags: tuple[str, ...] | None = None, plugin_version: str = "0"
) -> Path:
    """Compile ``source`` into a shared library, or reuse a verified cached one.

    Raises :class:`CompileError` when the compiler fails.
    """
    compiler = find_compiler()
    flags = default_flags() if flags is None else tuple(flags)
    key = stable_hash(source, compiler, _compiler_identity(compiler), flags, plugin_version)
    cache = DiskCache("cpp")
    recorded = cache.get(key)
    if recorded is not None and _HEX_DIGEST.fullmatch(recorded):
        digest = recorded.decode()
        path = _library_path(cache, key, digest)
        if _trusted_digest(path) == digest:
            return path
    digest = _build(compiler, source, flags, cache, key)
    cache.put(key, digest.encode())
    return _library_path(cache, key, digest)


def load_library(path: str | os.PathLike[str]) -> ctypes.CDLL:
    """``dlopen`` a library made by :func:`compile_library`."""
    try:
        return ctypes.CDLL(os.fspath(path))
    except OSError as e:
        raise OSError(
            f"could not load {path}: {e}. If the cache directory is on a filesystem "
            "mounted noexec, set SDK_CACHE_DIR to a private directory on another one."
        ) from e


def get_function(
    lib: ctypes.CDLL, name: str, nargs: int, restype: type | None = None, nsizes: int = 0
) -> Callable[..., None]:
    """The kernel ``name`` of ``lib``, taking ``nargs`` pointers (ints such as
    ``tensor.data_ptr()``) then ``nsizes`` int64 sizes, and returning nothing, or a
    ``restype`` (a ctypes type)."""
    fn = lib[name]  # a fresh function object: setting argtypes does not leak to other users
    fn.argtypes = [ctypes.c_void_p] * nargs + [ctypes.c_int64] * nsizes
    fn.restype = restype
    return fn


def compile_and_load(
    source: str,
    entry_names: list[str],
    nargs: list[int],
    *,
    flags: tuple[str, ...] | None = None,
    plugin_version: str = "0",
) -> list[Callable[..., None]]:
    """Compile ``source`` (see :func:`compile_library`) and return its kernels, in order."""
    if len(entry_names) != len(nargs):
        raise ValueError(f"{len(entry_names)} entry names but {len(nargs)} argument counts")
    lib = load_library(compile_library(source, flags=flags, plugin_version=plugin_version))
    return [get_function(lib, name, n) for name, n in zip(entry_names, nargs)]
