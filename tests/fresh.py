"""Fresh processes without their imports: ``python -c CODE``, ``python SCRIPT`` and
``python -m MODULE`` as children of a fork server that imported torch, Dynamo and the sdk once.

A test that starts a Python process to see what a new process does (a cold cache, a warm
start, a refused directory, a kill mid-compile) paid about 4 CPU-seconds of imports before
its first line; CI's two cores ran about 140 of them. Here the standard library's
``multiprocessing`` fork server imports torch, ``torch._dynamo`` and ``sdk`` once per pytest
worker, and each run is a child forked from it: a new process (its own pid, memory,
environment, working directory, file descriptors 1 and 2, exit status, ``kill -9``) that has
compiled nothing, loaded no plugin and read no SDK variable, since the server did none of
that. What it shares with the server is what an import does.

So a run goes through the server only where that difference cannot show (:func:`_forkable`):

* the child's environment equals the server's but for variables read where they are used,
  after the imports (:data:`READ_EARLY` names those read at startup or import: ``TORCH_LOGS``,
  ``TORCHDYNAMO_*``, ``OMP_NUM_THREADS``, ...; a child that sets one otherwise runs in a real
  process); ``PYTHONPATH`` goes on ``sys.path`` as the interpreter puts it;
* no stdin;
* ``SDK_TESTS_REAL_PROCESSES=1`` sends every run to a real process (to compare).

Children of one server share its hash seed (``PYTHONHASHSEED``): a test that two processes
give the same bits keeps real processes, whose seeds differ. A child ends without the
interpreter's finalization (no module teardown, no last collection, no leak report of a
binding at exit): a test of what a process prints at exit keeps a real one too.

A test of what an import does (the CLI's startup, the first lookup before ``import sdk``, a
missing compiler found at import) keeps :mod:`subprocess`. As a process does at exit, a
child runs its ``atexit`` handlers, flushes its streams and ends with the status that
``sys.exit``, an uncaught exception (1, its traceback on stderr) or a signal gives it.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

#: what the fork server imports once (``torch._dynamo``: what ``torch.compile`` imports at its
#: first call, 2 to 3 s of the 4)
PRELOAD = ["torch", "torch._dynamo", "sdk"]
#: ... and, where torch is built without CUDA and ROCm (the CPU wheels CI runs), what a child's
#: first compile imported: the sdk's compile pipeline, and through torch's decompositions
#: Inductor's lowering, which registers its code generators; Dynamo's repro and DTensor
#: helpers. Sampled over the CPU suite, imports were about half of the children's time before
#: these; four fork-heavy test files took 94 s against 114. None loads a plugin or the native
#: runner, or reads an SDK variable. Not on a GPU machine: there one of them starts CUDA at
#: import (H200, torch 2.11: each child's first CUDA call then failed, "Cannot re-initialize
#: CUDA in forked subprocess"; ``test_fresh`` checks that a child starts CUDA itself).
FIRST_COMPILE = [
    "sdk.core.pipeline",
    "torch._inductor.lowering",
    "torch._inductor.debug",
    "torch._dynamo.repro.after_dynamo",
    "torch.distributed.tensor.experimental",
]


def _preload() -> list[str]:
    import torch

    gpu_built = torch.version.cuda is not None or torch.version.hip is not None
    return PRELOAD if gpu_built else PRELOAD + FIRST_COMPILE


#: variables that the interpreter or a module the server imported reads at startup or import
#: (prefixes): a child whose value differs runs in a real process. Any other variable (the
#: SDK's own, a test's own, ``CXX``, ``HOME``) is read where it is used, after the fork.
READ_EARLY = (
    "PYTHON",  # but PYTHONPATH, which the child puts on sys.path as the interpreter would
    "TORCH",  # but the two cache directories below, read at each use
    "PYTORCH",
    "TRITON",  # but TRITON_CACHE_DIR
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS",
    "NPY_",
    "NUMPY",
    "SYMPY",
    "CUDA",
    "NCCL",
    "LD_",
    "MALLOC",
    "GLIBC",
    "LANG",
    "LC_",
    "TZ",
)
#: ... but these, read at each use. Inductor's first Triton compile in a process sets the
#: last two for its compile workers (the ptxas and libdevice it ships): a fork server started
#: before it had them unset, and every later child ran in a real process (a GPU suite's
#: ``test_a_child_starts_cuda_on_its_own`` after a worker's Inductor compile).
READ_LATE = {
    "PYTHONPATH",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "TRITON_PTXAS_PATH",
    "TRITON_LIBDEVICE_PATH",
}

#: the server's environment: the worker's when it started the server, with one OpenMP thread
#: (what the tests' children ask for; libgomp reads it when torch loads it)
SERVER_ENV_SET = {"OMP_NUM_THREADS": "1"}

_lock = threading.Lock()
_server: dict[str, Any] = {}


def _context() -> tuple[Any, dict[str, str]]:
    """The fork server's context and the environment it started with (started here, once)."""
    with _lock:
        if not _server:
            from multiprocessing import forkserver

            from sdk._config import overridden

            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_preload())
            with overridden(**SERVER_ENV_SET):
                forkserver.ensure_running()
                _server["env"] = dict(os.environ)
            _server["ctx"] = ctx
        return _server["ctx"], _server["env"]


