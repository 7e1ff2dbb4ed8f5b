"""Shared fixtures: fake plugin distributions, a swappable registry, a clean Dynamo.

A test that needs its own set of plugins writes them as modules into
``tmp_path`` (:func:`make_plugin`), describes the distributions that would ship
them (:func:`fake_dist` gives real ``importlib.metadata.EntryPoint`` objects
that know their distribution, as an installed wheel's do) and installs a
:class:`sdk.core.registry.Registry` built from those entry points
(:func:`use_registry`). The process-wide registry is restored afterwards.
"""

from __future__ import annotations

import itertools
import os
import sys
import textwrap
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, PathDistribution, entry_points
from pathlib import Path
from typing import Any

import pytest
import torch

# Without a GPU, cuda_triton runs its kernels through Triton's interpreter on CPU
# tensors (see tests/plugins_under_test.py). Set before anything imports Triton:
# importing sdk.core imports torch._dynamo, which imports Triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests swap renderers and hooks under a fixed plugin version: a program kept by one test
# must not answer another's compile. tests/core/test_graph_cache.py turns the cache on.
os.environ.setdefault("SDK_GRAPH_CACHE", "0")

from sdk.core import pipeline, program
from sdk.core.adapters.torch_private import reset_dynamo
from sdk.core.guards import Specializing
from sdk.core.registry import ENTRY_POINT_GROUP, Registry, set_registry
from sdk.core.stages import build as build_stage

ROOT = Path(__file__).resolve().parents[1]

#: The head of every well-formed test plugin; ``{name}``, ``{kind}``, ``{api}`` are filled in.
PLUGIN_HEAD = """
import sdk

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(name={name!r}, version="0.0.1", hook_api={api},
                          device_types=("cpu",), kind=sdk.PluginKind.{kind})
"""

_module_ids = itertools.count()


#: Modules whose tests share a costly module- or session-scoped fixture (processes that fill
#: a cache, one g++ build of all the file's kernels, wheels and a venv). Under pytest-xdist
#: (``-n auto --dist loadgroup``, pyproject's addopts) each runs on one worker
#: (:func:`pytest_xdist_make_scheduler`), so that fixture runs once per suite, not once on
#: each worker that drew one of its tests.
SHARED_FIXTURE_MODULES = (
    "tests/reliability/test_cache_hostile.py",
    "tests/reliability/test_no_compiler.py",
    "tests/core/test_warm_start.py",
    "tests/contract/test_packaging.py",
    "tests/contract/test_clike_casts.py",
    "tests/plugins/cpu_cpp/test_cpp_render.py",
    "tests/plugins/cpu_cpp/test_cpp_index_errors.py",
)

