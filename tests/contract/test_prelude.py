"""A plugin's prelude (the includes and helpers every unit starts with), precompiled once by
sdk.toolchain (``compile_library(..., prelude=...)``, :mod:`sdk._prelude`) and used by each
later unit; a precompiled file that is not what was built is never used."""

from __future__ import annotations

import collections
import ctypes
import shlex
from pathlib import Path

import pytest
import torch

from sdk import _prelude, toolchain
from sdk._diskcache import own_name
from sdk.plugins.cpu_cpp import render
from sdk.plugins.cpu_cpp.toolchain import LANGUAGE, compile_library

PRELUDE = render.TARGET.prelude


def _compiler() -> str | None:
    try:
        return toolchain.find_compiler(LANGUAGE)
    except FileNotFoundError:
        return None


pytestmark = pytest.mark.skipif(_compiler() is None, reason="no C++ compiler")


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own, and ``$CXX`` the real compiler behind a script that logs
    each command line and turns a precompiled header the compiler cannot use into an error
    (``-Werror=invalid-pch``): a unit compiled against an unused prelude fails here."""
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "runs.log"
    script = tmp_path / "cxx"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {shlex.quote(str(log))}\n'
        'case "$*" in *-include*) set -- "$@" -Winvalid-pch -Werror=invalid-pch ;; esac\n'
        f'exec {shlex.quote(_compiler())} "$@"\n'
    )
    script.chmod(0o700)
    monkeypatch.setenv("CXX", str(script))
    monkeypatch.setattr(_prelude, "PRECOMPILE_AT", 1)  # (the first unit precompiles)
    return log


def _kernel(name: str, value: float) -> str:
    # sdk_max and expf come from the prelude (its helpers and <cmath>)
    return f'extern "C" void {name}(float* x) {{ x[0] = sdk_max(x[1], {value}f) + expf(x[2]); }}\n'


def _call(path: Path, name: str) -> float:
    fn = getattr(ctypes.CDLL(str(path)), name)
    x = torch.tensor([0.0, -3.0, 1.0])
    fn(ctypes.c_void_p(x.data_ptr()))
    return x[0].item()


def _runs(log: Path) -> tuple[int, int, int]:
    """(precompiles, units against the precompiled prelude, whole units) in the log (the
    compiler's identity queries, ``--version`` and ``-march=native -v -E``, left out)."""
    lines = [
        ln for ln in log.read_text().splitlines() if "--version" not in ln and " -E " not in ln
    ]
    headers = sum("-x c++-header" in ln for ln in lines)
    against = sum("-include" in ln for ln in lines)
    return headers, against, len(lines) - headers - against


def test_the_fourth_unit_precompiles_and_later_processes_use_it_at_once(
    runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_prelude, "PRECOMPILE_AT", 4)
    values = [1.0, 2.0, -5.0, 0.5, -1.0]
    paths = [
        compile_library(PRELUDE + _kernel(f"k{i}", v), prelude=PRELUDE)
        for i, v in enumerate(values)
    ]
    for i, (path, v) in enumerate(zip(paths, values)):
        assert _call(path, f"k{i}") == pytest.approx(max(-3.0, v) + torch.e.__float__())
    assert _runs(runs) == (1, 2, 3), runs.read_text()
    built = [p.name for p in paths[0].parent.iterdir() if p.name.endswith((".gch", ".pch"))]
    assert len(built) == 1 and own_name(built[0]), built  # (`sdk cache clear` removes it)
    # a process that has built no unit yet finds it in the cache
    monkeypatch.setattr(_prelude, "_needed", collections.Counter())
    compile_library(PRELUDE + _kernel("k5", 3.0), prelude=PRELUDE)
    assert _runs(runs)[:2] == (1, 3), runs.read_text()


def test_the_same_library_with_or_without_the_prelude_precompiled(runs: Path) -> None:
    source = PRELUDE + _kernel("k", 0.5)
    with_it = compile_library(source, prelude=PRELUDE)
    assert compile_library(source) == with_it  # one source, one library: a cache hit
    assert "-include" in runs.read_text()
    other = compile_library(PRELUDE + _kernel("k", 0.75))  # no prelude: the whole unit
    assert _call(with_it, "k") == pytest.approx(0.5 + torch.e.__float__())
    assert _call(other, "k") == pytest.approx(0.75 + torch.e.__float__())


def test_a_changed_precompiled_prelude_is_built_again_not_used(runs: Path) -> None:
    first = compile_library(PRELUDE + _kernel("k", 1.0), prelude=PRELUDE)
    (built,) = [p for p in first.parent.iterdir() if p.name.endswith((".gch", ".pch"))]
    data = bytearray(built.read_bytes())
    data[len(data) // 2] ^= 0x10
    built.write_bytes(bytes(data))
    second = compile_library(PRELUDE + _kernel("k", 3.0), prelude=PRELUDE)
    assert _call(second, "k") == pytest.approx(3.0 + torch.e.__float__())
    assert _runs(runs)[0] == 2, runs.read_text()  # precompiled again
    assert built.read_bytes() != bytes(data)


def test_a_process_reads_and_hashes_the_precompiled_prelude_once(
    runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each unit hard-links the precompiled prelude into its build directory (which changes
    the file's ctime); the process checks the file against its digest once, not per unit."""
    reads: list[Path] = []
    read = _prelude.read_regular

    def counted(path):
        reads.append(Path(path))
        return read(path)

    monkeypatch.setattr(_prelude, "read_regular", counted)
    monkeypatch.setattr(_prelude, "_checked", set())
    for i in range(3):
        path = compile_library(PRELUDE + _kernel(f"k{i}", float(i)), prelude=PRELUDE)
        assert _call(path, f"k{i}") == pytest.approx(max(-3.0, i) + torch.e.__float__())
    assert _runs(runs) == (1, 3, 0), runs.read_text()
    assert len(reads) == 1, reads


def test_a_compiler_error_names_the_line_of_the_whole_source(runs: Path) -> None:
    source = PRELUDE + 'extern "C" void k(float* x) {\n  x[0] = not_declared_anywhere;\n}\n'
    with pytest.raises(toolchain.CompileError) as err:
        compile_library(source, prelude=PRELUDE)
    message = str(err.value)
    line = source.splitlines().index("  x[0] = not_declared_anywhere;") + 1
    full = message.split("full source: ")[1].split()[0]
    assert f"{Path(full).name}:{line}:" in message.splitlines()[0], message[:500]
    assert Path(full).read_text() == source


def test_a_compiler_that_cannot_precompile_builds_whole_units(
    runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed precompile is not an error, and is not tried again by the process: each unit
    is compiled whole."""
    script = tmp_path / "cxx-no-headers"
    logged = _compiler()  # (the fixture's script: it logs, then runs the compiler)
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in *-x\\ c++-header*)\n'
        f'  echo "$*" >> {shlex.quote(str(runs))}; echo "no precompiled headers" >&2; exit 1 ;;\n'
        "esac\n"
        f'exec {shlex.quote(logged)} "$@"\n'
    )
    script.chmod(0o700)
    monkeypatch.setenv("CXX", str(script))
    for i, v in enumerate([1.0, 2.0, 4.0]):
        path = compile_library(PRELUDE + _kernel(f"k{i}", v), prelude=PRELUDE)
        assert _call(path, f"k{i}") == pytest.approx(v + torch.e.__float__())
    assert _runs(runs) == (1, 0, 3), runs.read_text()
