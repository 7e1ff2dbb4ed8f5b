"""Tests for the per-user disk cache (sdk.cache) and sdk.toolchain as cpu_cpp builds C++ with it."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import stat
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import sdk
from sdk import toolchain
from sdk.cache import DiskCache, cache_dir, stable_hash
from sdk.plugins.cpu_cpp.toolchain import LANGUAGE, PRELUDE, compile_library, default_flags
from sdk.toolchain import CompileError


def find_compiler() -> str:
    return toolchain.find_compiler(LANGUAGE)


def compile_and_load(source: str, names: list[str], nargs: list[int]) -> list:
    """cpu_cpp's ``compile_library``, then the functions ``names`` of ``nargs`` pointers each."""
    lib = toolchain.load_library(compile_library(source))
    return [toolchain.get_function(lib, name, n) for name, n in zip(names, nargs)]


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache root; the real home cache is never touched."""
    root = tmp_path / "cache"
    monkeypatch.setenv("SDK_CACHE_DIR", str(root))
    return root


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _has_compiler() -> bool:
    try:
        find_compiler()
    except FileNotFoundError:
        return False
    return True


needs_cxx = pytest.mark.skipif(not _has_compiler(), reason="no C++ compiler")
N = 1000  # elements in the test kernels; baked into their sources


# --------------------------------------------------------------------------- cache_dir


def test_cache_dir_created_private(cache_root: Path) -> None:
    old_umask = os.umask(0)  # 0o700 must not depend on the umask
    try:
        path = cache_dir("ns", "sub")
    finally:
        os.umask(old_umask)
    assert path == cache_root / "ns" / "sub"
    for d in (cache_root, cache_root / "ns", path):
        assert d.is_dir() and _mode(d) == 0o700


def test_cache_dir_root_from_xdg_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SDK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "torch-backend-sdk"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "torch-backend-sdk"


@pytest.mark.parametrize("where", ["root", "sub"])
def test_world_writable_cache_dir_rejected(cache_root: Path, where: str) -> None:
    bad = cache_root if where == "root" else cache_root / "ns"
    if where == "sub":
        cache_dir()  # the root: the SDK's (new, so marked as its cache)
    bad.mkdir(parents=True)
    os.chmod(bad, 0o777)
    with pytest.raises(PermissionError) as info:
        cache_dir("ns", strict=True)
    message = str(info.value)
    assert str(bad) in message and "writable by group or others" in message
    assert "set SDK_CACHE_DIR to a private directory" in message
    # not strict (compiles): one warning with the same words, then a private temporary root
    with pytest.warns(sdk.CacheDirWarning, match="writable by group or others") as seen:
        used = cache_dir("ns")
    assert len(seen) == 1 and str(bad) in str(seen[0].message)
    assert not used.is_relative_to(cache_root) and used.name == "ns"
    assert stat.S_IMODE(used.stat().st_mode) == 0o700 and used.stat().st_uid == os.geteuid()


def test_foreign_cache_dir_rejected(cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache_root.mkdir(mode=0o700)
    other_uid = os.geteuid() + 1
    monkeypatch.setattr(os, "geteuid", lambda: other_uid)  # the dir now belongs to someone else
    with pytest.raises(PermissionError) as info:
        cache_dir(strict=True)
    message = str(info.value)
    assert str(cache_root) in message and "not by the current user" in message
    assert "SDK_CACHE_DIR" in message


@pytest.mark.parametrize("part", ["", ".", "..", "a/b"])
def test_cache_dir_rejects_path_tricks(part: str) -> None:
    with pytest.raises(ValueError):
        cache_dir(part)


# --------------------------------------------------------------------------- DiskCache


def test_disk_cache_roundtrip() -> None:
    cache = DiskCache("test")
    assert cache.get("k") is None
    cache.put("k", b"payload \x00\xff")
    assert cache.get("k") == b"payload \x00\xff"
    cache.put("k", b"")
    assert cache.get("k") == b""
    entry = cache.path_for("k", ".entry")
    assert _mode(entry) == 0o600
    assert "k" not in entry.name and len(entry.stem) == 64  # names are sha256 hex
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".tmp")]


def test_truncated_entry_is_a_miss() -> None:
    cache = DiskCache("test")
    cache.put("k", b"x" * 100)
    entry = cache.path_for("k", ".entry")
    blob = entry.read_bytes()
    for cut in (len(blob) - 1, 40, 5, 0):
        entry.write_bytes(blob[:cut])
        assert cache.get("k") is None


def test_corrupted_entry_is_a_miss() -> None:
    cache = DiskCache("test")
    cache.put("k", b"x" * 100)
    entry = cache.path_for("k", ".entry")
    blob = bytearray(entry.read_bytes())
    blob[-10] ^= 0x01
    entry.write_bytes(bytes(blob))
    assert cache.get("k") is None
    entry.write_bytes(b"garbage")
    assert cache.get("k") is None


def test_wrong_key_entry_is_a_miss() -> None:
    cache = DiskCache("test")
    cache.put("a", b"for a")
    cache.path_for("b", ".entry").write_bytes(cache.path_for("a", ".entry").read_bytes())
    assert cache.get("b") is None
    assert cache.get("a") == b"for a"


def test_group_writable_entry_is_a_miss() -> None:
    cache = DiskCache("test")
    cache.put("k", b"data")
    entry = cache.path_for("k", ".entry")
    os.chmod(entry, 0o620)
    assert cache.get("k") is None
    os.chmod(entry, 0o600)
    assert cache.get("k") == b"data"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_foreign_entry_is_a_miss() -> None:
    cache = DiskCache("test")
    cache.put("k", b"data")
    os.chown(cache.path_for("k", ".entry"), 65534, -1)
    assert cache.get("k") is None


def test_stable_hash_is_canonical() -> None:
    assert stable_hash("a", b"b", 3, ("c", (4,))) == stable_hash("a", b"b", 3, ("c", (4,)))
    assert re.fullmatch("[0-9a-f]{64}", stable_hash("x"))
    distinct = [("ab", "c"), ("a", "bc"), ("abc",), (1,), ("1",), (True,), (b"1",), ((1,),), ()]
    assert len({stable_hash(*parts) for parts in distinct}) == len(distinct)
    with pytest.raises(TypeError):
        stable_hash(1.5)


# --------------------------------------------------------------------------- toolchain


def test_find_compiler_honours_cxx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(FileNotFoundError, match="CXX"):
        find_compiler()
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CXX")
    with pytest.raises(FileNotFoundError, match="no C\\+\\+ compiler found"):
        find_compiler()


def _add_kernel(tag: str) -> str:
    """A small kernel, made unique by ``tag`` so each test compiles its own library."""
    return (
        PRELUDE
        + f"""
