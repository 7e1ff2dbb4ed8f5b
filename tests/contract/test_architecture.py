"""CONTRIBUTING.md's architecture rules, checked over every module of core/, plugins/, sdk/ and
tools/.

The rules (CONTRIBUTING.md, "Architecture rules"):

* a built-in plugin imports only the public ``sdk`` API: no ``sdk.core``, no other plugin, no
  underscore module or name;
* the contract package (``sdk/``) imports the core only where :data:`CONTRACT_TO_CORE` says:
  inside the functions of its entries (``sdk.backend``, ``sdk.explain``, the CLI), and at
  import only what :data:`CONTRACT_AT_IMPORT` lists, each with why (and only in the seams
  ``test_import_graph.py`` names);
* the tools (``tools/``, installed as ``sdk.tools``) import public ``sdk`` names, and of the
  core only what :data:`TOOLS_TO_CORE` lists;
* private torch APIs (``torch._dynamo``, ``torch._C``, ``torch._ops``, ...) appear only in the
  adapter modules listed in :data:`ADAPTERS`;
* environment variables are read (or set) only in ``sdk/_config.py``;
* the core names no device and no plugin: capabilities are declared by plugins;
* the core's modules import one another without a cycle (``test_import_graph.py``).

and issue 38's size limits over ``core/``, ``sdk/``, ``plugins/`` and ``tools/``: no module over
800 lines, no function over 100 (:func:`oversized`).

The checker reads source with :mod:`ast` (nothing is imported: the whole tree takes well under
a second). Each rule has a self-test that feeds it a violating snippet, so a checker that
stopped seeing a rule would fail here too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("core", "plugins", "sdk", "tools")

#: The modules that may use private torch APIs, each with why.
ADAPTERS = {
    # the first adapter (CONTRIBUTING.md names core/adapters/): Dynamo, AOTAutograd, decompositions, fake tensors,
    # OpOverload types, the OpInfo database; everything else calls its functions
    "core/adapters/torch_private.py",
    # Dynamo's symbolic sizes (SymInts, their ShapeEnv, torch's sympy functions) as the IR's
    # sizes; torch_private re-exports its names
    "core/adapters/sizes.py",
    # the Dynamo/AOTAutograd side of it (aot_compile, Dynamo's counters, its backend registry,
    # what a torch.compile result was compiled with); torch_private re-exports its names
    "core/adapters/dynamo.py",
    # torch's AOTAutograd cache, for warm starts (core.warm)
    "core/adapters/aot_cache.py",
    # run time for wrapper plugins (sdk.runtime): step counters, storages and reference
    # counts of handed-out tensors; torch_private re-exports its names
    "core/adapters/runtime.py",
    # torch's MegaCache (save/load_cache_artifacts): the SDK's entry type, registered by
    # ``import sdk`` (light, unlike the AOTAutograd cache's imports)
    "core/adapters/mega_cache.py",
    # torch's log registry (TORCH_LOGS=sdk): registered by ``import sdk``, before torch parses
    # the variable where it can
    "core/adapters/logs.py",
    # the multi-tensor ops (aten._foreach_*) found in torch's operator registry, and their
    # decompositions; torch_private adds them to the default table
    "core/adapters/foreach.py",
    # Dynamo's registry of backend names (every "sdk:<name>" one), installed by ``import sdk``
    # when Dynamo's registry is imported (core/adapters/imports.py tells it, importing nothing)
    "core/adapters/backend_names.py",
}

#: Where the contract package (sdk/) reaches into the core, through a function-level import
#: (``import sdk`` does not run it): file -> the core modules or names it may import. Only its
#: entries, in the seams ``test_import_graph.CONTRACT_SEAMS`` names (issue 48): ``sdk.backend``
#: and ``sdk.list_plugins`` (sdk/__init__.py), ``sdk.explain`` and the command line. The
#: contract's other modules reach the core through ``sdk._seams``, which the core fills in.
CONTRACT_TO_CORE: dict[str, frozenset[str]] = {
    "sdk/__init__.py": frozenset(
        {"sdk.core.pipeline.Backend", "sdk.core.registry.registry", "sdk.core.warm.populate"}
    ),
    "sdk/explain.py": frozenset(
        {
            "sdk.core.pipeline",
            "sdk.core.records",
            "sdk.core.registry",
            "sdk.core.options",
            "sdk.core.adapters.torch_private",
        }
    ),
    "sdk/cli.py": frozenset(
        {
            "sdk.core.graph_cache",
            "sdk.core.oplist",
            "sdk.core.pipeline.Session",
            "sdk.core.registry.registry",
        }
    ),
}

#: Where the contract package imports the core when it is imported: file -> core modules or
#: names, each with why.
CONTRACT_AT_IMPORT: dict[str, frozenset[str]] = {
    # registered with torch by ``import sdk`` (at once where torch is imported, else right
    # after ``import torch``: core/adapters/imports.py): TORCH_LOGS=sdk before torch parses the
    # variable; the SDK's MegaCache artifact type before the user's load_cache_artifacts() (a
    # blob with a type torch does not know is dropped whole; docs/user-guide.md: "import sdk
    # before loading");
    # the core's side of sdk._seams, installed before any module of the contract needs it;
    # and every "sdk:<name>" a backend name of Dynamo's (a typo gets the SDK's error, naming
    # the installed plugins), told to Dynamo's registry when it is imported
    "sdk/__init__.py": frozenset(
        {
            "sdk.core.adapters.backend_names",
            "sdk.core.adapters.logs",
            "sdk.core.adapters.mega_cache",
            "sdk.core.seams",
        }
    ),
}

#: What the tools (tools/, installed as sdk.tools) import of the core, each with why. Empty:
#: the benchmarks and the demo reach the core only through public names (``sdk.reset``,
#: ``sdk.collect_reports``, ``sdk.cache.fresh_directories``, ``sdk.cache.cold_compiles``,
#: ``sdk.plugin.environment_variable``), which a user timing compiles wants as well.
TOOLS_TO_CORE: dict[str, frozenset[str]] = {}


#: The one module that reads the environment (CONTRIBUTING.md: "environment variables are read
#: only in sdk/_config.py"), in the contract package, which the core and the contract's own
#: modules both import; plugins/ go through ``sdk.plugin.environment_variable``.
CONFIG = "sdk/_config.py"

#: torch's device types (``torch.device(...).type``) and the words a backend is called by.
DEVICES = frozenset(
    {
        "cpu",
        "cuda",
        "gpu",
        "hip",
        "rocm",
        "mps",
        "xpu",
        "xla",
        "hpu",
        "mtia",
        "npu",
        "tpu",
        "ipu",
        "privateuseone",
        "meta_gpu",
        "triton",
        "openmp",
        "cudnn",
        "cublas",
        "nccl",
    }
)
#: The built-in plugins; the core names none of them.
PLUGINS = frozenset({"cpu_cpp", "cuda_triton", "cudagraphs"})
#: torch submodules that name a device (``torch.cuda.is_available()`` in the core decides for
#: a plugin).
DEVICE_MODULES = frozenset({"cuda", "mps", "xpu", "mtia", "npu", "hpu"})


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.what}"


def _private(segment: str) -> bool:
    """An underscore name that is not a dunder (``_dynamo``, not ``__version__``)."""
    return segment.startswith("_") and not (segment.startswith("__") and segment.endswith("__"))


def _dotted(node: ast.AST) -> list[str] | None:
    """``torch._C._foo`` -> ``["torch", "_C", "_foo"]``; None unless a chain of names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _private_torch(parts: list[str]) -> bool:
    """A module path or attribute chain into a private part of torch. ``torch.ops.aten._foo``
    is an ATen operator's name, not a private Python API."""
    if not parts or parts[0] != "torch" or parts[1:2] == ["ops"]:
        return False
    return any(_private(p) for p in parts[1:])


