"""Build C or C++ kernel sources into shared libraries with the system compiler, and load them.

For plugins whose kernels are C-like source built by a host compiler (``sdk.clike`` renders
such source from the IR). A library is kept in the per-user cache (:mod:`sdk.cache`), named by
the sha256 of its content, with that digest in a verified :class:`sdk.cache.DiskCache` entry;
it is loaded only after its digest, owner and mode check out, so a corrupt, truncated or
foreign file in the cache is a miss and is rebuilt, never loaded. Naming by content also means
``dlopen`` (which reuses a loaded object of the same path) never returns a stale library.

    lib = sdk.toolchain.load_library(sdk.toolchain.compile_library(source, language="c"))
    fn = sdk.toolchain.get_function(lib, "k_add", nargs=3)
    kernel = sdk.toolchain.launcher(fn, 3)     # kernel(a, b, out) passes their data_ptr()s

A library's cache key is ``stable_hash(source, compiler, compiler_identity(compiler, language),
flags, *key)``: the compiler's path, its ``--version`` and what ``-march=native`` means on this
host (hosts with different CPUs sharing a home directory never load each other's libraries),
the flags, and whatever else the caller passes as ``key`` (its plugin version). C++ sources
(``language="c++"``: ``$CXX``, else g++, c++, clang++) are built the same way; a plugin passes
its own ``flags`` (``FLAGS`` plus ``-std=c++17``, say) and ``namespace`` (its cache directory).

Processes that need the same library at once (DDP ranks, a job's workers) build it once: the
first takes a file lock beside its cache entry, the others wait for it and load what it built.

Every compiler run has a time limit, ``SDK_COMPILE_TIMEOUT`` seconds (default 300; 0: none).
A compiler still running then is killed with every process it started (it runs in a session
of its own, and the whole process group is killed), and :class:`CompileError` says so: the
kernels' plugin fails, and the compile falls back as it does for any compiler error.
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
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sdk import _config as config
from sdk.cache import DiskCache, make_room, read_regular, source_digest, stable_hash, write_atomic

#: Default flags: optimized, position independent, OpenMP, this host's vector units; no
#: -ffast-math (it folds isnan away and reassociates reductions: torch's semantics break).
FLAGS = ("-O3", "-shared", "-fPIC", "-fopenmp", "-march=native", "-fno-math-errno", "-fwrapv")
#: language -> (environment variable, compilers looked for on PATH, name in messages, source
#: suffix, the compiler a message suggests)
_COMPILERS = {
    "c": ("CC", ("cc", "gcc", "clang"), "C", ".c", "gcc"),
    "c++": ("CXX", ("g++", "c++", "clang++"), "C++", ".cpp", "g++"),
}
_HEX = re.compile(rb"[0-9a-f]{64}")


class CompileError(RuntimeError):
    """The compiler rejected a source, or ran past ``SDK_COMPILE_TIMEOUT``; the message has
    the command, its output and the path of the full source."""


def _run(cmd: list[str], shown: str) -> subprocess.CompletedProcess:
    """``cmd``'s exit status and output, within ``SDK_COMPILE_TIMEOUT``: past it, the
    compiler and every process it started (its own session and process group) are killed
    and :class:`CompileError` names the limit and the variable that raises it."""
    timeout = config.compile_timeout()
    proc = subprocess.Popen(  # the compiler $CC/$CXX names
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise CompileError(
            f"the {shown} compiler timed out after {timeout:g} s and was killed. Fix: raise "
            f"SDK_COMPILE_TIMEOUT (seconds, now {timeout:g}; 0: no limit) if the build is just "
            f"slow, else check the compiler.\ncommand: {shlex.join(cmd)}"
        ) from None
    except BaseException:  # KeyboardInterrupt, ...: no compiler left running
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (the compiler and its children), then reap it."""
    with contextlib.suppress(ProcessLookupError):  # (every process of it already gone)
        os.killpg(proc.pid, signal.SIGKILL)
    try:  # the pipes close once every process of the group is gone
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # a process that left the group still holds a pipe
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()


def find_compiler(language: str = "c") -> str:
    """``$CC`` (``$CXX`` for c++), else the first of the usual names on PATH."""
    var, names, shown, _, suggest = _COMPILERS[language]
    requested = config.variable(var)
    for name in [requested] if requested else names:
        path = shutil.which(name)
        if path:
            return path
    if requested:
        raise FileNotFoundError(
            f"${var} is {requested!r}, which is not an executable (on PATH)."
            f" Fix: set {var} to a {shown} compiler such as {suggest}, "
            "or unset it."
        )
    raise FileNotFoundError(
        f"no {shown} compiler found: none of {', '.join(names)} is on PATH. "
        f"Fix: install one (e.g. `apt install {suggest}`) or set {var} to "
        "a compiler's path."
    )