// {tag}
extern "C" void add(const float* __restrict x, const float* __restrict y, float* __restrict out) {{
#pragma omp parallel for simd
  for (int64_t i = 0; i < {N}; ++i) out[i] = x[i] + y[i];
}}
"""
    )


def _check_add(fn) -> None:
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    fn(x.data_ptr(), y.data_ptr(), out.data_ptr())
    torch.testing.assert_close(out, x + y)


@needs_cxx
def test_compile_library_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    source = _add_kernel("caches")
    path = compile_library(source)
    assert path.parent.parent == cache_dir() and _mode(path) == 0o700
    mtime = path.stat().st_mtime_ns

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"compiler invoked on a cache hit: {args}")

    monkeypatch.setattr(toolchain.subprocess, "run", no_compiler)
    assert compile_library(source) == path
    assert path.stat().st_mtime_ns == mtime
    (fn,) = compile_and_load(source, ["add"], [3])
    _check_add(fn)


@needs_cxx
def test_a_library_cleared_before_it_is_loaded_is_built_again() -> None:
    """Another process's ``sdk cache clear`` may remove a library between its build and its
    ``dlopen`` (the graph then fell back to ATen whole, with a message about noexec mounts):
    compile_and_load builds it again and loads that."""
    from sdk.plugins.cpu_cpp.toolchain import compile_and_load as cpp_compile_and_load

    source = _add_kernel("cleared")
    loads: list[Path] = []

    def cleared_first(path: Path):
        loads.append(path)
        if len(loads) == 1:
            path.unlink()  # the racing clear
        return toolchain.load_library(path)

    lib = toolchain.compile_and_load(
        source, loader=cleared_first, language=LANGUAGE, flags=default_flags(), namespace="cpp"
    )
    assert len(loads) == 2 and loads[1].is_file()
    _check_add(toolchain.get_function(lib, "add", 3))
    # the plugin's own entry takes the same path
    lib = cpp_compile_and_load(_add_kernel("cleared, cpu_cpp"))
    _check_add(toolchain.get_function(lib, "add", 3))


@needs_cxx
def test_a_library_that_is_there_but_does_not_load_fails_at_once() -> None:
    """A load error with the library in place (a cache on a noexec mount) is not a race:
    raised at the first try, after one build."""
    source = _add_kernel("unloadable")
    builds: list[Path] = []

    def refuses(path: Path):
        builds.append(path)
        raise OSError(f"could not load {path}: failed to map segment from shared object")

    with pytest.raises(OSError, match="failed to map segment"):
        toolchain.compile_and_load(source, loader=refuses, language=LANGUAGE)
    assert len(builds) == 1


@needs_cxx
def test_a_library_that_keeps_vanishing_gives_up_after_load_tries() -> None:
    source = _add_kernel("vanishing")
    tries: list[Path] = []

    def always_cleared(path: Path):
        tries.append(path)
        path.unlink()
        return toolchain.load_library(path)

    with pytest.raises(OSError, match="could not load"):
        toolchain.compile_and_load(source, loader=always_cleared, language=LANGUAGE)
    assert len(tries) == toolchain.LOAD_TRIES


@needs_cxx
def test_cache_key_covers_flags_and_plugin_version() -> None:
    source = _add_kernel("key")
    base = compile_library(source)
    assert compile_library(source, plugin_version="1") != base
    assert compile_library(source, flags=default_flags() + ("-DX=1",)) != base


@needs_cxx
def test_tampered_library_is_recompiled_not_loaded() -> None:
    source = _add_kernel("tamper")
    path = compile_library(source)  # not loaded yet: safe to change in place
    good = path.read_bytes()
    tampered = bytearray(good)
    tampered[len(tampered) // 2] ^= 0xFF
    path.write_bytes(bytes(tampered))
    inode = path.stat().st_ino

    again = compile_library(source)
    assert again.read_bytes() != bytes(tampered)
    assert again != path or again.stat().st_ino != inode  # a new file, renamed into place
    (fn,) = compile_and_load(source, ["add"], [3])
    _check_add(fn)


@needs_cxx
def test_unsafe_library_or_record_is_recompiled(cache_root: Path) -> None:
    source = _add_kernel("unsafe")
    path = compile_library(source)
    os.chmod(path, 0o777)
    assert _mode(compile_library(source)) == 0o700
    record = path.with_name(path.name.split(".")[0] + ".entry")  # (the library's digest)
    record.write_bytes(b"not a record")
    assert compile_library(source) == path  # rebuilt (the build is deterministic) ...
    assert record.read_bytes() != b"not a record"  # ... and recorded again


@needs_cxx
def test_concurrent_compiles_of_one_key() -> None:
    source = _add_kernel("race")
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: compile_library(source), range(4)))
    assert all(p.exists() for p in paths)
    assert compile_library(source) in paths
    (fn,) = compile_and_load(source, ["add"], [3])
    _check_add(fn)


_COUNTING_COMPILER = """#!/bin/sh
case "$*" in *" -E "*) ;; *" -o "*) echo build >> "{log}"; sleep 1;; esac
exec {real} "$@"
"""


@needs_cxx
def test_processes_building_one_library_at_once_run_the_compiler_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_identity
) -> None:
    """Ranks of a DDP job (or test workers) that need the same library at the same time:
    one builds it, the others wait for that build and load it, instead of each running the
    compiler (the native runner is a minute of it on two cores)."""
    log = tmp_path / "builds"
    fake = tmp_path / "counting-c++"
    fake.write_text(_COUNTING_COMPILER.format(log=log, real=find_compiler()))
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    code = (
        "import sys; from sdk.plugins.cpu_cpp.toolchain import compile_library\n"
        "print(compile_library(sys.stdin.read()))\n"
    )
    source = _add_kernel("once")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    for p in procs:  # each has imported the SDK by now, or reads its source once it has
        p.stdin.write(source)
        p.stdin.close()
    paths = set()
    for p in procs:
        with p.stdout:
            paths.add(p.stdout.read().strip())
        p.wait(timeout=300)
    assert all(p.returncode == 0 for p in procs)
    assert len(paths) == 1 and Path(paths.pop()).exists()
    assert log.read_text().split() == ["build"], "the compiler ran more than once"


@needs_cxx
def test_compile_error_message(cache_root: Path) -> None:
    source = PRELUDE + 'extern "C" void broken(float* x) { x[0] = undefined_name; }\n'
    with pytest.raises(CompileError) as info:
        compile_library(source)
    message = str(info.value)
    assert find_compiler() in message and "-fopenmp" in message  # the command
    assert "undefined_name" in message and "error" in message  # the stderr tail
    # the first line (what a warning or one-line reason shows) quotes the compiler's error
    assert "undefined_name" in message.splitlines()[0], message
    written = re.search(r"full source: (\S+)", message)
    assert written and Path(written.group(1)).read_text() == source
    leftovers = [*(cache_root / "cpp").glob("*.so"), *(cache_root / "cpp").glob(".tmp*")]
    assert not leftovers


@needs_cxx
def test_kernel_matches_torch() -> None:
    source = (
        PRELUDE
        + f"""