def _device_module(parts: list[str]) -> bool:
    """``torch.cuda``, ``torch.backends.cudnn``, ...: a torch module of one device (the head
    of the chain only)."""
    if parts[:2] == ["torch", "backends"]:
        return len(parts) == 3 and parts[2] in DEVICE_MODULES | {"cudnn", "mkldnn", "openmp"}
    return len(parts) == 2 and parts[0] == "torch" and parts[1] in DEVICE_MODULES


def _module_of(rel: str) -> list[str]:
    """The installed package of a source file: plugins/x/y.py -> sdk.plugins.x."""
    parts = rel.removesuffix(".py").split("/")
    top = {
        "core": ["sdk", "core"],
        "plugins": ["sdk", "plugins"],
        "sdk": ["sdk"],
        "tools": ["sdk", "tools"],
    }[parts[0]]
    return top + parts[1:-1]


def _imported_modules(node: ast.Import | ast.ImportFrom, rel: str) -> list[tuple[list[str], str]]:
    """(absolute module path, imported name or "") for each module an import statement names."""
    if isinstance(node, ast.Import):
        return [(a.name.split("."), "") for a in node.names]
    if node.level:
        package = _module_of(rel)
        base = package[: len(package) - node.level + 1]
    else:
        base = []
    mod = base + (node.module.split(".") if node.module else [])
    return [(mod, a.name) for a in node.names]


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants: prose may name a device; code may not."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _plugin_imports(node: ast.AST, rel: str) -> list[str]:
    """Rule "plugin": what a plugin module imports beyond the public sdk API."""
    own = _module_of(rel)[:3]  # sdk.plugins.<name>
    bad = []
    for mod, name in _imported_modules(node, rel):
        full = mod + ([name] if name and name != "*" else [])
        if mod[:1] in (["core"], ["plugins"]):
            bad.append(f"imports {'.'.join(mod)} by its source path; import sdk")
        elif mod[:2] == ["sdk", "core"] or full[:2] == ["sdk", "core"]:
            bad.append(f"imports {'.'.join(full)}: sdk.core is not public API")
        elif full[:2] == ["sdk", "plugins"] and len(full) > 2 and full[:3] != own:
            bad.append(f"imports {'.'.join(full)}: another plugin's internals")
        elif mod[:1] == ["sdk"] and any(_private(p) for p in full):
            bad.append(f"imports {'.'.join(full)}: an underscore name is not public API")
    return bad