#: The modules of the longest single tests (``--durations``: a minute or more each on CI's
#: two cores), collected first: a worker then starts each of them early, and the short tests
#: fill both workers at the end, instead of one long test ending the run on one worker while
#: the other has nothing left to do.
LONG_TESTS_FIRST = (
    "tests/tools/test_bench_models.py",
    "tests/e2e/test_reproducible.py",
    "tests/e2e/test_distributed.py",
    "tests/contract/test_conformance.py",
    "tests/iree/test_backend.py",
    "tests/e2e/test_symbolic_sizes.py",
    "tests/contract/test_scaffold.py",
    "tests/e2e/test_backend.py",
    "tests/tools/test_cli_startup.py",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (pyproject's addopts) with each of :data:`SHARED_FIXTURE_MODULES`
    a group of its own. Not through ``xdist_group`` marks: pytest-xdist 3.8 groups those by
    adding the group to each test's id, which pytest 9.2 no longer lets it change
    (pytest-xdist#1386), and every worker then ran those modules' fixtures."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ByModule(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in SHARED_FIXTURE_MODULES else super()._split_scope(nodeid)

    return ByModule(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    first = {m: i for i, m in enumerate(LONG_TESTS_FIRST)}
    # stable: each module's tests stay together and in their order
    items.sort(key=lambda item: first.get(module(item), len(first)))


@pytest.fixture(autouse=True, scope="session")
def _one_runner_build(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One build of the native runner for the whole run (every worker and every process a
    test starts): tests that give the SDK a cache directory of their own would otherwise
    build it again each time (about a minute of compiler time). ``SDK_RUNNER_DIR`` set
    by the caller is kept."""
    if not os.environ.get("SDK_RUNNER_DIR"):
        # the parent of this worker's base directory is shared by pytest-xdist's workers
        shared = tmp_path_factory.getbasetemp().parent / "sdk-runner"
        shared.mkdir(mode=0o700, exist_ok=True)
        os.environ["SDK_RUNNER_DIR"] = str(shared)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch):
    """Every test starts with no compiled frames and no plugin allow/deny lists."""
    for var in ("SDK_PLUGINS_ALLOW", "SDK_PLUGINS_DENY"):
        monkeypatch.delenv(var, raising=False)
    reset_dynamo()
    yield
    reset_dynamo()


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on ``sys.path`` for this test's plugin modules."""
    d = tmp_path / "plugins"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    return d


@pytest.fixture
def make_plugin(plugin_dir: Path) -> Iterable[Callable[..., str]]:
    """``make_plugin(source, name=..., kind=..., api=...) -> module name``.

    ``source`` is dedented and appended to :data:`PLUGIN_HEAD` (unless
    ``head=False``). Module names are unique in the session, so a module is
    never served from ``sys.modules`` by an earlier test; they are dropped
    from ``sys.modules`` afterwards.
    """
    made: list[str] = []

    def make(
        source: str = "",
        *,
        name: str = "good",
        kind: str = "CODEGEN",
        api: int | str = "sdk.HOOK_API_VERSION",
        head: bool = True,
    ) -> str:
        module = f"sdktest_plugin_{next(_module_ids)}_{name}"
        text = PLUGIN_HEAD.format(name=name, kind=kind, api=api) if head else ""
        text += textwrap.dedent(source)
        (plugin_dir / f"{module}.py").write_text(text)
        made.append(module)
        return module

    yield make
    for module in made:
        sys.modules.pop(module, None)


@pytest.fixture
def fake_dist(tmp_path: Path) -> Callable[..., list[EntryPoint]]:
    """``fake_dist(dist_name, {ep_name: "module"}, version=...) -> [EntryPoint, ...]``.

    Writes a ``.dist-info`` directory (METADATA and entry_points.txt) and returns
    its ``sdk.plugins`` entry points, which carry ``.dist`` exactly like those of
    an installed wheel. Not put on ``sys.path``: only the registry sees them.
    """
    root = tmp_path / "dists"

    def make(
        dist_name: str,
        plugins: dict[str, str],
        version: str = "0.0.1",
        group: str = ENTRY_POINT_GROUP,
    ) -> list[EntryPoint]:
        info = root / f"{dist_name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n"
        )
        lines = [f"[{group}]"] + [f"{k} = {v}" for k, v in plugins.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        eps = list(PathDistribution(info).entry_points.select(group=group))
        assert {ep.name for ep in eps} == set(plugins)
        return eps

    return make


def builtin_entry_points() -> list[EntryPoint]:
    """The ``sdk.plugins`` entry points of the installed distributions (cpu_cpp, ...)."""
    return list(entry_points(group=ENTRY_POINT_GROUP))


@pytest.fixture
def use_registry() -> Iterable[Callable[..., Registry]]:
    """``use_registry(*entry_points, builtins=True) -> Registry``, installed process-wide.

    With ``builtins`` the installed plugins come first, so ``sdk:cpu_cpp`` keeps
    working beside the test's own plugins. The previous registry is restored
    after the test.
    """
    previous = set_registry(None)

    def make(*eps: EntryPoint | Iterable[EntryPoint], builtins: bool = True) -> Registry:
        flat: list[EntryPoint] = builtin_entry_points() if builtins else []
        for ep in eps:
            flat.extend([ep] if isinstance(ep, EntryPoint) else ep)
        reg = Registry(flat)
        set_registry(reg)
        return reg

    yield make
    set_registry(previous)


@pytest.fixture
def graph_reports() -> Iterable[list]:
    """Every :class:`sdk.GraphReport` compiled during the test, in order."""
    sink: list = []
    token = pipeline.collect_reports(sink)
    yield sink
    pipeline.stop_collecting(token)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The graph name of every program built (lowering through codegen) in the test."""
    made: list[str] = []
    real = program.build_program

    def counting(session, ctx, gm, specs, **kw):
        made.append(ctx.graph_name)
        return real(session, ctx, gm, specs, **kw)

    monkeypatch.setattr(program, "build_program", counting)
    return made


@pytest.fixture
def specializations(monkeypatch: pytest.MonkeyPatch) -> list[Specializing]:
    """Every :class:`~sdk.core.guards.Specializing` program the pipeline makes in this test.

    White-box: a :class:`sdk.GraphReport` says a graph was compiled, not how
    many layout variants its program went on to build.
    """
    made: list[Specializing] = []

    class Recording(Specializing):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(build_stage, "Specializing", Recording)  # (the build stage makes them)
    return made


@pytest.fixture
def seeded() -> None:
    torch.manual_seed(0)