extern "C" void silu_tanh(const float* __restrict x, const float* __restrict y,
                          float* __restrict out) {{
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < {N}; ++i) out[i] = x[i] * (1.0f / (1.0f + expf(-x[i]))) + tanhf(y[i]);
}}
"""
    )
    (fn,) = compile_and_load(source, ["silu_tanh"], [3])
    x, y, out = torch.randn(N) * 5, torch.randn(N) * 5, torch.empty(N)
    x[:4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -100.0])
    fn(x.data_ptr(), y.data_ptr(), out.data_ptr())
    torch.testing.assert_close(out, torch.nn.functional.silu(x) + torch.tanh(y), equal_nan=True)


@needs_cxx
def test_half_conversions_are_bit_exact() -> None:
    generator = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31, (N,), dtype=torch.int64, generator=generator)
    floats = bits.to(torch.int32).view(torch.float32).clone()
    specials = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3e38, 1e-45, 1.00390625]
    fp16_edges = [65504.0, 65519.99, 65520.0, 2.0**-14, 2.0**-24, 2.0**-25, 1.5 * 2.0**-25]
    edges = specials + fp16_edges
    floats[: len(edges)] = torch.tensor(edges)
    floats[len(edges) : N // 2] = torch.randn(N // 2 - len(edges), generator=generator) * 1e-5
    source = (
        PRELUDE
        + f"""