def _in_functions(tree: ast.AST) -> set[int]:
    """ids of the nodes inside a function: an import there runs when the function is called."""
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for n in ast.walk(node)
        if n is not node
    }


def _allowed(full: str, allowed: frozenset[str]) -> bool:
    """``full`` (``sdk.core.pipeline.Backend``) is one of ``allowed`` or inside one of them."""
    return any(full == a or full.startswith(a + ".") for a in allowed)


def _contract_imports(node: ast.AST, rel: str, lazy: bool) -> list[str]:
    """Rule "contract": what an sdk/ module imports of the core beyond the lists."""
    bad = []
    for mod, name in _imported_modules(node, rel):
        full = mod + ([name] if name and name != "*" else [])
        if full[:2] != ["sdk", "core"] and mod[:1] != ["core"]:
            continue
        dotted = ".".join(full)
        if lazy and _allowed(dotted, CONTRACT_TO_CORE.get(rel, frozenset())):
            continue
        if _allowed(dotted, CONTRACT_AT_IMPORT.get(rel, frozenset())):
            continue
        where = "inside a function" if lazy else "at import"
        bad.append(
            f"imports {dotted} {where}: the contract reaches the core only through its "
            "entries (CONTRACT_TO_CORE, function-level) or CONTRACT_AT_IMPORT"
        )
    return bad