def one_thread(**values: str) -> dict[str, str]:
    """This process's environment now, with one OpenMP thread (as the server has) and
    ``values``: for a child that would otherwise inherit the environment, and so fork."""
    return {**os.environ, **SERVER_ENV_SET, **values}


def _late(name: str) -> bool:
    return name in READ_LATE or not name.startswith(READ_EARLY)


def _forkable(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    if os.environ.get("SDK_TESTS_REAL_PROCESSES") == "1" or sys.platform != "linux":
        return False
    if len(argv) < 2 or argv[0] != sys.executable or (argv[1] in ("-m", "-c") and len(argv) < 3):
        return False
    if argv[1].startswith("-") and argv[1] not in ("-m", "-c"):
        return False
    return not early_differences(env)


def early_differences(env: Mapping[str, str]) -> list[str]:
    """The variables read early whose value in ``env`` is not the server's: what sends a
    run with ``env`` to a real process."""
    _, server_env = _context()
    differ = {k for k in env.keys() | server_env.keys() if env.get(k) != server_env.get(k)}
    return sorted(k for k in differ if not _late(k))


def _on_path(first: str, env: Mapping[str, str]) -> None:
    """``sys.path`` as the interpreter starts it: ``first`` (the script's directory, the
    working directory or ""), then ``$PYTHONPATH``'s entries, then the rest."""
    extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[0:0] = [first, *extra]


def _child(argv: list[str], env: dict[str, str], cwd: str | None, out: str, err: str) -> None:
    """In the forked child: its streams, environment and directory, then ``argv`` as the
    interpreter would run it; the exit status as the interpreter would give it."""
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    status = 0
    try:
        if argv[1] == "-c":
            sys.argv = ["-c", *argv[3:]]
            _on_path("", env)
            exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})
        elif argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]
            _on_path(os.getcwd(), env)
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv[1:]
            _on_path(os.path.dirname(os.path.abspath(argv[1])), env)
            runpy.run_path(argv[1], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):
            status = exc.code
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException as exc:  # noqa: BLE001 (the interpreter's: traceback, status 1)
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # (this module's frames: the interpreter's traceback has none)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # (a closed stream at exit, as ever)
                stream.flush()
        os._exit(status & 0xFF)


class Process:
    """A started run: ``subprocess.Popen``'s ``pid``, ``returncode``, ``wait``, ``poll``,
    ``send_signal``, ``kill`` and ``communicate`` (text), whichever way it runs."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None, cwd: Any) -> None:
        self.args = list(argv)
        self._popen: subprocess.Popen | None = None
        self._proc: Any = None
        cwd = None if cwd is None else str(cwd)
        env = dict(os.environ if env is None else env)
        if not _forkable(argv, env):
            self._popen = subprocess.Popen(
                self.args,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self.pid = self._popen.pid
            return
        ctx, _ = _context()
        self._dir = tempfile.mkdtemp(prefix="sdk-fresh-")
        self._out = os.path.join(self._dir, "out")
        self._err = os.path.join(self._dir, "err")
        for path in (self._out, self._err):
            open(path, "w").close()
        weakref.finalize(self, shutil.rmtree, self._dir, True)
        self._proc = ctx.Process(
            target=_child, args=(self.args, env, cwd, self._out, self._err), daemon=False
        )
        self._proc.start()
        self.pid = self._proc.pid

    @property
    def forked(self) -> bool:
        return self._proc is not None

    @property
    def returncode(self) -> int | None:
        if self._popen is not None:
            return self._popen.returncode
        return self._proc.exitcode

    def poll(self) -> int | None:
        if self._popen is not None:
            return self._popen.poll()
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        if self._popen is not None:
            return self._popen.wait(timeout)
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._proc.exitcode

    def send_signal(self, sig: int) -> None:
        if self._popen is not None:
            self._popen.send_signal(sig)
        elif self._proc.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """stdout and stderr once it has ended; past ``timeout``, killed (either way) and
        ``subprocess.TimeoutExpired`` raised."""
        try:
            if self._popen is not None:
                return self._popen.communicate(timeout=timeout)
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        return self._read()

    def _read(self) -> tuple[str, str]:
        texts = []
        for path in (self._out, self._err):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        return texts[0], texts[1]


def start(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Any = None) -> Process:
    """``argv`` (``[sys.executable, ...]``) started, as ``subprocess.Popen`` with stdout and
    stderr piped as text and no stdin: forked from the server where :func:`_forkable`."""
    return Process(argv, env, cwd)


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Any = None,
    timeout: float | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout, check=check)``, forked from the server where :func:`_forkable`; a run
    past ``timeout`` is killed and raises ``subprocess.TimeoutExpired``."""
    proc = start(argv, env=env, cwd=cwd)
    out, err = proc.communicate(timeout)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done
