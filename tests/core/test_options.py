"""Typed options (core/options.py, sdk.CoreOptions, sdk.PluginOptions).

A compile's options are parsed once, into the core's frozen :class:`sdk.CoreOptions` (with
``SDK_DEBUG`` and ``SDK_GRAPH_CACHE`` folded in) and the plugin's own frozen
:class:`sdk.PluginOptions`, whose digest is part of the whole-graph cache's key. Checked here:
the core reads no option by name outside core/options.py (a source scan, with self-tests that
feed it violations); ``SDK_DEBUG=1`` does for a graph-level plugin's partition what it does for
a kernel-level plugin's compile, and what ``debug=True`` does; the typed views hooks get.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

import sdk
from sdk.core.options import CORE_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
#: the one module of the core that may read options by name: it parses them
OPTIONS_MODULE = "core/options.py"


# -- no option read by name outside core/options.py ------------------------------------------


def _names_options(node: ast.AST) -> bool:
    """``options``, ``ctx.options``, ``self.options``, ``core_options``: a mapping of
    options, by its name."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return isinstance(name, str) and name.endswith("options")


def option_reads(rel: str, source: str) -> list[str]:
    """Where ``source`` (the file at ``rel``) reads an option by string key: a subscript or a
    ``.get``/``.pop``/``.setdefault`` of something named ``*options``, or of any mapping by
    the name of a core option (``merged["debug"]``)."""
    if rel == OPTIONS_MODULE:
        return []
    found = []
    for node in ast.walk(ast.parse(source, filename=rel)):
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault", "__getitem__")
            and node.args
        ):
            target, key = node.func.value, node.args[0]
        else:
            continue
        by_name = isinstance(key, ast.Constant) and key.value in CORE_OPTIONS
        if _names_options(target) or by_name:
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_core_reads_no_option_by_name_outside_the_options_module():
    found = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        found += option_reads(path.relative_to(ROOT).as_posix(), path.read_text())
    assert not found, (
        "options read by string key after parsing; read ctx.core_options / "
        "ctx.plugin_options (or Session.options) by attribute:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "source",
    [
        "x = ctx.options['debug']",
        "x = ctx.options.get('fallback', True)",
        "x = self.options['chain']",
        "x = session.options.get('min_partition_size')",
        "x = options['anything']",
        "x = c.options[name]",
        "x = merged['debug']",
        "x = table.get('channels_last')",
    ],
)
def test_an_option_read_by_name_in_the_core_is_caught(source):
    assert option_reads("core/chain.py", source), source


@pytest.mark.parametrize(
    "source",
    [
        "x = ctx.core_options.debug",
        "x = session.options.chain",
        "x = node.meta['val']",
        "x = doc.get('kind')",
        "msg = \"options['fallback'] is False\"",
    ],
)
def test_attribute_reads_and_other_mappings_pass(source):
    assert option_reads("core/chain.py", source) == [], source


def test_the_options_module_may_read_by_name():
    assert option_reads(OPTIONS_MODULE, "x = merged['debug']") == []


# -- the typed options --------------------------------------------------------------------------


def test_core_options_has_a_field_per_core_option_with_its_default():
    fields = {f.name: f.default for f in dataclasses.fields(sdk.CoreOptions)}
    assert fields == {name: spec.default for name, spec in CORE_OPTIONS.items()}


VENDOR = """
import sdk
from sdk.plugins.cpu_cpp import sdk_cache_key, sdk_compile_kernels  # noqa: F401
from sdk.plugins import cpu_cpp as _cpu

SEEN = []

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name="tuned", version="1.0", hook_api=4, device_types=("cpu",),
        options={"unroll": sdk.OptionSpec(1, "unroll factor", int),
                 "flags": sdk.OptionSpec((), "extra flags", (tuple, list))},
    )

@sdk.hookimpl
def sdk_render_kernel(ctx, kernel):
    SEEN.append(ctx)
    return _cpu.sdk_render_kernel(ctx=ctx, kernel=kernel)
"""


