"""The native runner: built once per machine, then every compiled program's steps run in it.

``core/runner.cpp`` is compiled by the system C++ compiler (:mod:`sdk.toolchain`, with its
time limit and verified cache) against the installed torch's headers and libraries, into a
Python extension module kept in the per-user cache (``$SDK_RUNNER_DIR``, else the cache
root's ``runner/``), keyed by the source, the compiler and its flags, torch's version and the
SDK's. The first build prints one progress line; a machine where it cannot be built (no
compiler, no headers) gets one warning naming the cause, and every program runs through its
Python form. Never one build per graph.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import textwrap
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from sdk import _config as config

from . import isa
from .steps import check

_MODULE_NAME = "_sdk_runner"
_lock = threading.Lock()
_state: dict[str, Any] = {}


def _call_c() -> str:
    """``call_c``: one direct call per arity (pointers and int64 sizes travel in the same
    registers on the 64-bit ABIs the toolchain builds for)."""
    lines = ["int64_t call_c(void* f, const I* a, size_t n, bool checked) {", "  switch (n) {"]
    for n in range(isa.MAX_LAUNCH_ARGS + 1):
        params = ", ".join(["I"] * n)
        args = ", ".join(f"a[{i}]" for i in range(n))
        lines += [
            f"    case {n}:",
            f"      if (checked) return reinterpret_cast<int64_t (*)({params})>(f)({args});",
            f"      reinterpret_cast<void (*)({params})>(f)({args});",
            "      return 0;",
        ]
    lines += ["  }", '  throw std::invalid_argument("sdk runner: too many launch arguments");']
    return "\n".join(["namespace {", *lines, "}", "}  // namespace"])


def isa_header() -> str:
    """The runner's C++ header of the program ISA (core/isa.py): the opcode and argument
    enums, the version, the launch-argument cap, and each opcode's field layout (kinds,
    names, positions), which the runner's decoder and its verifier read."""
    width = max(len(fields) for rows in _layouts().values() for _, fields, _ in rows)
    lines = [
        "// ---- the program ISA: generated from core/isa.py by core/native.py's isa_header ----",
        "namespace isa {",
        f"constexpr int kVersion = {isa.VERSION};",
        f"constexpr int kMaxLaunchArgs = {isa.MAX_LAUNCH_ARGS};",
        *_enum("Opcode", [(op.name, op.number, _signature(op), op.doc) for op in isa.OPCODES]),
        "// CALL's arguments (a tuple each: the kind, then its fields)",
        *_enum("ArgKind", [(v.name, v.tag, _signature(v), v.doc) for v in isa.ARG_KINDS]),
        "// RETURN's items (a tuple each: the kind, then its fields)",
        *_enum(
            "ItemKind", [(f"ITEM_{v.name}", v.tag, _signature(v), v.doc) for v in isa.ITEM_KINDS]
        ),
        "// EXPR's terms (a tuple each: the kind, then its fields), in postfix order",
        *_enum(
            "TermKind", [(f"TERM_{v.name}", v.tag, _signature(v), v.doc) for v in isa.TERM_KINDS]
        ),
        "// how many values each term pops off the stack (each pushes one)",
        "constexpr int kTermPops[] = {"
        + ", ".join(str(v.pops) for v in sorted(isa.TERM_KINDS))
        + "};",
        "// CALL_PY's output specs (a tuple each: the kind, then its fields)",
        *_enum(
            "SpecKind", [(f"SPEC_{v.name}", v.tag, _signature(v), v.doc) for v in isa.SPEC_KINDS]
        ),
        "// what a field holds (core/isa.py says what each is, and what the verifiers check)",
        "enum Kind : int {",
        *(f"  {_kind(k)} = {i}," for i, k in enumerate(isa.KINDS)),
        "};",
        f"constexpr int kMaxFields = {width};",
        "// one opcode's (or tagged tuple's) fields after its tag: their kinds, their names, and",
        "// whether the field counts towards kMaxLaunchArgs",
        "struct Layout {",
        "  const char* name;",
        "  int n;",
        "  Kind kinds[kMaxFields];",
        "  const char* fields[kMaxFields];",
        "  bool capped[kMaxFields];",
        "};",
    ]
    for table, layouts in _layouts().items():
        lines.append(f"constexpr Layout {table}[] = {{")
        lines += [f"    {_layout(name, fields, capped)}," for name, fields, capped in layouts]
        lines.append("};")
    lines.append("// each field's position in its step's tuple (the opcode is at 0)")
    lines.append("namespace field {")
    for op in isa.OPCODES:
        where = ", ".join(f"{f.name} = {i}" for i, f in enumerate(op.fields, 1))
        lines.append(f"namespace {op.name} {{ constexpr int {where}; }}")
    lines += ["}  // namespace field", "}  // namespace isa", "// ---- (end of the ISA) ----"]
    return "\n".join(lines)


def _layouts() -> dict[str, list[tuple[str, tuple[isa.Field, ...], tuple[str, ...]]]]:
    """The layout tables, each indexed by number: kOps by opcode, kArgs and kItems by tag."""
    tables = {
        "kOps": [(op.number, op.text, op.fields, op.capped) for op in isa.OPCODES],
        "kArgs": [(v.tag, v.name, v.fields, ()) for v in isa.ARG_KINDS],
        "kItems": [(v.tag, v.name, v.fields, ()) for v in isa.ITEM_KINDS],
        "kTerms": [(v.tag, v.name, v.fields, ()) for v in isa.TERM_KINDS],
        "kSpecs": [(v.tag, v.name, v.fields, ()) for v in isa.SPEC_KINDS],
    }
    out = {}
    for table, rows in tables.items():
        rows = sorted(rows)
        if [r[0] for r in rows] != list(range(len(rows))):
            raise ValueError(f"core/isa.py: the numbers of {table} are not 0, 1, 2, ...")
        out[table] = [r[1:] for r in rows]
    return out


