"""The import graph of ``core/`` and ``sdk/`` (CONTRIBUTING.md, "Architecture rules"; issue 48):

* the core's modules import one another without a cycle, an import inside a function
  included (deferring an import does not remove the dependency);
* the core's and the contract's modules import one another without a cycle at module level:
  a statement that runs when the module is imported, or one under ``if TYPE_CHECKING:``
  (two modules whose types name each other cannot be read or moved apart either: the shared
  piece belongs in a module both import). The contract's entries (``sdk.backend``, ...)
  import the core inside their functions, and the core imports the contract: those cycles
  are the design, not module-level ones.

Read with :mod:`ast`, as ``test_architecture.py`` reads the tree; each check has a
self-test that feeds it a violating snippet.
"""

from __future__ import annotations

import ast

from tests.contract.test_architecture import ROOT, _imported_modules, _in_functions, _module_of


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