extern "C" void to_half(const float* __restrict x, uint16_t* __restrict bf,
                        uint16_t* __restrict h) {{
#pragma omp simd
  for (int64_t i = 0; i < {N}; ++i) {{
    bf[i] = sdk_float_to_bf16(x[i]);
    h[i] = sdk_float_to_fp16(x[i]);
  }}
}}
extern "C" void from_half(const uint16_t* __restrict bf, const uint16_t* __restrict h,
                          float* __restrict from_bf, float* __restrict from_h) {{
#pragma omp simd
  for (int64_t i = 0; i < 65536; ++i) {{
    from_bf[i] = sdk_bf16_to_float(bf[i]);
    from_h[i] = sdk_fp16_to_float(h[i]);
  }}
}}
"""
    )
    to_half, from_half = compile_and_load(source, ["to_half", "from_half"], [3, 4])

    bf, h = torch.empty(N, dtype=torch.int16), torch.empty(N, dtype=torch.int16)
    to_half(floats.data_ptr(), bf.data_ptr(), h.data_ptr())
    for got, dtype in ((bf, torch.bfloat16), (h, torch.float16)):
        expected = floats.to(dtype)
        nan = expected.isnan()
        assert torch.equal(got.view(dtype).isnan(), nan)
        assert torch.equal(got[~nan], expected.view(torch.int16)[~nan]), dtype

    every = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    from_bf, from_h = torch.empty(65536), torch.empty(65536)
    from_half(every.data_ptr(), every.data_ptr(), from_bf.data_ptr(), from_h.data_ptr())
    for got, dtype in ((from_bf, torch.bfloat16), (from_h, torch.float16)):
        expected = every.view(dtype).float()
        nan = expected.isnan()
        assert torch.equal(got.isnan(), nan)
        assert torch.equal(got.view(torch.int32)[~nan], expected.view(torch.int32)[~nan]), dtype


def _has_libmvec() -> bool:
    libc, version = platform.libc_ver()
    if platform.machine() != "x86_64" or libc != "glibc":
        return False
    return tuple(map(int, version.split("."))) >= (2, 35)


@needs_cxx
@pytest.mark.skipif(not _has_libmvec(), reason="needs x86-64 glibc >= 2.35 (libmvec)")
def test_simd_loop_calling_expf_is_vectorized(tmp_path: Path) -> None:
    body = f"""
