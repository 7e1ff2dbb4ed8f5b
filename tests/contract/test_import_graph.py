"""The import graph of ``core/`` and ``sdk/`` (CONTRIBUTING.md, "Architecture rules"; issue 48):

* the core's modules import one another without a cycle, an import inside a function
  included (deferring an import does not remove the dependency);
* the core's and the contract's modules import one another without a cycle at module level:
  a statement that runs when the module is imported, or one under ``if TYPE_CHECKING:``
  (two modules whose types name each other cannot be read or moved apart either: the shared
  piece belongs in a module both import). The contract's entries (``sdk.backend``, ...)
  import the core inside their functions, and the core imports the contract: those cycles
  are the design, not module-level ones;
* the contract reaches the core only at a few named seams (:data:`CONTRACT_SEAMS`, at most
  :data:`MAX_SEAMS`): no other file of ``sdk/`` imports ``sdk.core``, however spelt. The
  contract's other modules need the core only through ``sdk._seams``, interfaces the core
  fills in when ``import sdk`` imports it.

Read with :mod:`ast`, as ``test_architecture.py`` reads the tree; each check has a
self-test that feeds it a violating snippet.
"""

from __future__ import annotations

import ast

import pytest

from tests.contract.test_architecture import (
    CONTRACT_AT_IMPORT,
    CONTRACT_TO_CORE,
    ROOT,
    _dotted,
    _imported_modules,
    _in_functions,
    _module_of,
)

#: The files of the contract package (sdk/) that import the core, each with why: its entries.
#: A file not named here that imports ``sdk.core`` fails :func:`test_the_contract_reaches_the_core_only_at_its_seams`.
CONTRACT_SEAMS: dict[str, str] = {
    "sdk/__init__.py": "``import sdk`` installs the core's side of sdk._seams and registers "
    "with torch's logs and MegaCache; sdk.backend and sdk.list_plugins",
    "sdk/explain.py": "sdk.explain, sdk.collect_reports and sdk.reset: what the core compiled",
    "sdk/cli.py": "the command line (``python -m sdk``): ``ops``, ``cache``",
}
#: issue 48: the contract depends on the core at no more seams than this
MAX_SEAMS = 3


def _module_name(rel: str) -> str:
    """The installed module of a source file: core/ir/index.py -> sdk.core.ir.index."""
    stem = rel.removesuffix(".py").rsplit("/", 1)[-1]
    return ".".join(_module_of(rel) + ([] if stem == "__init__" else [stem]))