def _tools_imports(node: ast.AST, rel: str) -> list[str]:
    """Rule "tools": what a tools/ module imports beyond public sdk names and TOOLS_TO_CORE."""
    bad = []
    for mod, name in _imported_modules(node, rel):
        full = mod + ([name] if name and name != "*" else [])
        dotted = ".".join(full)
        if mod[:1] in (["core"], ["plugins"], ["sdk_tools"]):
            bad.append(f"imports {'.'.join(mod)} by its source path; import sdk")
        elif full[:2] == ["sdk", "core"]:
            if not _allowed(dotted, TOOLS_TO_CORE.get(rel, frozenset())):
                bad.append(f"imports {dotted}: not in TOOLS_TO_CORE (tools import public names)")
        elif full[:2] == ["sdk", "plugins"] and len(full) > 2:
            bad.append(f"imports {dotted}: a plugin's internals")
        elif full[:1] == ["sdk"] and full[1:2] != ["tools"] and any(_private(p) for p in full):
            bad.append(f"imports {dotted}: an underscore name is not public API")
    return bad


def check_source(rel: str, source: str) -> list[Violation]:
    """Every rule that ``source``, the file at ``rel`` (e.g. ``plugins/x/y.py``), breaks."""
    tree = ast.parse(source, filename=rel)
    out: list[Violation] = []
    in_plugin = rel.startswith("plugins/")
    in_core = rel.startswith("core/")
    in_contract = rel.startswith("sdk/")
    in_tools = rel.startswith("tools/")
    docs = _docstrings(tree) if in_core else set()
    lazy = _in_functions(tree) if in_contract else set()

    def add(node: ast.AST, rule: str, what: str) -> None:
        out.append(Violation(rel, getattr(node, "lineno", 0), rule, what))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if in_plugin:
                for what in _plugin_imports(node, rel):
                    add(node, "plugin", what)
            if in_contract:
                for what in _contract_imports(node, rel, id(node) in lazy):
                    add(node, "contract", what)
            if in_tools:
                for what in _tools_imports(node, rel):
                    add(node, "tools", what)
            for mod, name in _imported_modules(node, rel):
                full = mod + ([name] if name else [])
                if rel not in ADAPTERS and _private_torch(full):
                    add(node, "torch-private", f"imports {'.'.join(full)}")
                if rel != CONFIG and mod == ["os"] and name in ("environ", "getenv", "putenv"):
                    add(node, "environ", f"imports os.{name}")
        if isinstance(node, ast.Attribute):
            parts = _dotted(node)
            if parts is None:
                continue
            # each chain once, at its first private segment: torch._C._foo is one finding
            first = _private(node.attr) and not any(_private(p) for p in parts[1:-1])
            if rel not in ADAPTERS and first and _private_torch(parts):
                add(node, "torch-private", f"uses {'.'.join(parts)}")
            if (
                rel != CONFIG
                and parts[:1] == ["os"]
                and len(parts) == 2
                and parts[1] in ("environ", "environb", "getenv", "putenv", "unsetenv")
            ):
                add(node, "environ", f"uses {'.'.join(parts)}")
            if (
                in_plugin
                and parts[0] == "sdk"
                and len(parts) == 2
                and (parts[1] in ("core", "plugins") or _private(parts[1]))
            ):
                add(node, "plugin", f"uses {'.'.join(parts)}: not public API")
            if (in_contract or in_tools) and parts == ["sdk", "core"]:
                rule = "contract" if in_contract else "tools"
                add(node, rule, "uses sdk.core by attribute: import what the lists allow")
            if in_core and _device_module(parts):
                add(node, "device", f"uses {'.'.join(parts)}: the core names no device")
        elif in_core and isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docs:
                continue
            text = node.value.strip().lower()
            if text in DEVICES or text in PLUGINS:
                add(node, "device", f"names {node.value!r}: the core names no device or plugin")
            elif any(re.search(rf"(?<![\w-]){p}(?![\w-])", node.value) for p in PLUGINS):
                add(node, "device", f"names a plugin in {node.value!r}")
        elif in_core and isinstance(node, ast.Name) and node.id in PLUGINS:
            add(node, "device", f"names the plugin {node.id}")
    return out