extern "C" void sigmoid(const float* __restrict x, float* __restrict out) {{
#pragma omp simd
  for (int64_t i = 0; i < {N}; ++i) out[i] = 1.0f / (1.0f + expf(-x[i]));
}}
"""
    source = PRELUDE + body
    src = tmp_path / "k.cpp"
    src.write_text(source)
    line = source.count("\n", 0, source.index("for (int64_t")) + 1
    cmd = [find_compiler(), str(src), "-o", str(tmp_path / "k.so"), *default_flags()]
    report = subprocess.run(
        [*cmd, "-fopt-info-vec-optimized"], capture_output=True, text=True, check=True
    ).stderr
    assert re.search(rf"k\.cpp:{line}:\d+: optimized: loop vectorized", report), report
    # The vector body calls libmvec's expf variant (e.g. _ZGVeN16v_expf), not only scalar expf.
    assert re.search(rb"_ZGV[bcde]N\d+v_expf", compile_library(source).read_bytes())


# --------------------------------------------------------------------------- hung compiler

#: A fake compiler: records its pid and its child's, then waits on a child that sleeps
#: "forever". With HANG=build it answers the identity probes (--version, -E) at once and
#: hangs only when building.
_HUNG_COMPILER = """#!/bin/sh
if [ "$HANG" = build ]; then
  case "$*" in *--version*|*" -E "*) echo "fake compiler 1.0"; exit 0;; esac
