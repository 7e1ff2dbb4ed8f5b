"""Build C or C++ kernel sources into shared libraries with the system compiler, and load them.

For plugins whose kernels are C-like source built by a host compiler (``sdk.clike`` renders
such source from the IR). A library is kept in the per-user cache (:mod:`sdk.cache`), named by
the sha256 of its content, with that digest in a verified :class:`sdk.cache.DiskCache` entry;
it is loaded only after its digest, owner and mode check out, so a corrupt, truncated or
foreign file in the cache is a miss and is rebuilt, never loaded. Naming by content also means
``dlopen`` (which reuses a loaded object of the same path) never returns a stale library.

    lib = sdk.toolchain.compile_and_load(source, language="c")   # compile_library, load_library
    fn = sdk.toolchain.get_function(lib, "k_add", nargs=3)
    kernel = sdk.toolchain.launcher(fn, 3)     # kernel(a, b, out) passes their data_ptr()s

A library's cache key is ``stable_hash(source, compiler, compiler_identity(compiler, language),
flags, *key)``: the compiler's path, its ``--version`` and what ``-march=native`` means on this
host (hosts with different CPUs sharing a home directory never load each other's libraries),
the flags, and whatever else the caller passes as ``key`` (its plugin version). C++ sources
(``language="c++"``: ``$CXX``, else g++, c++, clang++) are built the same way; a plugin passes
its own ``flags`` (``FLAGS`` plus ``-std=c++17``, say) and ``namespace`` (its cache directory).

Processes that need the same library at once (DDP ranks, a job's workers) build it once: the
first takes a file lock beside its cache entry (``<entry>.lock``, which records who holds it:
pid, host, since when, which source), the others wait for it and load what it built. A waiter
says once on stderr which process holds the lock after :data:`LOCK_NOTICE_S` seconds, and
gives up with a :class:`CompileError` naming that process after ``SDK_COMPILE_TIMEOUT``
seconds, or the default 300 when that is 0: 0 lifts the limit on a compiler run, never the
wait on another process, which may be stopped or hung.

A machine without a compiler still loads what was built: each build (or verified reuse)
also records, under a key made without the compiler (the source, flags and ``key``, and this
host's CPU: :func:`_host_cpu`), which library it was; :func:`compile_library` and
:func:`is_built` fall back on that record where :func:`find_compiler` finds none, and
:func:`cache_key` on the key it last computed here. Without either, the compiler's absence is
the error (``FileNotFoundError``, naming the fix). ``torch.compiler.save_cache_artifacts()``
carries those libraries and keys beside the programs (artifact type ``sdk_libraries``), so
that ``load_cache_artifacts()`` lets a machine without a compiler, whose CPU is the same, run
them too.

Every compiler run has a time limit, ``SDK_COMPILE_TIMEOUT`` seconds (default 300; 0: none).
A compiler still running then is killed with every process it started (it runs in a session
of its own, and the whole process group is killed), and :class:`CompileError` says so: the
kernels' plugin fails, and the compile falls back as it does for any compiler error.

A compiler also dies with the process that runs it, even one killed by SIGKILL (which a
session of its own would otherwise survive): on Linux, the compiler asks the kernel, before
it starts (``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in a ``preexec_fn``), for a SIGKILL when its
parent goes (through util-linux's ``setpriv --pdeathsig KILL``, else a ``preexec_fn``). Caveats: the signal comes when the parent *thread* that started it ends (the
compile runs, and waits for the compiler, in the calling thread: fine); it reaches the
compiler itself, not the processes it started (``cc1plus``, ``as``, ``ld``: they finish
their step, and nothing starts the next); without ``setpriv``, the ``preexec_fn`` makes
``subprocess`` fork instead of vfork (tens of milliseconds per compiler run in a process
that has torch loaded). Where ``prctl`` is missing (not Linux), the compiler runs without
it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sdk import _config as config
from sdk import _prelude
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
    setpriv = _setpriv()
    proc = subprocess.Popen(  # the compiler $CC/$CXX names
        [setpriv, "--pdeathsig", "KILL", "--", *cmd] if setpriv else cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=None if setpriv else _dies_with_parent(),  # (after the new session)
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


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@functools.cache
def _setpriv() -> str | None:
    """util-linux's ``setpriv`` (every Linux distribution's base system has it), which asks
    for the death signal and then runs the compiler: ``subprocess`` keeps its fast vfork
    path, where a ``preexec_fn`` forks the whole process (60-70 ms a compiler run with torch
    loaded). None where it is missing: the ``preexec_fn`` asks instead."""
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("setpriv")


@functools.cache
def _prctl() -> Any | None:
    """libc's ``prctl``, ready to call (looked up here, not in a forked child), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    prctl.restype = ctypes.c_int
    return prctl