def _sources() -> list[Path]:
    return sorted(p for top in CHECKED for p in (ROOT / top).rglob("*.py"))


def test_the_tree_keeps_the_architecture_rules():
    found = []
    for path in _sources():
        found += check_source(path.relative_to(ROOT).as_posix(), path.read_text())
    assert not found, "architecture rules broken:\n" + "\n".join(map(str, found))
    assert len(_sources()) > 50  # it did read the tree


def test_the_adapters_exist():
    for rel in ADAPTERS | {CONFIG}:
        assert (ROOT / rel).is_file(), rel


def test_every_listed_core_import_is_still_made():
    """The lists shrink as the debt is paid: an entry no file imports any more goes."""
    made: dict[str, set[str]] = {}
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for mod, name in _imported_modules(node, rel):
                    full = mod + ([name] if name and name != "*" else [])
                    made.setdefault(rel, set()).add(".".join(full))
    stale = [
        f"{rel}: {entry}"
        for table in (CONTRACT_TO_CORE, CONTRACT_AT_IMPORT, TOOLS_TO_CORE)
        for rel, entries in table.items()
        for entry in entries
        if not any(_allowed(m, frozenset({entry})) for m in made.get(rel, ()))
    ]
    assert not stale, "listed core imports no longer made (remove them): " + ", ".join(stale)


# -- each rule, shown to fail ----------------------------------------------------------------


def _rules(rel: str, source: str) -> list[str]:
    return [v.rule for v in check_source(rel, source)]


@pytest.mark.parametrize(
    "source",
    [
        "from sdk.core.registry import registry",
        "import sdk.core.pipeline",
        "from sdk.core import pipeline",
        "from sdk import core",
        "import sdk\nsdk.core.pipeline.Backend",
        "from sdk.plugins.cuda_triton import ops",
        "from sdk.plugins import cuda_triton",
        "from sdk.clike import _private_helper",
        "from sdk._impl import x",
        "from ... import core",
        "from core import lowering",
    ],
)
def test_a_plugin_importing_internals_is_caught(source):
    assert "plugin" in _rules("plugins/cpu_cpp/x.py", source), source


@pytest.mark.parametrize(
    "source",
    [
        "import sdk\nfrom sdk.clike import CTarget\nfrom sdk.ir import Kernel",
        "from . import helpers\nfrom .ops import OPS",
        "from sdk.plugins.cpu_cpp import toolchain",
        "import sdk\nsdk.__version__",
    ],
)
def test_a_plugin_importing_the_public_api_passes(source):
    assert _rules("plugins/cpu_cpp/x.py", source) == [], source


@pytest.mark.parametrize(
    "source",
    [
        "from sdk.core import pipeline",  # at import, in a module with no entry
        "import sdk.core.registry",
        "from sdk import core",
        "import sdk\nsdk.core.pipeline.Backend",
        "def f():\n    from sdk.core.lowering import lowerer\n",  # not among its entries
    ],
)
def test_the_contract_importing_the_core_is_caught(source):
    assert "contract" in _rules("sdk/report.py", source), source


def test_an_entry_imports_the_core_inside_its_functions_only():
    lazy = "def backend():\n    from sdk.core.pipeline import Backend\n"
    assert _rules("sdk/__init__.py", lazy) == []
    assert "contract" in _rules("sdk/__init__.py", "from sdk.core.pipeline import Backend")
    # listed at import: allowed at either level
    assert _rules("sdk/__init__.py", "from sdk.core.adapters import mega_cache") == []