def _enum(name: str, members: list[tuple[str, int, str, str]]) -> list[str]:
    """An enum, each member with its fields and what it does as a comment."""
    lines = [f"enum {name} : int {{"]
    for member, number, signature, doc in members:
        lines += [f"  // {line}" for line in textwrap.wrap(f"{signature}: {doc}", 94)]
        lines.append(f"  {member} = {number},")
    return [*lines, "};"]


def _signature(op: isa.Opcode | isa.Variant) -> str:
    return "(" + ", ".join(f.name for f in op.fields) + ")"


def _kind(kind: str) -> str:
    return "K_" + kind.upper().replace(" ", "_")


def _layout(name: str, fields: tuple[isa.Field, ...], capped: tuple[str, ...]) -> str:
    def braced(items: list[str]) -> str:
        return "{" + ", ".join(items) + "}"

    return braced(
        [
            f'"{name}"',
            str(len(fields)),
            braced([_kind(f.kind) for f in fields]),
            braced([f'"{f.name}"' for f in fields]),
            braced(["true" if f.name in capped else "false" for f in fields]),
        ]
    )


def source() -> str:
    text = (Path(__file__).with_name("runner.cpp")).read_text()
    return text.replace("@ISA@", isa_header()).replace("@CALL_C@", _call_c())


def _flags() -> tuple[str, ...]:
    # torch's headers and libraries where torch.utils.cpp_extension finds them (its
    # include_paths() and library_paths()), without importing it: that module imports
    # setuptools, about a second of a warm process's first call on a GPU machine
    root = os.path.dirname(os.path.abspath(torch.__file__))
    include = [
        f"-I{os.path.join(root, 'include')}",
        f"-I{os.path.join(root, 'include', 'torch', 'csrc', 'api', 'include')}",
        f"-I{sysconfig.get_paths()['include']}",
    ]
    lib = os.path.join(root, "lib")
    abi = int(torch.compiled_with_cxx11_abi())
    return (
        "-O2",
        "-std=c++20",
        "-shared",
        "-fPIC",
        "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-DSDK_RUNNER_MODULE={_MODULE_NAME}",
        *include,
        f"-L{lib}",
        f"-Wl,-rpath,{lib}",
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
    )


def module() -> ModuleType | None:
    """The runner's module, built or loaded once per process; None (after one warning)
    where it cannot be built. A build stopped by a ``BaseException`` that is not an
    ``Exception`` (Ctrl-C's ``KeyboardInterrupt``, ``SystemExit``) is not a failure: it is
    raised, nothing is remembered, and the next call builds again."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        try:
            _state["module"] = _load()
        except Exception as exc:  # noqa: BLE001 - any failure: one warning, the Python path
            _state["module"] = None
            _state["why"] = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                "sdk: the native runner could not be built, so compiled graphs run through "
                f"the step interpreter (slower per call): {str(exc).splitlines()[0][:300]}. "
                "Fix: install a C++ compiler (g++ or clang++; or set CXX) and a torch with "
                "its C++ headers (torch/include), or pass options={'runner': 'python'} to "
                "silence this.",
                RuntimeWarning,
                stacklevel=3,
            )
        return _state["module"]


def build_seconds_since(start: float) -> float:
    """How much of the time since ``start`` (``time.perf_counter()``) went on building the
    runner in this process (once per machine: not a graph's compile time)."""
    built = _state.get("built")
    if built is None:
        return 0.0
    return max(0.0, built[1] - max(built[0], start))


def why_not() -> str | None:
    """Why the runner is not available in this process (None: it is, or not tried yet)."""
    return _state.get("why")


def _load() -> ModuleType:
    """Build (or find the verified build of) the runner, and import it. Called once per
    process, by :func:`module`."""
    import sdk
    from sdk import toolchain

    text = source()
    key = ("sdk-runner", torch.__version__, sdk.__version__, sys.version_info[:2])
    # $SDK_RUNNER_DIR is passed as the cache root, never set as SDK_CACHE_DIR in the
    # environment: other threads (a lazy backward compile) and child processes read that
    runner_dir = config.variable("SDK_RUNNER_DIR") or None
    build = dict(language="c++", flags=_flags(), namespace="runner", key=key)
    building = not toolchain.is_built(text, **build, cache_root=runner_dir)
    if building:
        print(
            "sdk: building the native runner (once per machine and torch version; "
            "about a minute)...",
            file=sys.stderr,
            flush=True,
        )
    started = time.perf_counter()
    mod = toolchain.compile_and_load(text, loader=_load_module, **build, cache_root=runner_dir)
    if building:
        _state["built"] = (started, time.perf_counter())
    return mod


def _load_module(path: Path) -> Any:
    loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, str(path))
    spec = importlib.util.spec_from_loader(_MODULE_NAME, loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def program(
    steps: list[tuple],
    n_slots: int,
    mark_writes: Callable[[], None],
    version: int = isa.VERSION,
    n_regs: int = 0,
) -> Any | None:
    """The runner's program for ``steps`` (over ``n_slots`` slots and ``n_regs`` registers),
    written for ISA ``version``, or None without a runner. Checked twice before any step
    runs: by :func:`core.steps.check`, then by the runner's own verifier as it loads the
    program (a ``ValueError`` from either)."""
    mod = module()
    if mod is None:
        return None
    check(steps, n_slots, n_regs)
    return mod.Program(steps, n_slots, mark_writes, version, n_regs)


if __name__ == "__main__":  # python -m sdk.core.native --isa: the generated header
    if sys.argv[1:] != ["--isa"]:
        raise SystemExit("usage: python -m sdk.core.native --isa")
    print(isa_header())