fi
echo $$ >> "{pids}"
sleep 1000 &
echo $! >> "{pids}"
wait
"""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, waiting for a reaper, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def fresh_identity():
    """The compiler identity and cache key are memoized per process: forget them around a
    test that changes the compiler."""
    memos = [
        toolchain.compiler_identity,
        toolchain._identity,
        toolchain._cache_key,
    ]
    memos = [f for f in memos if hasattr(f, "cache_clear")]
    for f in memos:
        f.cache_clear()
    yield
    for f in memos:
        f.cache_clear()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("hang", ["build", "identity"])
def test_a_hung_compiler_is_killed_and_the_op_falls_back(
    hang: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_identity, use_registry
) -> None:
    import threading
    import time

    pids = tmp_path / "pids"
    fake = tmp_path / "hung-c++"
    fake.write_text(_HUNG_COMPILER.format(pids=pids))
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setenv("HANG", hang)
    monkeypatch.setenv("SDK_COMPILE_TIMEOUT", "2")

    def recorded() -> list[int]:
        return [int(p) for p in pids.read_text().split()] if pids.exists() else []

    stop = threading.Event()

    def watchdog() -> None:  # without a time limit, each compiler run would wait forever
        if stop.wait(60):
            return
        while not stop.wait(0.5):
            for pid in recorded():
                if _alive(pid):
                    os.kill(pid, 9)

    def fn(x):
        return torch.sin(x) * 2 + 1

    x = torch.randn(64)
    guard = threading.Thread(target=watchdog, daemon=True)
    guard.start()
    try:
        torch.compiler.reset()
        use_registry()  # (a fresh record of the fallbacks cpu_cpp was warned about)
        start = time.monotonic()
        with pytest.warns(sdk.PluginFallbackWarning, match="'cpu_cpp'.*in ATen instead"):
            report = sdk.explain(fn, x, backend="sdk:cpu_cpp")
        elapsed = time.monotonic() - start
        torch.compiler.reset()
        with warnings.catch_warnings():  # (said above; the reason may name another file)
            warnings.simplefilter("ignore", sdk.PluginFallbackWarning)
            got = torch.compile(fn, backend="sdk:cpu_cpp")(x)
    finally:
        stop.set()
        guard.join()
        torch.compiler.reset()
    torch.testing.assert_close(got, fn(x))
    text = str(report)
    assert "CompileError" in text and "timed out after 2 s" in text, text
    assert "SDK_COMPILE_TIMEOUT" in text, text
    assert not report.graphs[0].kernels, text  # ATen ran it: the usual fallback
    assert elapsed < 40, f"the compile took {elapsed:.0f} s with a 2 s compiler time limit"
    assert recorded(), "the fake compiler never ran"
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in recorded()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in recorded() if _alive(p)], "the compiler or its child survived"


@needs_cxx
@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_compile_timeout_names_the_variable(
    value: str, monkeypatch: pytest.MonkeyPatch, fresh_identity
) -> None:
    monkeypatch.setenv("SDK_COMPILE_TIMEOUT", value)
    with pytest.raises(ValueError, match=r"SDK_COMPILE_TIMEOUT is .* a number >= 0"):
        toolchain.compiler_identity(find_compiler(), LANGUAGE)


def test_compile_timeout_default_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from sdk import _config as config

    monkeypatch.delenv("SDK_COMPILE_TIMEOUT", raising=False)
    assert config.compile_timeout() == 300
    monkeypatch.setenv("SDK_COMPILE_TIMEOUT", "0")
    assert config.compile_timeout() is None
    monkeypatch.setenv("SDK_COMPILE_TIMEOUT", "12.5")
    assert config.compile_timeout() == 12.5


_SLOW_COMPILER = """#!/bin/sh
case "$*" in *--version*|*" -E "*) exec {real} "$@";; esac
echo $$ >> "{pids}"
exec sleep 120
"""


def _compiling_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str):
    """A process building ``source`` with a compiler that sleeps (``$CXX`` here too): the
    process, once its compiler runs, and the compiler's pid."""
    import time

    pids = tmp_path / "compiler-pids"
    fake = tmp_path / "slow-c++"
    fake.write_text(_SLOW_COMPILER.format(pids=pids, real=find_compiler()))
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    code = "import sys; from sdk.plugins.cpu_cpp.toolchain import compile_library\n"
    code += "compile_library(sys.argv[1])\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, source], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 180
    while not (pids.exists() and pids.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the build never started: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.1)
    return proc, int(pids.read_text().split()[0])