@pytest.mark.parametrize(
    "source",
    [
        "from sdk.core.lowering import lowerer",
        "from sdk.core import pipeline",  # listed for other tools, not this one
        "from sdk.plugins.cpu_cpp import toolchain",
        "from sdk.clike import _private_helper",
        "from sdk._impl import x",
        "from core import config",
        "import sdk\nsdk.core.config",
    ],
)
def test_a_tool_importing_internals_is_caught(source):
    assert "tools" in _rules("tools/bench_kernels.py", source), source


def test_a_tool_importing_public_names_and_its_own_package_passes():
    src = (
        "import sdk\nimport sdk.cache\nfrom sdk.errors import describe\n"
        "from sdk.tools.bench_check import _named\nfrom . import bench_report\n"
    )
    assert _rules("tools/bench_timing.py", src) == []
    assert _rules("tools/bench_timing.py", src + "from sdk.core import config\n") == ["tools"]


@pytest.mark.parametrize(
    "rel", ["core/pipeline.py", "sdk/conformance/__init__.py", "plugins/cpu_cpp/x.py"]
)
@pytest.mark.parametrize(
    "source",
    [
        "import torch._dynamo",
        "from torch._decomp import get_decompositions",
        "from torch import _dynamo",
        "import torch\ntorch._C._foo()",
        "import torch\nisinstance(x, torch._ops.OpOverload)",
        "from torch.testing._internal.common_methods_invocations import op_db",
    ],
)
def test_private_torch_outside_the_adapter_is_caught(rel, source):
    assert "torch-private" in _rules(rel, source), (rel, source)


def test_private_torch_in_the_adapter_and_aten_op_names_pass():
    assert _rules("core/adapters/torch_private.py", "import torch\ntorch._C._foo()") == []
    assert _rules("core/lowering.py", "import torch\ntorch.ops.aten._softmax.default") == []
    assert _rules("core/lowering.py", "import torch\ntorch.__version__") == []


@pytest.mark.parametrize("rel", ["core/registry.py", "sdk/toolchain.py", "plugins/x/y.py"])
@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.environ.get('X')",
        "import os\nos.environ['X'] = '1'",
        "import os\nos.getenv('X')",
        "import os\nos.putenv('X', '1')",
        "from os import environ",
    ],
)
def test_environment_outside_config_is_caught(rel, source):
    assert "environ" in _rules(rel, source), (rel, source)


def test_config_reads_the_environment():
    assert _rules("sdk/_config.py", "import os\nos.environ.get('X')") == []


@pytest.mark.parametrize(
    "source",
    [
        "x = 'cuda'",
        "if device.type == 'cpu': pass",
        "MODES = {'reduce-overhead': {'wrappers': ('cudagraphs',)}}",
        "name = 'sdk:cpu_cpp'",
        "import torch\ntorch.cuda.is_available()",
        "import torch\ntorch.backends.cuda.matmul",
        "cuda_triton.render()",
    ],
)
def test_the_core_naming_a_device_or_plugin_is_caught(source):
    assert "device" in _rules("core/pipeline.py", source), source


def test_a_plugin_or_the_core_in_prose_passes():
    src = '"""Runs on cuda through cudagraphs."""\ndef f():\n    """On the cpu."""\n'
    assert _rules("core/pipeline.py", src) == []
    assert _rules("plugins/cpu_cpp/x.py", "x = 'cpu'") == []