def compiler_identity(compiler: str, language: str = "c") -> str:
    """``--version`` plus what ``-march=native`` means on this host (for cache keys).

    Raises :class:`CompileError` when the compiler runs past ``SDK_COMPILE_TIMEOUT`` (once
    per process: a compiler that hung is not waited for again)."""
    identity = _identity(compiler, language)
    if isinstance(identity, CompileError):
        raise CompileError(*identity.args)
    return identity


@functools.cache
def _identity(compiler: str, language: str) -> str | CompileError:
    shown = _COMPILERS[language][2]
    try:
        version = _run([compiler, "--version"], shown).stdout
        native = _run(
            [compiler, "-march=native", "-v", "-E", "-x", language, os.devnull, "-o", os.devnull],
            shown,
        ).stderr
    except CompileError as exc:
        return exc
    return version + native


def cache_key(language: str, flags: Sequence[str], *packages: str) -> str | None:
    """What a plugin that builds here returns from ``sdk_cache_key``: the compiler
    (:func:`find_compiler`), its :func:`compiler_identity`, ``flags`` and the sources of
    ``packages`` (the plugin's own, ``__name__``: :func:`sdk.cache.source_digest`), hashed.
    None when there is no compiler (the plugin's programs stay out of the whole-graph cache).
    Computed once per process."""
    return _cache_key(language, tuple(flags), packages)


@functools.cache
def _cache_key(language: str, flags: tuple[str, ...], packages: tuple[str, ...]) -> str | None:
    try:
        compiler = find_compiler(language)
        identity = compiler_identity(compiler, language)
    except (FileNotFoundError, CompileError):  # no compiler, or one that hangs
        return None
    return stable_hash(compiler, identity, flags, source_digest(*packages))


def _trusted_digest(path: Path) -> str | None:
    """sha256 of a regular file owned by us and writable by nobody else, else None."""
    data = read_regular(path)  # never a FIFO's read that blocks, never through a link
    return None if data is None else hashlib.sha256(data).hexdigest()


def compile_library(
    source: str,
    *,
    language: str = "c",
    flags: Sequence[str] = FLAGS,
    namespace: str = "clike",
    key: Sequence[Any] = (),
) -> Path:
    """Compile ``source`` into a shared library in ``cache_dir(namespace)``, or reuse a
    verified one built from the same source, compiler, flags and ``key``.

    Raises :class:`CompileError` when the compiler fails, or runs past
    ``SDK_COMPILE_TIMEOUT`` seconds (it is killed then)."""
    compiler = find_compiler(language)
    flags = tuple(flags)
    digest_key = stable_hash(source, compiler, compiler_identity(compiler, language), flags, *key)
    cache = DiskCache(namespace)
    path = _verified(cache, digest_key)
    if path is not None:
        return path
    # one build per library at a time across processes (DDP ranks, test workers, a cold
    # start's processes): the others wait for it, then load what it built
    with _build_lock(cache.path_for(digest_key, ".lock")):
        path = _verified(cache, digest_key)
        if path is not None:
            return path
        return _build(cache, digest_key, source, compiler, language, flags)


def _build(
    cache: DiskCache,
    digest_key: str,
    source: str,
    compiler: str,
    language: str,
    flags: tuple[str, ...],
) -> Path:
    src = cache.path_for(digest_key, _COMPILERS[language][3])
    write_atomic(src, source.encode())  # kept: errors and debugging point at it
    # built in a private directory of its own: `sdk cache clear` (files of the namespace)
    # or another process cannot delete the source or the output under the compiler
    build = Path(tempfile.mkdtemp(dir=src.parent, prefix=".tmp-build-"))
    try:
        unit = build / src.name
        unit.write_bytes(source.encode())
        out = build / "lib.so"
        cmd = [compiler, str(unit), "-o", str(out), *flags, "-lm"]
        try:
            proc = _run(cmd, _COMPILERS[language][2])
        except CompileError as exc:
            raise CompileError(f"{exc}\nfull source: {src}") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-40:])
            raise CompileError(
                f"{_COMPILERS[language][2]} compilation failed "
                f"(exit status {proc.returncode})."
                f"\ncommand: {shlex.join(cmd)}\nfull source: {src}\n"
                f"compiler output (last lines):\n{tail}"
            )
        os.chmod(out, 0o700)  # the linker creates its output under the umask
        digest = hashlib.sha256(out.read_bytes()).hexdigest()
        path = cache.path_for(digest_key, f".{digest[:16]}.so")
        make_room(path)  # a directory or FIFO planted there is replaced, not fatal
        os.replace(out, path)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    cache.put(digest_key, digest.encode())
    return path