def _dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` after which the child gets SIGKILL when this thread ends (see the
    module's docstring), or None where there is no ``prctl``."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:  # in the forked child, before exec: nothing that may block
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the kernel was asked
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


_ERROR_LINE = re.compile(r"\berror\b|undefined reference", re.IGNORECASE)


def _first_error(output: str) -> str:
    """The compiler's own first error line in ``output`` (``g++: fatal error: cannot execute
    'as'``, ``k.c:3:5: error: ...``), else its first line that is not blank; at most 300
    characters. The first line of a :class:`CompileError`'s message quotes it, so that a
    warning or report that shows one line shows the cause."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    line = next((ln for ln in lines if _ERROR_LINE.search(ln)), lines[0] if lines else "")
    return (line[:297] + "...") if len(line) > 300 else line or "(no output)"


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
    Where there is no compiler, the key last computed on this host for the same flags and
    sources (its cached programs still run); None where there is none either, or the
    compiler hangs (the plugin's programs stay out of the whole-graph cache). Computed once
    per process."""
    return _cache_key(language, tuple(flags), packages)


#: the namespace of the keys :func:`cache_key` computed, by what they are without a compiler
_KEYS = "toolchain"


@functools.cache
def _cache_key(language: str, flags: tuple[str, ...], packages: tuple[str, ...]) -> str | None:
    sources = source_digest(*packages)
    known = stable_hash("cache-key", language, flags, sources, _host_cpu())
    try:
        compiler = find_compiler(language)
    except FileNotFoundError:  # no compiler: the key of the last one that had these sources
        recorded = _cached(DiskCache(_KEYS), known)
        if recorded is None:
            return None
        key = recorded.decode()
    else:
        try:
            identity = compiler_identity(compiler, language)
        except CompileError:  # one that hangs
            return None
        key = stable_hash(compiler, identity, flags, sources)
        _record(DiskCache(_KEYS), known, key)
    _carry(f"{_KEYS}:{known}", key.encode())
    return key


@functools.cache
def _host_cpu() -> str:
    """This host's CPU as far as a library built with ``-march=native`` depends on it, read
    without a compiler: the machine, and on Linux the first processor's model and feature
    flags (``/proc/cpuinfo``). A library built on one host is never loaded without a
    compiler on a host whose CPU differs (a home directory shared between machines)."""
    import platform

    fields = ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part")
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in fields and name not in found:
                    found[name] = " ".join(sorted(value.split()))  # (flags in any order)
    except OSError:  # not Linux
        pass
    if not found:
        found["processor"] = platform.processor()
    return stable_hash(platform.machine(), tuple(sorted(found.items())))


def _cached(cache: DiskCache, key: str) -> bytes | None:
    """A 64-hex-digit record under ``key`` (see :func:`_record`), or None."""
    try:
        recorded = cache.get(key)
    except OSError:  # (a cache directory refused: nothing recorded)
        return None
    return recorded if recorded is not None and _HEX.fullmatch(recorded) else None


def _record(cache: DiskCache, key: str, value: str) -> None:
    """Record ``value`` (64 hex digits) under ``key``, unless it is there already; a cache
    that cannot be written is not an error (the record only serves a later process without
    a compiler)."""
    if _cached(cache, key) == value.encode():
        return
    with contextlib.suppress(OSError):
        cache.put(key, value.encode())


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
    cache_root: str | os.PathLike[str] | None = None,
    prelude: str = "",
) -> Path:
    """Compile ``source`` into a shared library in ``cache_dir(namespace)``, or reuse a
    verified one built from the same source, compiler, flags and ``key``. ``cache_root``:
    a cache root of the caller's own instead of the SDK's (:func:`sdk.cache.cache_dir`'s
    ``root``; the native runner's ``$SDK_RUNNER_DIR``). ``prelude``: the text ``source``
    starts with that every unit of the caller shares (its includes and helpers), parsed once
    (a precompiled header, :mod:`sdk._prelude`) rather than by each compile; the library is
    the same.

    Without a compiler, the library last built (or reused) on this host from the same
    source, flags and ``key``, where it is still there and verified.

    Raises :class:`CompileError` when the compiler fails, or runs past
    ``SDK_COMPILE_TIMEOUT`` seconds (it is killed then), or another process builds the same
    library for longer than that (see the module's docstring); ``FileNotFoundError`` (naming
    the fix) when there is no compiler and no such library."""
    flags = tuple(flags)
    cache = DiskCache(namespace, root=cache_root)
    known = _known(source, language, flags, key)
    try:
        compiler = find_compiler(language)
    except FileNotFoundError:
        recorded = _cached(cache, known)
        path = None if recorded is None else _verified(cache, recorded.decode())
        if path is None:
            raise
        digest_key = recorded.decode()
    else:
        digest_key = stable_hash(
            source, compiler, compiler_identity(compiler, language), flags, *key
        )
        path = _verified(cache, digest_key)
        if path is None:
            # one build per library at a time across processes (DDP ranks, test workers, a
            # cold start's processes): the others wait for it, then load what it built
            src = cache.path_for(digest_key, _COMPILERS[language][3])
            with _build_lock(cache.path_for(digest_key, ".lock"), f"{src} with {compiler}"):
                path = _verified(cache, digest_key)
                if path is None:
                    path = _build(cache, digest_key, source, compiler, language, flags, prelude)
        _record(cache, known, digest_key)
    data = read_regular(path)
    if data is not None:
        _carry(f"{namespace}:{known}", digest_key.encode() + data)
    return path


def _known(source: str, language: str, flags: tuple[str, ...], key: Sequence[Any]) -> str:
    """The key of a library's record made without a compiler: its source, language, flags,
    the caller's ``key`` and this host's CPU (:func:`_host_cpu`)."""
    return stable_hash("built", source, language, flags, tuple(key), _host_cpu())


def _built_before(cache: DiskCache, known: str) -> Path | None:
    """The verified library recorded under ``known`` (:func:`_known`), or None."""
    digest_key = _cached(cache, known)
    return None if digest_key is None else _verified(cache, digest_key.decode())


#: the artifact type of libraries and keys in torch's MegaCache
_ARTIFACT = "sdk_libraries"


def _carry(key: str, content: bytes) -> None:
    """Record a library (``namespace:known``, its digest key then its bytes) or a plugin's
    cache key (``toolchain:known``) for the next ``save_cache_artifacts()``."""
    from sdk._seams import record_cache_artifact

    record_cache_artifact(_ARTIFACT, key, content)


def _populate(key: str, content: bytes) -> None:
    """One ``sdk_libraries`` entry of a blob ``load_cache_artifacts()`` reads (see
    :func:`_carry`), into this user's cache: a library under its digest key (verified as any
    other, its record made here), and what it was built from (:func:`_known`, which holds the
    CPU it was built for) or the cache key, for a process without a compiler. An entry that
    is not well-formed is ignored."""
    namespace, _, known = key.partition(":")
    if not _HEX.fullmatch(known.encode()) or not re.fullmatch(r"[a-z0-9_-]+", namespace):
        return
    if namespace == _KEYS:
        if _HEX.fullmatch(content):
            _record(DiskCache(_KEYS), known, content.decode())
        return
    digest_key, data = content[:64], content[64:]
    if not _HEX.fullmatch(digest_key) or not data:
        return
    cache = DiskCache(namespace)
    digest = hashlib.sha256(data).hexdigest()
    path = cache.path_for(digest_key.decode(), f".{digest[:16]}.so")
    if _trusted_digest(path) != digest:
        write_atomic(path, data)
        os.chmod(path, 0o700)  # (as a library built here)
    cache.put(digest_key.decode(), digest.encode())
    _record(cache, known, digest_key.decode())


def _build(
    cache: DiskCache,
    digest_key: str,
    source: str,
    compiler: str,
    language: str,
    flags: tuple[str, ...],
    prelude: str = "",
) -> Path:
    src = cache.path_for(digest_key, _COMPILERS[language][3])
    write_atomic(src, source.encode())  # kept: errors and debugging point at it
    # built in a private directory of its own: `sdk cache clear` (files of the namespace)
    # or another process cannot delete the source or the output under the compiler
    build = Path(tempfile.mkdtemp(dir=src.parent, prefix=".tmp-build-"))
    try:
        unit = build / src.name
        head = None
        if prelude and source.startswith(prelude):
            shown = _COMPILERS[language][2]
            identity = compiler_identity(compiler, language)
            runs = _prelude.Compiler(
                compiler, identity, language, flags, run=lambda cmd: _run(cmd, shown)
            )
            head = _prelude.header(cache, prelude, runs, lock=_build_lock, into=build)
        if head is None:
            unit.write_bytes(source.encode())
            cmd = [compiler, str(unit)]
        else:
            unit.write_bytes(_prelude.remainder(source, prelude, src).encode())
            cmd = [compiler, "-include", str(head), str(unit)]
        out = build / "lib.so"
        cmd += ["-o", str(out), *flags, "-lm"]
        try:
            proc = _run(cmd, _COMPILERS[language][2])
        except CompileError as exc:
            raise CompileError(f"{exc}\nfull source: {src}") from None
        if proc.returncode != 0:
            output = proc.stderr or proc.stdout
            tail = "\n".join(output.splitlines()[-40:])
            raise CompileError(
                f"{_COMPILERS[language][2]} compilation failed "
                f"(exit status {proc.returncode}): {_first_error(output)}"
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
def _build_lock(path: Path, building: str) -> Any:
    """An exclusive ``flock`` on ``path`` while one process builds a library (``building``,
    recorded in the file for waiters to name). Waits at most :func:`config.lock_wait` (a
    holder's compiler is killed by then, and the kernel drops the lock of a process that
    dies), saying who holds it after :data:`LOCK_NOTICE_S`, then raises
    :class:`CompileError`. Where no lock can be had (no ``fcntl``, a directory or a FIFO at
    the path, a read-only cache), the build goes on without one, as it did before: two
    processes then build the same library, each renaming a whole file into place."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        yield
        return
    taken = _take_lock(fcntl, path)
    if taken is None:
        yield
        return
    fd, locked = taken
    try:
        if locked:
            _write_holder(fd, building)
        yield
    finally:
        if locked:
            with contextlib.suppress(OSError):  # a waiter reads no stale holder
                os.ftruncate(fd, 0)
        os.close(fd)  # releases the lock


def _take_lock(fcntl: Any, path: Path) -> tuple[int, bool] | None:
    """The lock file's descriptor, and whether it is locked (False: the file system has no
    locks); None where no lock file can be opened. A lock file that ``cache clear`` removed
    between this process's open and its lock (it removes only those no one holds:
    :func:`sdk._diskcache.remove_lock`) is opened again, so that every holder's file is
    the one at the path."""
    start = time.monotonic()
    while True:
        try:
            make_room(path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            locked = _wait_for_lock(fcntl, fd, path, start)
        except BaseException:
            os.close(fd)
            raise
        if not locked or _still_at(fd, path):
            return fd, locked
        os.close(fd)


def _still_at(fd: int, path: Path) -> bool:
    """Whether ``fd`` is the file at ``path`` still (not one removed from under it)."""
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


#: seconds a process waits for another's build lock before it says (once) who holds it
LOCK_NOTICE_S = 5.0


def _wait_for_lock(fcntl: Any, fd: int, path: Path, start: float) -> bool:
    """Take the lock on ``fd``: True, or False where the file system has no locks; a
    :class:`CompileError` naming the holder :func:`config.lock_wait` seconds after
    ``start`` (``time.monotonic()``)."""
    limit = config.lock_wait()
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            waited = time.monotonic() - start
            if waited >= limit:
                raise CompileError(_gave_up(_holder(fd), path, waited, limit)) from None
            if not told and waited >= LOCK_NOTICE_S:
                told = True
                print(
                    f"sdk: waiting for {_holder(fd)[0]} to finish building the same library "
                    f"(lock {path}); giving up after {limit:g} s (SDK_COMPILE_TIMEOUT)...",
                    file=sys.stderr,
                    flush=True,
                )
            time.sleep(0.05)
        except OSError:  # no locks on this file system (ENOLCK)
            return False


def _write_holder(fd: int, building: str) -> None:
    """Record in the lock file who holds it: pid, host, since when, what it builds."""
    record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    record["building"] = building
    with contextlib.suppress(OSError):  # (a full disk: waiters just cannot name us)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)


def _holder(fd: int) -> tuple[str, str]:
    """Who holds the lock of ``fd``, as its holder recorded it: ("process PID on HOST",
    the pid), or a phrase and "" where nothing readable is recorded."""
    try:
        record = json.loads(os.pread(fd, 4096, 0))
        pid, host = int(record["pid"]), str(record["host"])[:100]
        since, building = float(record["since"]), str(record["building"])[:500]
    except (OSError, ValueError, TypeError, KeyError):  # not written yet, or not ours
        return "another process (it has not recorded which)", ""
    started = time.strftime("%H:%M:%S", time.localtime(since))
    ago = max(0.0, time.time() - since)
    who = f"process {pid} on {host} (building {building} since {started}, {ago:.0f} s ago)"
    return who, str(pid)


def _gave_up(holder: tuple[str, str], path: Path, waited: float, limit: float) -> str:
    who, pid = holder
    end = f"end it (`kill {pid}`)" if pid else "end it"
    set_to = config.variable("SDK_COMPILE_TIMEOUT") or "unset"
    return (
        f"gave up waiting for another build of this library after {waited:.0f} s: {who} "
        f"holds its lock {path}. Fix: if that process is stuck or stopped, {end} and compile "
        f"again; if its build is just slow, raise SDK_COMPILE_TIMEOUT (now {set_to}; a wait "
        f"for a lock lasts {limit:g} s, {config.COMPILE_TIMEOUT:g} when it is 0)."
    )


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
    cache_root: str | os.PathLike[str] | None = None,
) -> bool:
    """Whether :func:`compile_library` would reuse a verified build (no compiler run)."""
    flags = tuple(flags)
    cache = DiskCache(namespace, root=cache_root)
    try:
        compiler = find_compiler(language)
    except FileNotFoundError:
        known = _known(source, language, flags, key)
        return _built_before(cache, known) is not None
    digest_key = stable_hash(source, compiler, compiler_identity(compiler, language), flags, *key)
    return _verified(cache, digest_key) is not None


T = TypeVar("T")

#: builds of one library :func:`compile_and_load` tries where the library keeps vanishing
#: before it is loaded
LOAD_TRIES = 3


def compile_and_load(
    source: str,
    *,
    loader: Callable[[Path], T] | None = None,
    **build: Any,
) -> T:
    """:func:`compile_library` with ``build``, then load what it built: with ``loader``
    (:func:`load_library` when None; the native runner passes Python's extension loader).
    Where the library is gone between the two (an ``sdk cache clear`` in another process
    removed it), it is built again, up to :data:`LOAD_TRIES` builds; the error of a load
    whose library is still there (a cache on a file system mounted noexec) is raised at once.
    ``dlopen`` maps the file: once loaded, removing it changes nothing."""
    load = loader if loader is not None else load_library
    tries = 1
    while True:
        path = compile_library(source, **build)
        try:
            return load(path)  # type: ignore[return-value]
        except (OSError, ImportError):
            if tries >= LOAD_TRIES or os.path.lexists(path):
                raise
        tries += 1


def load_library(path: str | os.PathLike[str]) -> ctypes.CDLL:
    """``dlopen`` a library made by :func:`compile_library` (:func:`compile_and_load` does
    both, and builds again where the library went in between)."""
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