# -- sizes (issue 38) ---------------------------------------------------------------------
# A module a reader can hold and a function a reader can follow: no module over
# MAX_MODULE_LINES, no function (a method, a nested function) over MAX_FUNCTION_LINES. A
# module-level dict or list literal is no function, so a data table counts only towards its
# module's length.

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100
#: the folders whose modules the limits hold for (tools/ where the tree has it)
SIZED = ("core", "sdk", "plugins", "tools")
#: modules allowed over MAX_MODULE_LINES, each with why: a data table only, not code
LONG_MODULES: dict[str, str] = {}
#: functions ("path:Class.method") allowed over MAX_FUNCTION_LINES, each with why: one that is
#: a data table (a literal it returns), not code
LONG_FUNCTIONS: dict[str, str] = {}


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of every function and method in ``tree``, nested ones too."""
    out = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((prefix + node.name, node))
            out += _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            out += _functions(node, f"{prefix}{node.name}.")
        else:
            out += _functions(node, prefix)
    return out


def oversized(
    rel: str,
    source: str,
    *,
    long_modules: dict[str, str] | None = None,
    long_functions: dict[str, str] | None = None,
) -> list[str]:
    """What in ``source`` (the file at ``rel``) is over the limits and not allowed to be."""
    long_modules = LONG_MODULES if long_modules is None else long_modules
    long_functions = LONG_FUNCTIONS if long_functions is None else long_functions
    out = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES and rel not in long_modules:
        out.append(f"{rel}: {lines} lines (at most {MAX_MODULE_LINES}): split the module")
    for name, node in _functions(ast.parse(source, filename=rel)):
        n = node.end_lineno - node.lineno + 1
        if n > MAX_FUNCTION_LINES and f"{rel}:{name}" not in long_functions:
            out.append(
                f"{rel}:{node.lineno}: {name} is {n} lines (at most {MAX_FUNCTION_LINES}): "
                "extract named helpers"
            )
    return out


def _sized_sources() -> dict[str, str]:
    return {
        p.relative_to(ROOT).as_posix(): p.read_text()
        for top in SIZED
        if (ROOT / top).is_dir()
        for p in sorted((ROOT / top).rglob("*.py"))
    }


def test_no_module_or_function_is_over_the_size_limits():
    sources = _sized_sources()
    found = [what for rel, source in sources.items() for what in oversized(rel, source)]
    assert not found, "over the size limits (issue 38):\n" + "\n".join(found)
    assert len(sources) > 50  # it did read the tree


def test_the_size_allow_lists_name_only_what_needs_them():
    """An allowed module or function that is gone, or back within the limits, leaves the list."""
    sources = _sized_sources()
    for rel in LONG_MODULES:
        assert rel in sources and len(sources[rel].splitlines()) > MAX_MODULE_LINES, rel
    for key in LONG_FUNCTIONS:
        rel, _, name = key.partition(":")
        sizes = {
            q: n.end_lineno - n.lineno + 1 for q, n in _functions(ast.parse(sources.get(rel, "")))
        }
        assert sizes.get(name, 0) > MAX_FUNCTION_LINES, key


def _function_of(lines: int, name: str = "f", indent: str = "") -> str:
    """A function of ``lines`` lines in all (its ``def`` line included)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def test_a_long_function_method_or_module_is_caught():
    assert oversized("core/x.py", _function_of(MAX_FUNCTION_LINES)) == []
    (found,) = oversized("core/x.py", "import os\n\n" + _function_of(MAX_FUNCTION_LINES + 1))
    assert found.startswith("core/x.py:3: f is 101 lines"), found
    method = "class C:\n" + _function_of(MAX_FUNCTION_LINES + 1, "m", "    ")
    assert [f.split(": ")[1] for f in oversized("sdk/y.py", method)] == [
        "C.m is 101 lines (at most 100)"
    ]
    nested = "def outer():\n" + _function_of(MAX_FUNCTION_LINES + 1, "inner", "    ")
    names = {f.split(": ")[1].split(" ")[0] for f in oversized("plugins/p/z.py", nested)}
    assert names == {"outer", "outer.inner"}
    allowed = oversized("core/x.py", method, long_functions={"core/x.py:C.m": "a table"})
    assert allowed == []
    module = "\n".join(f"x{i} = {i}" for i in range(MAX_MODULE_LINES + 1)) + "\n"
    assert oversized("tools/t.py", module) == [
        f"tools/t.py: {MAX_MODULE_LINES + 1} lines (at most {MAX_MODULE_LINES}): split the module"
    ]
    assert oversized("tools/t.py", module, long_modules={"tools/t.py": "a table"}) == []


