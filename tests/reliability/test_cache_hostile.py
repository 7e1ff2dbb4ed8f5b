"""A hostile cache: refused directories, things planted at entry paths, corrupt entries,
concurrent processes, ``cache clear`` racing them, ``kill -9`` mid-compile (issue 24).

Every case is a fresh process compiling one small graph with ``sdk:cpu_cpp``, the whole-graph
cache on, over the cache under test (forked from ``tests/fresh.py``'s server, which imported
torch and the sdk and did nothing else). What must hold each time: the result equals eager, the
graph is generated kernels (not a whole-graph fallback to ATen), nothing hangs, and a refused
directory says so in exactly one warning that names the directory and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sdk
from sdk.cache import DiskCache, cache_dir
from tests import fresh

CHILD = r"""
import json, sys, warnings
import torch, sdk
warnings.simplefilter("always")
torch.manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)

def f(x, y):
    return (torch.relu(x) * y).sum(1) + x.mean()

x, y = torch.randn(64, 32), torch.randn(64, 32)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    report = sdk.explain(f, x, y, backend="sdk:cpu_cpp")
    got = torch.compile(f, backend="sdk:cpu_cpp")(x, y)
torch.testing.assert_close(got, f(x, y))
print(json.dumps({
    "kernels": sum(len(g.kernels) for g in report.graphs),
    "cache": [g.cache for g in report.graphs],
    "warnings": [str(w.message) for w in seen if issubclass(w.category, sdk.CacheDirWarning)],
}), flush=True)
# done: the interpreter's last collections at exit, over all that torch and Dynamo made, took
# about 1 s of the process's 5; frozen objects are not collected. Exit handlers still run (the
# private temporary cache of a refused directory is removed at exit, as ever). Triton's
# bindings then say on stderr that objects leaked at exit: harmless, and only on success.
import gc
gc.freeze()
"""


def _env(root: Path | str) -> dict[str, str]:
    return {
        **os.environ,
        "SDK_CACHE_DIR": str(root),
        "SDK_GRAPH_CACHE": "1",
        "OMP_NUM_THREADS": "1",
    }


#: a process with no home directory: HOME unset, and no passwd entry for its uid
NO_HOME = r"""
import os, pwd
os.environ.pop("HOME", None)
def _no_entry(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")
pwd.getpwuid = _no_entry
"""


def compile_in_child(
    root: Path | str,
    seed: int = 0,
    timeout: float = 180,
    prelude: str = "",
    env: dict[str, str] | None = None,
) -> dict:
    run = fresh.run(
        [sys.executable, "-c", prelude + CHILD, str(seed)], env=env or _env(root), timeout=timeout
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _held(result: dict) -> None:
    assert result["kernels"] > 0, result  # generated, not a whole-graph fallback to ATen


# -- refused cache directories -------------------------------------------------------------


def _world_writable(root: Path) -> Path:
    root.mkdir(mode=0o700)
    os.chmod(root, 0o777)
    return root


def _other_owner(root: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    root.mkdir(mode=0o700)
    os.chown(root, 4242, 4242)
    return root


def _a_file(root: Path) -> Path:
    root.write_text("not a directory")
    return root


def _dangling_symlink(root: Path) -> Path:
    root.symlink_to(root.parent / "nowhere")
    return root


def _under_a_file(root: Path) -> Path:
    root.write_text("a file")
    return root / "cache"


def _read_only(root: Path) -> Path:
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory: not refusable as root")
    root.mkdir(mode=0o500)
    return root


HOSTILE_ROOTS = {
    "world-writable": (_world_writable, "writable by group or others"),
    "other-owner": (_other_owner, "not by the current user"),
    "a-file": (_a_file, "not a directory"),
    "dangling-symlink": (_dangling_symlink, "not usable"),
    "under-a-file": (_under_a_file, "not creatable"),
    "read-only": (_read_only, "not writable"),
}


@pytest.mark.parametrize("case", HOSTILE_ROOTS)
def test_a_refused_cache_dir_warns_once_and_still_generates_kernels(tmp_path, case):
    make, cause = HOSTILE_ROOTS[case]
    root = make(tmp_path / "cache")
    result = compile_in_child(root)
    _held(result)
    assert len(result["warnings"]) == 1, result["warnings"]
    message = result["warnings"][0]
    assert str(root) in message and cause in message and "SDK_CACHE_DIR" in message


def _marked(root: Path) -> Path:
    """``root`` made a cache by the SDK (new, so adopted: it holds the SDK's marker)."""
    from sdk._config import overridden

    with overridden(SDK_CACHE_DIR=str(root)):
        cache_dir(strict=True)
    return root


@pytest.mark.parametrize("namespace", ["programs", "cpp"])
def test_a_refused_namespace_dir_still_generates_kernels(tmp_path, namespace):
    root = _marked(tmp_path / "cache")
    (root / namespace).mkdir(mode=0o700)
    os.chmod(root / namespace, 0o777)
    result = compile_in_child(root)
    _held(result)
    assert len(result["warnings"]) == 1 and str(root / namespace) in result["warnings"][0]


def test_cache_dir_strict_raises_what_the_warning_says(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(_dangling_symlink(tmp_path / "cache")))
    with pytest.raises(PermissionError, match="refusing to use cache directory"):
        cache_dir(strict=True)


# -- directories that are not a cache: only what the SDK wrote is ever deleted -------------


def _write_tree(root: Path, files: dict[Path, bytes], mode: int | None = None) -> dict[Path, bytes]:
    """Write ``files`` (each file ``mode`` where given) under a private ``root``."""
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_bytes(data)
        if mode is not None:
            os.chmod(path, mode)
    os.chmod(root, 0o700)
    return files


def _a_home(root: Path) -> dict[Path, bytes]:
    """A directory of a user's files (a home directory, as SDK_CACHE_DIR=$HOME makes it)."""
    files = {
        root / ".ssh" / "id_rsa": b"-----BEGIN OPENSSH PRIVATE KEY-----\n",
        root / "Documents" / "thesis.tex": b"\\documentclass{book}\n",
        root / "notes.txt": b"todo\n",
    }
    return _write_tree(root, files)


def _a_dot_cache(root: Path) -> dict[Path, bytes]:
    """``~/.cache``: other programs' caches, one with its own CACHEDIR.TAG."""
    files = {
        root / "pip" / "http" / "0" / "entry": b"pip",
        root / "mozilla" / "CACHEDIR.TAG": b"Signature: 8a477f597d28d172789f06886806bc55\n",
        root / "CACHEDIR.TAG": b"Signature: 8a477f597d28d172789f06886806bc55\n",
    }
    return _write_tree(root, files, mode=0o600)


NOT_A_CACHE = {"home": _a_home, "dot-cache": _a_dot_cache}


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("case", NOT_A_CACHE)
@pytest.mark.parametrize("action", ["info", "clear"])
def test_cli_cache_on_a_dir_of_other_files_refuses_and_deletes_nothing(
    tmp_path, monkeypatch, capsys, case, action
):
    from sdk import cli

    root = tmp_path / "user"
    root.mkdir()
    files = NOT_A_CACHE[case](root)
    before = _tree(root)
    monkeypatch.setenv("SDK_CACHE_DIR", str(root))
    assert cli.main(["cache", action]) == 1
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: refusing to use cache directory {root}")
    assert "not an SDK cache" in lines[0] and "SDK_CACHE_DIR" in lines[0], lines[0]
    assert "removed" not in out.out and ".ssh" not in out.out and "pip" not in out.out
    assert _tree(root) == before  # nothing deleted, nothing written (no marker either)
    assert all(p.read_bytes() == data for p, data in files.items())


def test_a_compile_over_a_dir_of_other_files_warns_once_and_writes_nothing(tmp_path):
    root = tmp_path / "user"
    root.mkdir()
    _a_home(root)
    before = _tree(root)
    result = compile_in_child(root)
    _held(result)
    assert len(result["warnings"]) == 1, result["warnings"]
    assert str(root) in result["warnings"][0] and "not an SDK cache" in result["warnings"][0]
    assert _tree(root) == before


@pytest.mark.parametrize("which", ["/", "home"])
def test_the_file_system_root_and_the_home_dir_are_never_a_cache(tmp_path, monkeypatch, which):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)  # empty: it would be adopted, were it not the home directory
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SDK_CACHE_DIR", "/" if which == "/" else "~")
    with pytest.raises(PermissionError, match="refusing to use cache directory") as info:
        cache_dir(strict=True)
    assert "SDK_CACHE_DIR" in str(info.value)
    assert not any(home.iterdir()) and not Path("/CACHEDIR.TAG").exists()


def test_an_empty_dir_is_adopted_with_a_marker(tmp_path, monkeypatch):
    root = tmp_path / "empty"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("SDK_CACHE_DIR", str(root))
    assert cache_dir("ns", strict=True) == root / "ns"
    marker = root / "CACHEDIR.TAG"
    assert marker.is_file() and b"torch-backend-sdk" in marker.read_bytes()
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    (root / "mine.txt").write_text("a file the user put in the cache")
    assert cache_dir("ns", strict=True) == root / "ns"  # marked: content does not matter


def test_clear_in_a_marked_cache_deletes_only_the_sdks_files(tmp_path, monkeypatch):
    from sdk.core import graph_cache

    root = _marked(tmp_path / "cache")
    monkeypatch.setenv("SDK_CACHE_DIR", str(root))
    store = DiskCache("cpp")
    store.put("k", b"payload")
    lib = store.path_for("k", ".0123456789abcdef.so")
    lib.write_bytes(b"\x7fELF")
    kernel = cache_dir("triton", "kernels") / ("k" + "0" * 40 + ".py")
    kernel.write_text("# a kernel")
    theirs = {
        root / "README": b"mine",
        root / "cpp" / "notes.txt": b"mine",
        root / "cpp" / "id_rsa": b"mine",
        root / "cpp" / "sub" / "thesis.tex": b"mine",
        root / "triton" / "kernels" / "model.py": b"mine",
    }
    for path, data in theirs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert graph_cache.info()["namespaces"]["cpp"]["files"] == 2  # the entry and the library
    assert graph_cache.clear() == 3
    assert not store.path_for("k", ".entry").exists() and not lib.exists()
    assert not kernel.exists()
    assert all(p.read_bytes() == data for p, data in theirs.items())
    assert (root / "CACHEDIR.TAG").is_file()


# -- no home directory ----------------------------------------------------------------------

NO_HOME_CASES = {
    "tilde-of-no-user": ({"SDK_CACHE_DIR": "~nosuchuser/x"}, ""),
    "no-HOME-no-passwd-entry": ({"SDK_CACHE_DIR": "", "XDG_CACHE_HOME": ""}, NO_HOME),
}


@pytest.mark.parametrize("case", NO_HOME_CASES)
def test_no_home_dir_warns_once_and_still_generates_kernels(tmp_path, case):
    env_over, prelude = NO_HOME_CASES[case]
    env = {**_env(""), **env_over}
    result = compile_in_child("", prelude=prelude, env=env)
    _held(result)
    assert len(result["warnings"]) == 1, result["warnings"]
    message = result["warnings"][0]
    assert "home directory" in message and "SDK_CACHE_DIR" in message, message


def _no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_HOME, in this process: HOME unset, and no passwd entry for the uid."""
    import pwd

    def _no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", _no_entry)


@pytest.mark.parametrize("case", NO_HOME_CASES)
@pytest.mark.parametrize("action", ["info", "clear"])
def test_cli_cache_with_no_home_dir_prints_one_line(monkeypatch, capsys, case, action):
    # in this process, as the CLI cases above (a child per case cost ~5 CPU-seconds): an
    # exception escaping main() fails the test, as a traceback would have
    from sdk import cli

    env_over, prelude = NO_HOME_CASES[case]
    for var, value in env_over.items():
        monkeypatch.setenv(var, value)
    if prelude:
        _no_home(monkeypatch)
    assert cli.main(["cache", action]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "home directory" in lines[0] and "SDK_CACHE_DIR" in lines[0]


# -- things planted at entry paths, corrupt entries -----------------------------------------


def _entries(root: Path) -> list[Path]:
    return [
        p
        for ns in root.iterdir()
        if ns.is_dir()
        for p in ns.iterdir()
        if p.suffix in (".entry", ".so") and not p.name.startswith(".tmp-")
    ]


def _plant(path: Path, what: str) -> None:
    data = path.read_bytes() if path.is_file() else b""
    path.unlink()
    if what == "fifo":
        os.mkfifo(path, 0o600)
    elif what == "directory":
        path.mkdir(mode=0o700)
    elif what == "symlink":
        path.symlink_to("/dev/zero")
    elif what == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif what == "random":
        path.write_bytes(os.urandom(max(len(data), 64)))
    elif what == "wrong-version":
        path.write_bytes(data.replace(b"sdk-cache-entry-v1", b"sdk-cache-entry-v9", 1))
    elif what == "foreign-mode":
        path.write_bytes(data)
        os.chmod(path, 0o666)
    if what in ("truncated", "random", "wrong-version"):
        os.chmod(path, 0o600)


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory) -> Path:
    """A cache one compile filled (graph entry, library entry, .so): copied per case."""
    root = tmp_path_factory.mktemp("filled") / "cache"
    _held(compile_in_child(root))
    return root


@pytest.mark.parametrize(
    "what", ["fifo", "directory", "symlink", "truncated", "random", "wrong-version", "foreign-mode"]
)
def test_anything_at_an_entry_path_is_a_miss_then_repaired(tmp_path, filled_cache, what):
    root = tmp_path / "cache"
    shutil.copytree(filled_cache, root, symlinks=True)
    entries = _entries(root)
    assert any(p.suffix == ".entry" for p in entries) and any(p.suffix == ".so" for p in entries)
    for path in entries:
        _plant(path, what)
    result = compile_in_child(root, timeout=120)  # a FIFO that is opened for reading hangs
    _held(result)
    assert result["cache"] == ["stored"], result  # rebuilt, not read from what was planted
    fresh = _entries(root)  # repaired: every entry a regular private file again
    assert fresh and all(stat.S_ISREG(p.lstat().st_mode) for p in fresh), [
        (p, p.lstat().st_mode) for p in fresh
    ]
    if what in ("fifo", "truncated"):  # and what was written serves the next process
        assert compile_in_child(root)["cache"] == ["hit"]


def test_swapped_entries_are_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    store = DiskCache("swap")
    store.put("a", b"payload of a")
    store.put("b", b"payload of b")
    pa, pb = store.path_for("a", ".entry"), store.path_for("b", ".entry")
    data_a, data_b = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(data_b)
    pb.write_bytes(data_a)
    assert store.get("a") is None and store.get("b") is None


def test_a_fifo_at_an_entry_path_does_not_block_a_read(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    store = DiskCache("fifo")
    os.mkfifo(store.path_for("k", ".entry"), 0o600)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(store.get("k")), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive() and got == [None]
    store.put("k", b"v")  # the write replaces it
    assert store.get("k") == b"v"


# -- the CLI on a bad cache directory ---------------------------------------------------


@pytest.mark.parametrize("make", [_dangling_symlink, _under_a_file, _world_writable])
@pytest.mark.parametrize("action", ["info", "clear"])
def test_cli_cache_on_a_bad_dir_prints_one_line(tmp_path, monkeypatch, capsys, make, action):
    # in this process (a child per case cost ~7 s of CI's two cores): an exception escaping
    # main() fails the test, as a traceback would have
    from sdk import cli

    monkeypatch.setenv("SDK_CACHE_DIR", str(make(tmp_path / "cache")))
    assert cli.main(["cache", action]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to use cache directory")
    assert "SDK_CACHE_DIR" in lines[0]


# -- concurrency, a racing clear, kill -9 ------------------------------------------------


def test_eight_processes_and_a_racing_clear(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    env = _env(root)
    stop = time.monotonic() + 600
    done = threading.Event()  # set once the eight have ended: the racer stops at once
    clears: list[BaseException | None] = []
    # the racer clears in this process (what `sdk cache clear` calls; a child per clear kept
    # one of CI's two cores busy starting Python while the eight ran), once a second, about
    # as often as those children did: each failure is kept, as the CLI would have said it
    # on stderr with exit status 1. (A clear between a library's build and its dlopen sent
    # the child's graph to ATen whole, now and then even at this rate: the plugins load
    # through sdk.toolchain.compile_and_load, which builds a library cleared in between
    # again; tests/contract/test_toolchain.py makes that race happen every time.)
    monkeypatch.setenv("SDK_CACHE_DIR", str(root))
    from sdk.core import graph_cache

    def clear_loop():
        while time.monotonic() < stop and not done.is_set():
            try:
                graph_cache.clear(in_use=[])
                clears.append(None)
            except BaseException as exc:  # noqa: BLE001 (kept, asserted below)
                clears.append(exc)
            done.wait(1.0)

    racer = threading.Thread(target=clear_loop, daemon=True)
    racer.start()
    procs = [fresh.start([sys.executable, "-c", CHILD, str(i)], env=env) for i in range(8)]
    outs = [p.communicate(timeout=600) for p in procs]
    done.set()
    racer.join(120)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        _held(json.loads(out.strip().splitlines()[-1]))
    assert clears and not [e for e in clears if e is not None], clears


# a forked child (tests/fresh.py) compiles CHILD in about 3 s on CI's cores: killed at 1 s and
# at 2 s, mid-compile (a process that imports torch itself was still importing at 1 s)
@pytest.mark.parametrize("after", [1.0, 2.0])
def test_kill_9_mid_compile_then_a_rerun_holds(tmp_path, monkeypatch, capsys, after):
    root = tmp_path / "cache"
    proc = fresh.start([sys.executable, "-c", CHILD], env=_env(root))
    time.sleep(after)
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    _held(compile_in_child(root))
    # what the killed process left (temporary files, build directories) is counted by
    # `cache info` and, once stale, removed by `cache clear`
    from sdk.core import graph_cache

    old = time.time() - graph_cache.STALE_AFTER_S - 60
    temps = [
        p
        for ns in root.iterdir()
        if ns.is_dir()
        for p in ns.iterdir()
        if p.name.startswith(".tmp-")
    ]
    for t in temps:
        os.utime(t, (old, old), follow_symlinks=False)
    from sdk import cli  # in this process: two children cost ~5 CPU-seconds each

    monkeypatch.setenv("SDK_CACHE_DIR", str(root))
    assert cli.main(["cache", "info"]) == 0
    if temps:
        assert "temporary" in capsys.readouterr().out
    assert cli.main(["cache", "clear"]) == 0
    assert not [
        p
        for ns in root.iterdir()
        if ns.is_dir()
        for p in ns.iterdir()
        if p.name.startswith(".tmp-")
    ]


#: a running build, as far as its lock goes: holds an exclusive ``flock`` on argv[1] (what
#: ``sdk.toolchain`` takes while it builds) until its stdin closes
HOLD_LOCK = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_cache_info_counts_leftover_temporaries(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    ns = cache_dir("cpp")
    (ns / ".tmp-abc.so").write_bytes(b"x" * 100)
    from sdk.core import graph_cache

    spaces = graph_cache.info()["namespaces"]
    assert spaces["cpp"]["temp"] == 1 and spaces["cpp"]["temp_bytes"] == 100
    assert graph_cache.clear() == 0  # fresh: a running compile's, kept
    old = time.time() - graph_cache.STALE_AFTER_S - 60
    os.utime(ns / ".tmp-abc.so", (old, old))
    assert graph_cache.info()["namespaces"]["cpp"]["stale"] == 1
    assert graph_cache.clear() == 1 and not (ns / ".tmp-abc.so").exists()


def test_cache_clear_removes_lock_files_but_not_one_a_build_holds(tmp_path, monkeypatch, capsys):
    """`sdk cache clear` leaves nothing of the SDK's: the build locks beside libraries go too,
    except one that a running build holds (held by another process), which it keeps and says
    so."""
    root = tmp_path / "cache"
    store = DiskCache("cpp", root=root)
    store.put("a", b"payload")
    free, held = store.path_for("a", ".lock"), store.path_for("b", ".lock")
    free.write_bytes(b"")
    held.write_bytes(b"")
    # the build in a process of its own (without torch: ~20 ms), the CLI in this one (a child
    # per `sdk cache clear` cost ~2 s each): an exception escaping main() fails the test
    from sdk import cli

    monkeypatch.setenv("SDK_CACHE_DIR", str(root))
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(held)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as build:
        try:
            assert build.stdout.readline().strip() == "held"
            assert cli.main(["cache", "clear"]) == 0
            out = capsys.readouterr().out
            assert not free.exists() and not store.path_for("a", ".entry").exists()
            assert held.exists(), "a lock a build holds was removed"
            assert "removed 2 files" in out and "kept 1 lock file" in out, out
        finally:
            build.stdin.close()  # the build ends, and its lock with it
    assert build.returncode == 0
    assert cli.main(["cache", "clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 files" in out, out
    assert sorted(p.name for p in (root / "cpp").iterdir()) == []


def test_sdk_exports_the_warning():
    assert issubclass(sdk.CacheDirWarning, UserWarning)