def _end(proc: subprocess.Popen, compiler: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(compiler, 9)
    proc.kill()
    proc.wait(timeout=60)
    proc.stderr.close()


@needs_cxx
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("timeout", ["3", "0"])
def test_a_waiter_on_a_build_lock_says_who_holds_it_and_gives_up(
    timeout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd, fresh_identity
) -> None:
    """A process waiting for another's build of the same library says which process holds
    the lock after a few seconds, and gives up at the compile time limit with an error naming
    it; with SDK_COMPILE_TIMEOUT=0 (no limit on a compiler run) the wait still ends, at the
    default limit (made 3 s here)."""
    import threading
    import time

    from sdk import _config as config

    source = _add_kernel(f"held{timeout}")
    holder, compiler = _compiling_process(tmp_path, monkeypatch, source)
    try:
        monkeypatch.setenv("SDK_COMPILE_TIMEOUT", timeout)
        monkeypatch.setattr(config, "COMPILE_TIMEOUT", 3.0)
        monkeypatch.setattr(toolchain, "LOCK_NOTICE_S", 0.5, raising=False)
        outcome: list[BaseException | Path] = []

        def wait() -> None:
            try:
                outcome.append(compile_library(source))
            except BaseException as exc:  # noqa: BLE001 - what the test looks at
                outcome.append(exc)

        start = time.monotonic()
        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(30)
        elapsed = time.monotonic() - start
        assert not waiter.is_alive(), "the waiter still waits after 30 s"
        assert _alive(compiler), "the holder's compiler ended: nothing was waited for"
    finally:
        _end(holder, compiler)
    (error,) = outcome
    assert isinstance(error, CompileError), error
    message = str(error)
    assert f"process {holder.pid} " in message and "lock" in message, message
    assert "SDK_COMPILE_TIMEOUT" in message and f"kill {holder.pid}" in message, message
    assert 3 <= elapsed < 20, elapsed
    notices = [line for line in capfd.readouterr().err.splitlines() if "waiting" in line]
    assert len(notices) == 1 and f"process {holder.pid} " in notices[0], notices


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_a_build_lock_removed_before_it_is_taken_is_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cache clear` removes a lock file no build holds; a process that opened it just before
    and locks it just after holds a lock no one else sees: it must notice and lock the file
    now at the path, so that two builds of one library never run at once."""
    import fcntl

    path = tmp_path / "lib.lock"
    flock = fcntl.flock
    removed = []

    def cleared_first(fd: int, op: int) -> None:
        if not removed:  # `cache clear` between this process's open and its lock
            removed.append(path.stat().st_ino)
            path.unlink()
        flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", cleared_first)
    with toolchain._build_lock(path, "a test"):
        monkeypatch.setattr(fcntl, "flock", flock)
        assert removed, "the lock was taken without a flock"
        other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # the next process's lock
        try:
            with pytest.raises(BlockingIOError):
                flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)


@needs_cxx
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_process_leaves_no_compiler_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed with SIGKILL mid-build (its compiler runs in a session of its own,
    out of reach of a signal to the process's group) takes its compiler with it."""
    import time

    holder, compiler = _compiling_process(tmp_path, monkeypatch, _add_kernel("orphan"))
    try:
        assert _alive(compiler)
        holder.kill()
        holder.wait(timeout=60)
        deadline = time.monotonic() + 5
        while _alive(compiler) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(compiler), "the compiler outlived the process that ran it"
    finally:
        _end(holder, compiler)


@needs_cxx
def test_what_was_built_here_loads_without_a_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_identity
) -> None:
    """Without a compiler, a library built earlier on this host from the same source and
    flags is loaded (verified as ever), and the plugin's cache key is the one computed
    then; what was never built, or was built for another CPU, is the compiler's absence."""
    source = _add_kernel("no compiler")
    built = compile_library(source)
    key = toolchain.cache_key(LANGUAGE, default_flags(), "sdk.plugins.cpu_cpp")
    assert key is not None
    toolchain._cache_key.cache_clear()
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError):
        find_compiler()
    assert toolchain.is_built(
        source, language=LANGUAGE, flags=default_flags(), namespace="cpp", key=("0",)
    )
    assert compile_library(source) == built
    (add,) = compile_and_load(source, ["add"], [3])
    x, y = torch.randn(N), torch.randn(N)
    out = torch.empty(N)
    add(x.data_ptr(), y.data_ptr(), out.data_ptr())
    torch.testing.assert_close(out, x + y)
    assert toolchain.cache_key(LANGUAGE, default_flags(), "sdk.plugins.cpu_cpp") == key
    with pytest.raises(FileNotFoundError, match="CXX"):
        compile_library(_add_kernel("never built"))
    assert toolchain.cache_key(LANGUAGE, ("-O0",), "sdk.plugins.cpu_cpp") is None
    # another CPU (a home directory shared with another machine): nothing is loaded
    monkeypatch.setattr(toolchain, "_host_cpu", lambda: "another CPU")
    toolchain._cache_key.cache_clear()
    with pytest.raises(FileNotFoundError, match="CXX"):
        compile_library(source)
    assert toolchain.cache_key(LANGUAGE, default_flags(), "sdk.plugins.cpu_cpp") is None
