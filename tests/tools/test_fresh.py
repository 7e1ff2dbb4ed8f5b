"""tests/fresh.py: a forked child behaves as the process it stands for (exit status, streams,
environment, directory, exit handlers, a signal, a timeout), has done nothing its server did
not, and a variable read at import sends the run to a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests import fresh

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the fork server is Linux-only")


def test_a_child_exits_prints_and_reads_its_arguments_as_python_c_would(tmp_path):
    code = (
        "import os, sys, atexit\n"
        "atexit.register(lambda: print('at exit'))\n"
        "print(sys.argv, os.getcwd(), os.environ['SDKTEST_A'], sys.path[0] == '')\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    proc = fresh.start(
        [sys.executable, "-c", code, "x", "y"], env=fresh.one_thread(SDKTEST_A="a"), cwd=tmp_path
    )
    out, err = proc.communicate(60)
    assert proc.forked and proc.pid != os.getpid()
    assert proc.returncode == 3
    assert out == f"['-c', 'x', 'y'] {tmp_path} a True\nat exit\n"
    assert err == "to stderr\n"


def test_an_uncaught_exception_is_status_1_and_the_interpreters_traceback():
    run = fresh.run([sys.executable, "-c", "1 / 0"], env=fresh.one_thread(), timeout=60)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "Traceback (most recent call last):",
        '  File "<string>", line 1, in <module>',
        "ZeroDivisionError: division by zero",
    ]


def test_scripts_and_modules_run_as_main_with_pythonpath_on_sys_path(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "sdktest_mod.py").write_text("import sys\nprint(__name__, sys.argv[1:])\n")
    script = tmp_path / "script.py"
    script.write_text("import sys, sdktest_mod\nprint(sys.path[0])\n")
    env = fresh.one_thread(PYTHONPATH=str(tmp_path / "lib"))
    by_path = fresh.run([sys.executable, str(script)], env=env, timeout=60)
    assert by_path.returncode == 0, by_path.stderr
    assert by_path.stdout == f"sdktest_mod []\n{tmp_path}\n"
    by_name = fresh.run([sys.executable, "-m", "sdktest_mod", "z"], env=env, timeout=60)
    assert by_name.stdout == "__main__ ['z']\n", by_name.stderr


def test_a_child_has_compiled_nothing_and_loaded_no_plugin():
    code = (
        "import sys, torch, sdk\n"
        "from torch._dynamo.utils import counters\n"
        "print(sum(map(len, counters.values())), "
        "[m for m in sys.modules if m.startswith('sdk.plugins.') or m == '_sdk_runner'])\n"
    )
    run = fresh.run([sys.executable, "-c", code], env=fresh.one_thread(), timeout=60)
    assert run.stdout == "0 []\n", run.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_child_starts_cuda_on_its_own():
    """The server imported nothing that starts CUDA (a forked child of a process that did
    cannot use it): a child allocates, runs a kernel and reads the result back."""
    code = "import torch\nprint(torch.arange(4, device='cuda').sum().item())\n"
    for _ in range(2):
        proc = fresh.start([sys.executable, "-c", code], env=fresh.one_thread())
        out, err = proc.communicate(120)
        assert (proc.returncode, out) == (0, "6\n"), err
        if os.environ.get("SDK_TESTS_REAL_PROCESSES") != "1":
            assert proc.forked, fresh.early_differences(fresh.one_thread())


def test_kill_and_timeout():
    proc = fresh.start(
        [sys.executable, "-c", "import time; time.sleep(60)"], env=fresh.one_thread()
    )
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        fresh.run(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env=fresh.one_thread(),
            timeout=1,
        )
    assert time.monotonic() - start < 30


@pytest.mark.parametrize(
    "env",
    [
        {"TORCH_LOGS": "dynamo"},  # torch reads it at import
        {"OMP_NUM_THREADS": "2"},  # the OpenMP runtime reads it when torch loads it
        {"PYTHONHASHSEED": "7"},  # the interpreter, at startup
    ],
    ids=lambda e: next(iter(e)),
)
def test_a_variable_read_at_import_sends_the_run_to_a_real_process(env):
    name, value = next(iter(env.items()))
    proc = fresh.start(
        [sys.executable, "-c", f"import os; print(os.environ[{name!r}])"],
        env=fresh.one_thread(**env),
    )
    out, _ = proc.communicate(60)
    assert not proc.forked and out == f"{value}\n"


def test_real_processes_when_asked(monkeypatch):
    monkeypatch.setenv("SDK_TESTS_REAL_PROCESSES", "1")
    proc = fresh.start([sys.executable, "-c", "print(1)"], env=fresh.one_thread())
    assert proc.communicate(60) == ("1\n", "") and not proc.forked