@pytest.fixture
def tuned(make_plugin, fake_dist, use_registry):
    mod = make_plugin(VENDOR, name="tuned", head=False)
    use_registry(fake_dist("tuned-sdk-plugin", {"tuned": mod}))
    return __import__(mod)


def _f(x):
    return (x.sin() * 2).sum(-1)


def test_hooks_get_the_options_parsed_once_and_frozen(tuned):
    torch.compile(_f, backend=sdk.backend("tuned", unroll=4, fusion=False))(torch.randn(4, 8))
    assert tuned.SEEN
    first = tuned.SEEN[0]
    # parsed once per compile: every hook of the compile sees the same objects
    assert all(c.core_options is first.core_options for c in tuned.SEEN)
    assert all(c.plugin_options is first.plugin_options for c in tuned.SEEN)
    own, core = first.plugin_options, first.core_options
    assert isinstance(own, sdk.PluginOptions) and isinstance(core, sdk.CoreOptions)
    assert (own.unroll, own.flags, core.fusion, core.debug) == (4, (), False, False)
    assert own.as_dict() == {"unroll": 4, "flags": ()}
    with pytest.raises(dataclasses.FrozenInstanceError):
        own.unroll = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        core.debug = True
    # the mapping of plugins written before the typed views: the same values, read-only
    assert first.options["unroll"] == 4 and first.options["fusion"] is False
    assert dict(first.options) == {**core.as_dict(), **own.as_dict()}
    with pytest.raises(TypeError):
        first.options["unroll"] = 5  # type: ignore[index]


def test_plugin_options_digest_is_stable_and_tells_values_apart():
    a = sdk.PluginOptions.of("tuned", {"unroll": 2, "flags": ("-O3",)})
    assert a.hash() == sdk.PluginOptions.of("tuned", {"flags": ("-O3",), "unroll": 2}).hash()
    assert a.hash() != sdk.PluginOptions.of("tuned", {"unroll": 3, "flags": ("-O3",)}).hash()
    assert a == sdk.PluginOptions.of("tuned", {"unroll": 2, "flags": ("-O3",)})
    assert hash(a) == hash(sdk.PluginOptions.of("tuned", {"unroll": 2, "flags": ("-O3",)}))


def test_a_plugin_option_the_options_type_cannot_hold_is_an_option_error(
    make_plugin, fake_dist, use_registry
):
    source = VENDOR.replace('"unroll": sdk.OptionSpec', '"un-roll": sdk.OptionSpec')
    mod = make_plugin(source, name="tuned", head=False)
    use_registry(fake_dist("tuned-sdk-plugin", {"tuned": mod}))
    with pytest.raises(sdk.OptionError, match=r"'un-roll'.*Python identifier.*rename"):
        sdk.backend("tuned")


def test_a_plugin_option_of_the_wrong_type_keeps_its_error(tuned):
    with pytest.raises(sdk.OptionError, match=r"option 'unroll' for sdk:tuned must be int"):
        sdk.backend("tuned", unroll="4")
    with pytest.raises(sdk.OptionError, match=r"must be int, got bool True"):
        sdk.backend("tuned", unroll=True)