def import_graph(sources: dict[str, str], *, in_functions: bool = True) -> dict[str, set[str]]:
    """Module -> the modules among ``sources`` (rel path -> source) it imports.

    An import under ``if TYPE_CHECKING:`` counts (the two modules still name each other); one
    inside a function counts unless ``in_functions`` is False (the module-level graph)."""
    modules = {_module_name(rel): rel for rel in sources}
    graph: dict[str, set[str]] = {}
    for rel, source in sources.items():
        me = _module_name(rel)
        tree = ast.parse(source, filename=rel)
        skip = set() if in_functions else _in_functions(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in skip:
                continue
            for mod, name in _imported_modules(node, rel):
                # `from . import x` names the module x; `from .x import y` names x
                target = ".".join(mod + [name]) if name else ".".join(mod)
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != me:
                    graph.setdefault(me, set()).add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def _tree(*tops: str) -> dict[str, str]:
    return {
        p.relative_to(ROOT).as_posix(): p.read_text()
        for top in tops
        for p in sorted((ROOT / top).rglob("*.py"))
    }


def test_the_core_has_no_import_cycle():
    """Two core modules that import each other (even inside a function, or only for type
    checking) cannot be read, tested or moved apart: the shared piece belongs in a module
    both can import."""
    graph = import_graph(_tree("core"))
    assert "sdk.core.adapters.torch_private" in graph["sdk.core.lowering.lowerer"]  # it reads
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in core/: " + " -> ".join(cycle or [])


def test_the_core_and_the_contract_have_no_module_level_import_cycle():
    graph = import_graph(_tree("core", "sdk"), in_functions=False)
    assert "sdk.subgraph" in graph["sdk.plugin"] and "sdk.plugin" in graph["sdk.core.registry"]
    cycle = find_cycle(graph)
    assert cycle is None, "module-level import cycle in core/ and sdk/: " + " -> ".join(cycle or [])


def test_an_import_cycle_is_caught_even_through_a_function_level_import():
    sources = {
        "core/a.py": "from .b import g\n",
        "core/b.py": "def g():\n    from .a import f\n",
    }
    assert find_cycle(import_graph(sources)) == ["sdk.core.a", "sdk.core.b", "sdk.core.a"]
    # ... and the module-level graph leaves it out
    assert find_cycle(import_graph(sources, in_functions=False)) is None
    sources["core/pkg/__init__.py"] = "from . import c\n"
    sources["core/pkg/c.py"] = "from .. import a\n"
    sources["core/b.py"] = "from .pkg import c\n"
    assert find_cycle(import_graph(sources)) == [
        "sdk.core.a",
        "sdk.core.b",
        "sdk.core.pkg.c",
        "sdk.core.a",
    ]


def test_an_import_only_for_type_checking_is_a_cycle_too():
    """The three cycles issue 48 found were such imports: a package and its children
    (``core/passes``), ``sdk.plugin`` and ``sdk.subgraph``, ``scheduler.builder`` and
    ``scheduler.fusion``."""
    sources = {
        "sdk/plugin.py": "from sdk.subgraph import ClaimGroups\n",
        "sdk/subgraph.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from sdk.plugin import Support\n",
    }
    for in_functions in (True, False):
        assert find_cycle(import_graph(sources, in_functions=in_functions)) == [
            "sdk.plugin",
            "sdk.subgraph",
            "sdk.plugin",
        ]
    package = {
        "core/passes/__init__.py": "from . import products\n",
        "core/passes/products.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from . import Needs\n",
    }
    assert find_cycle(import_graph(package, in_functions=False)) == [
        "sdk.core.passes",
        "sdk.core.passes.products",
        "sdk.core.passes",
    ]


# -- the contract's seams into the core ----------------------------------------------------


def _names_the_core(parts: list[str]) -> bool:
    return parts[:2] == ["sdk", "core"] or parts[:1] == ["core"]


def imports_of_the_core(rel: str, source: str) -> list[int]:
    """Lines where the sdk/ file ``rel`` imports the core: an import statement however spelt
    (``from sdk.core``, ``import sdk.core``, ``from sdk import core``, ``from .core``, at
    module level or in a function), ``sdk.core`` used as an attribute, or
    ``importlib.import_module``/``__import__`` of a ``"sdk.core..."`` string."""
    lines = []
    for node in ast.walk(ast.parse(source, filename=rel)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(
                _names_the_core(mod + ([name] if name and name != "*" else []))
                for mod, name in _imported_modules(node, rel)
            ):
                lines.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and _dotted(node) == ["sdk", "core"]) or (
            isinstance(node, ast.Call)
            and (_dotted(node.func) or [""])[-1] in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and _names_the_core(str(node.args[0].value).split("."))
        ):
            lines.append(node.lineno)
    return lines


def test_the_contract_reaches_the_core_only_at_its_seams():
    found = {
        rel: lines
        for rel, source in _tree("sdk").items()
        if (lines := imports_of_the_core(rel, source))
    }
    assert "sdk/__init__.py" in found  # it did read the tree
    others = {rel: lines for rel, lines in found.items() if rel not in CONTRACT_SEAMS}
    assert not others, (
        "sdk/ files that import the core outside its seams (CONTRACT_SEAMS): "
        + ", ".join(f"{rel} (lines {lines})" for rel, lines in sorted(others.items()))
        + "; define what the contract needs in sdk/, or reach the core through sdk._seams"
    )
    assert len(CONTRACT_SEAMS) <= MAX_SEAMS, sorted(CONTRACT_SEAMS)
    assert set(found) == set(CONTRACT_SEAMS), "a seam that no longer imports the core leaves"
    assert set(CONTRACT_TO_CORE) | set(CONTRACT_AT_IMPORT) <= set(CONTRACT_SEAMS)


@pytest.mark.parametrize(
    "source",
    [
        "from sdk.core import pipeline",
        "def f():\n    from sdk.core.registry import registry\n",
        "import sdk.core.adapters.torch_private",
        "from sdk import core",
        "from ..core import config",  # from sdk/ir/x.py: sdk.core
        "import sdk\nsdk.core.pipeline.Backend",
        "import importlib\nimportlib.import_module('sdk.core.registry')",
        "__import__('sdk.core')",
    ],
)
def test_an_import_of_the_core_is_found_however_spelt(source):
    assert imports_of_the_core("sdk/ir/x.py", source), source


def test_the_contract_importing_itself_is_no_import_of_the_core():
    source = (
        "import sdk\nfrom sdk import _seams, ir\nfrom . import expr\nfrom sdk.ir import Kernel\n"
        "import importlib.util\nimportlib.util.find_spec('sdk.core')\n"
    )
    assert imports_of_the_core("sdk/ir/x.py", source) == []