def test_a_long_data_table_is_no_function():
    table = "TABLE = {\n" + "".join(f"    'k{i}': {i},\n" for i in range(300)) + "}\n"
    assert oversized("core/x.py", table) == []


# --------------------------------------------------------------------------- tests' own rule
# pytest's MonkeyPatch must not patch an option of a torch config module (torch._dynamo.config,
# torch._functorch.config, torch._inductor.config, ...): pytest 9.2's undo deletes the option
# (the module's attributes are not in its __dict__), and every later test in that process
# then fails. torch's own ``config.patch`` puts the value back.

#: A torch config module: ``torch._inductor.config``, ``torch.fx.experimental._config``.
_TORCH_CONFIG = re.compile(r"torch(\.\w+)*\._?config")


def _torch_config_aliases(tree: ast.AST) -> set[str]:
    """The names a file binds to torch config modules (``import ... as x``, ``from ...
    import config``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _TORCH_CONFIG.fullmatch(alias.name):
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if _TORCH_CONFIG.fullmatch(f"{node.module}.{alias.name}"):
                    names.add(alias.asname or alias.name)
    return names


def monkeypatched_torch_config(source: str) -> list[int]:
    """Lines where a MonkeyPatch-like ``x.setattr`` / ``x.delattr`` targets a torch config
    module: through a name bound to it, its dotted path, or a ``"torch...config.opt"`` string."""
    tree = ast.parse(source)
    aliases = _torch_config_aliases(tree)
    lines = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setattr", "delattr")
            and node.args
        ):
            continue
        target = node.args[0]
        parts = _dotted(target)
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            hit = _TORCH_CONFIG.fullmatch(target.value.rpartition(".")[0]) is not None
        elif parts is not None:
            hit = ".".join(parts) in aliases or _TORCH_CONFIG.fullmatch(".".join(parts))
        else:
            hit = False
        if hit:
            lines.append(node.lineno)
    return lines


def test_no_test_monkeypatches_a_torch_config_module():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line in monkeypatched_torch_config(path.read_text())
    ]
    assert not found, (
        "pytest's monkeypatch on a torch config option (its undo deletes the option under "
        "pytest 9.2); use the module's own `with config.patch(name=value):` instead: "
        + ", ".join(found)
    )


@pytest.mark.parametrize(
    "source",
    [
        "import torch._functorch.config as fc\ndef t(mp):\n"
        "    mp.setattr(fc, 'enable_autograd_cache', False)\n",
        "from torch._inductor import config\ndef t(monkeypatch):\n"
        "    monkeypatch.setattr(config, 'fx_graph_cache', False)\n",
        "import torch\ndef t(monkeypatch):\n"
        "    monkeypatch.setattr(torch._dynamo.config, 'cache_size_limit', 1)\n",
        "def t(monkeypatch):\n"
        "    monkeypatch.setattr('torch._inductor.config.fx_graph_cache', False)\n",
        "from torch._dynamo import config as dc\ndef t(monkeypatch):\n"
        "    monkeypatch.delattr(dc, 'suppress_errors')\n",
    ],
)
def test_monkeypatching_a_torch_config_module_is_caught(source):
    assert monkeypatched_torch_config(source) == [3 if source.startswith(("import", "from")) else 2]


def test_config_patch_and_other_monkeypatching_pass():
    source = (
        "import torch._inductor.config as ic\nfrom sdk.core import config\n"
        "def t(monkeypatch):\n"
        "    with ic.patch(fx_graph_cache=False):\n"
        "        monkeypatch.setattr(config, 'x', 1)\n"
        "        monkeypatch.setattr('sdk.core.config.y', 2)\n"
        "        setattr(ic, 'fx_graph_cache', True)\n"
    )
    assert monkeypatched_torch_config(source) == []