def test_plugin_options_are_part_of_the_whole_graph_cache_key(tuned, tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    def cache(**options):
        torch._dynamo.reset()
        report = sdk.explain(_f, torch.randn(4, 8), backend="sdk:tuned", **options)
        return [g.cache for g in report.graphs]

    assert cache(unroll=2) == ["stored"]
    assert cache(unroll=2) == ["hit"]
    assert cache(unroll=3) == ["stored"]  # another value: another program
    assert cache(unroll=2, flags=["-g"]) == ["stored"]
    assert cache(unroll=2, flags=["-g"]) == ["hit"]


# -- SDK_DEBUG, the same for every plugin kind ------------------------------------------------

#: a kernel-level plugin (cpu_cpp's codegen) whose renderer raises on symbolic sizes
SIZED = """
import sdk
from sdk.plugins.cpu_cpp import sdk_compile_kernels  # noqa: F401
from sdk.plugins import cpu_cpp as _cpu

SEEN = []

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name="sized", version="1.0", hook_api=4, device_types=("cpu",),
        capabilities=frozenset({sdk.Capability.SYMBOLIC_SIZES}),
    )

@sdk.hookimpl
def sdk_render_kernel(ctx, kernel):
    SEEN.append((ctx.core_options.debug, ctx.options["debug"]))
    if kernel.size_args:
        raise NotImplementedError("sized renders static shapes only")
    return _cpu.sdk_render_kernel(ctx=ctx, kernel=kernel)
"""

#: a graph-level plugin whose compiler raises on symbolic sizes (it declares them: a plugin
#: that does not is compiled per shape without being asked)
GRAPHY = """
import torch

import sdk

SEEN = []

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(name="graphy", version="0.0.1", hook_api=sdk.HOOK_API_VERSION,
                          device_types=("cpu",), kind=sdk.PluginKind.GRAPH,
                          capabilities=frozenset({sdk.Capability.SYMBOLIC_SIZES}))

@sdk.hookimpl
def sdk_claim_nodes(ctx, gm):
    return {n: sdk.Support.yes() for n in gm.graph.nodes if n.op == "call_function"}

@sdk.hookimpl
def sdk_compile_subgraph(ctx, gm, example_inputs):
    SEEN.append((ctx.core_options.debug, ctx.options["debug"]))
    shapes = [d for x in example_inputs if isinstance(x, torch.Tensor) for d in x.shape]
    if any(isinstance(d, torch.SymInt) for d in shapes):
        raise NotImplementedError("graphy compiles static shapes only")
    return sdk.CompiledSubgraph(fn=gm)
"""


@pytest.fixture
def kinds(make_plugin, fake_dist, use_registry):
    """The kernel-level ``sized`` and the graph-level ``graphy``, installed: their modules."""
    sized = make_plugin(SIZED, name="sized", head=False)
    graphy = make_plugin(GRAPHY, name="graphy", head=False)
    use_registry(fake_dist("acme-kinds", {"sized": sized, "graphy": graphy}))
    return {"sized": __import__(sized), "graphy": __import__(graphy)}


def _g(x):
    return (x.sin() * 2 + 1).cos()


@pytest.mark.parametrize("plugin", ["sized", "graphy"])
def test_without_debug_a_plugin_refusing_symbolic_sizes_compiles_per_shape(kinds, plugin):
    compiled = torch.compile(_g, backend=sdk.backend(plugin), dynamic=True)
    for rows in (3, 7):
        x = torch.randn(rows, 5)
        torch.testing.assert_close(compiled(x), _g(x))
    assert kinds[plugin].SEEN and not any(debug for debug, _ in kinds[plugin].SEEN)


@pytest.mark.parametrize("how", ["SDK_DEBUG=1", "debug=True"])
@pytest.mark.parametrize("plugin", ["sized", "graphy"])
def test_debug_raises_a_plugins_error_for_every_plugin_kind(kinds, plugin, how, monkeypatch):
    """A kernel-level compile and a graph-level partition alike: debug, by the option or the
    variable, raises the hook's error instead of compiling per shape, and the hooks see
    debug on."""
    options = {}
    if how == "SDK_DEBUG=1":
        monkeypatch.setenv("SDK_DEBUG", "1")
    else:
        options["debug"] = True
    compiled = torch.compile(_g, backend=sdk.backend(plugin, **options), dynamic=True)
    with pytest.raises(Exception, match="static shapes only"):
        compiled(torch.randn(3, 5))
    assert kinds[plugin].SEEN and all(seen == (True, True) for seen in kinds[plugin].SEEN)