@contextlib.contextmanager
def _build_lock(path: Path) -> Any:
    """An exclusive ``flock`` on ``path`` while one process builds a library. Waits at most
    the compile time limit (a holder's compiler is killed by then, and the kernel drops the
    lock of a process that dies); where no lock can be had (no ``fcntl``, a directory or a
    FIFO at the path, a read-only cache), the build goes on without one, as it did before:
    two processes then build the same library, each renaming a whole file into place."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        yield
        return
    try:
        make_room(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        yield
        return
    try:
        timeout = config.compile_timeout()
        deadline = time.monotonic() + (timeout if timeout else float("inf"))
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break  # build anyway: a stuck holder must not stop this process
                time.sleep(0.05)
            except OSError:  # no locks on this file system (ENOLCK)
                break
        yield
    finally:
        os.close(fd)  # releases the lock


def _verified(cache: DiskCache, digest_key: str) -> Path | None:
    """The library built under ``digest_key``, if its bytes are still what was built."""
    recorded = cache.get(digest_key)
    if recorded is not None and _HEX.fullmatch(recorded):
        path = cache.path_for(digest_key, f".{recorded[:16].decode()}.so")
        if _trusted_digest(path) == recorded.decode():
            return path
    return None


def is_built(
    source: str,
    *,
    language: str = "c",
    flags: Sequence[str] = FLAGS,
    namespace: str = "clike",
    key: Sequence[Any] = (),
) -> bool:
    """Whether :func:`compile_library` would reuse a verified build (no compiler run)."""
    compiler = find_compiler(language)
    digest_key = stable_hash(
        source, compiler, compiler_identity(compiler, language), tuple(flags), *key
    )
    return _verified(DiskCache(namespace), digest_key) is not None


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
    lib: ctypes.CDLL, name: str, nargs: int, restype: Any = None, nsizes: int = 0
) -> Callable[..., Any]:
    """Symbol ``name`` of ``lib`` as a function of ``nargs`` pointers (ints such as
    ``tensor.data_ptr()``), then ``nsizes`` int64 sizes (``Kernel.size_args``), returning
    nothing or a ``restype`` (a ctypes type)."""
    fn = lib[name]  # a fresh object: argtypes set here do not leak to other users
    fn.argtypes = [ctypes.c_void_p] * nargs + [ctypes.c_int64] * nsizes
    fn.restype = restype
    return fn


def launcher(
    fn: Callable[..., Any],
    nargs: int | None = None,
    nsizes: int = 0,
    error: Callable[[], BaseException] | None = None,
) -> Callable[..., None]:
    """A :data:`sdk.KernelFn`: ``fn`` called with the tensors' ``data_ptr()`` s.

    With ``nargs``, the launcher takes exactly ``nargs`` tensors, then ``nsizes`` ints (the
    kernel's size arguments), as parameters of its own (generated code: no list built per
    call). ``error``: ``fn`` returns nonzero when it failed, and the launcher then raises
    ``error()``."""
    if nargs is None:
        if nsizes or error:
            raise ValueError("launcher: nsizes and error need nargs")

        def launch(*tensors: Any) -> None:
            fn(*[t.data_ptr() for t in tensors])

        return launch
    params = [f"t{i}" for i in range(nargs)] + [f"s{i}" for i in range(nsizes)]
    call = ", ".join([f"t{i}.data_ptr()" for i in range(nargs)] + params[nargs:])
    name = "launch" if error is None else "checked_launch"
    body = f"fn({call})" if error is None else f"if fn({call}):\n        raise error()"
    env = {"fn": fn, "error": error}
    exec(f"def {name}({', '.join(params)}):\n    {body}", env)  # noqa: S102 - our own code
    launch = env[name]
    address = _address(fn)
    if address is not None:  # the native runner calls it directly
        from sdk.plugin import NativeEntry

        launch.native = NativeEntry(address, nargs, nsizes, error)
    return launch


def _address(fn: Any) -> int | None:
    """The C address of a ctypes function, or None for anything else."""
    try:
        return ctypes.cast(fn, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
