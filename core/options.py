"""Compile options: the core's, plus those each plugin declares in its PluginInfo.

``torch.compile(..., mode=..., options={...})`` and ``sdk.backend(name, **options)``
both end here. An unknown option or mode raises and lists the known ones. :func:`resolve`
parses them once per compile into two frozen objects: the core's :class:`sdk.CoreOptions`
(with the environment's ``SDK_DEBUG``, ``SDK_GRAPH_CACHE`` and ``SDK_RUNNER`` folded in, read through
:mod:`sdk._config`) and the plugin's own :class:`sdk.PluginOptions`. Everything after reads
those by attribute; this module is the only one of the core that reads options by name
(``tests/core/test_options.py`` holds the core to that).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from sdk import _config as config
from sdk.errors import OptionError
from sdk.plugin import (
    Capability,
    CoreOptions,
    OptionSpec,
    PluginInfo,
    PluginKind,
    PluginOptions,
)

CORE_OPTIONS: dict[str, OptionSpec] = {
    "fallback": OptionSpec(
        True, "run ops the plugin cannot generate through ATen, op by op (False: raise)", bool
    ),
    "fusion": OptionSpec(True, "let the scheduler fuse kernels", bool),
    "debug": OptionSpec(False, "run the IR checker after every stage (also SDK_DEBUG=1)", bool),
    "wrappers": OptionSpec((), "wrapper plugins to apply to each compiled graph", (tuple, list)),
    "chain": OptionSpec(
        (),
        "plugins after this one, in order of priority: each op goes to the first plugin that "
        "claims it (what none claims runs in ATen); a graph or partition that fails to compile "
        "goes to the next",
        (tuple, list),
    ),
    "min_partition_size": OptionSpec(
        1,
        "with a chain: the fewest ops a plugin's partition may have; a smaller island of ops "
        "goes to the next plugin that claims them",
        int,
    ),
    "autotune": OptionSpec(
        False,
        "measure more kernel choices, under a large budget (see tune_budget_s)",
        bool,
    ),
    "tune_budget_s": OptionSpec(
        None,
        "seconds each compiled graph may spend measuring the kernel choices its plugin offers "
        "(sdk_kernel_choices) and keeping the fastest, once per machine (the choice is cached); "
        "None: automatic (nothing, until measured on a GPU; 120 s with autotune); "
        "0: measure nothing",
        (int, float, type(None)),
    ),
    "cache": OptionSpec(
        True,
        "keep compiled programs in the per-user whole-graph cache and reuse them in "
        "later processes (also SDK_GRAPH_CACHE=0; only plugins that answer sdk_cache_key)",
        bool,
    ),
    "runner": OptionSpec(
        "native",
        "what runs each compiled program: 'native', the SDK's C++ runner (built once per "
        "machine; one Python->C++ crossing per call) where the program's steps allow it and "
        "it builds, else the Python program (the interpreter of the same steps); 'python', "
        "always the Python program; 'check', the runner and the interpreter both on every "
        "call, compared bit for bit (a debugging mode: about twice the work per call); "
        "SDK_RUNNER sets the default",
        str,
    ),
    "channels_last": OptionSpec(
        None,
        "channels-last activations around convolutions: None lets the core decide per "
        "graph (plugins with Preferences.channels_last; inference graphs: training graphs only "
        "with True until measured on a GPU), True always, False never",
        (bool, type(None)),
    ),
    "round_intermediates": OptionSpec(
        True,
        "inside a fused kernel, round each op's bf16 or fp16 result to its dtype before the "
        "next op reads it, as eager does; False: keep the values between ops in float32 and "
        "round only what the kernel stores (Inductor's default: fewer instructions, results "
        "nearer float64's, not eager's bits)",
        bool,
    ),
    "isolate_compile": OptionSpec(
        None,
        "graph-level plugins: compile each partition (sdk_compile_subgraph) in a worker "
        "process of its own, so that a compiler that crashes makes the partition fall back "
        "with the signal as its reason instead of killing this process; None: as the plugin "
        "declares (PluginInfo.isolate_compile), True: always (the plugin must return an "
        "artifact and implement sdk_load_subgraph), False: in this process",
        (bool, type(None)),
    ),
    "isolate_timeout_s": OptionSpec(
        1800.0,
        "with isolate_compile: seconds a partition's worker process may take before it is "
        "killed and the partition falls back with that as its reason (a compiler that hangs "
        "would hang torch.compile); None: no limit",
        (int, float, type(None)),
    ),
}

#: torch.compile modes and the options each stands for. A capability among the wrappers stands
#: for every wrapper plugin that declares it (see :func:`wrapper_names`).
MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"wrappers": (Capability.GRAPH_CAPTURE,)},
    "max-autotune": {"autotune": True, "wrappers": (Capability.GRAPH_CAPTURE,)},
    "max-autotune-no-cudagraphs": {"autotune": True},
}


#: the values of the ``runner`` option (and of SDK_RUNNER, its default)
RUNNERS = ("native", "python", "check")


class Resolved(NamedTuple):
    """One compile's options, parsed: the core's and the plugin's own."""

    core: CoreOptions
    plugin: PluginOptions


def known_options(info: PluginInfo) -> dict[str, OptionSpec]:
    clash = set(CORE_OPTIONS) & set(info.options)
    if clash:
        raise OptionError(
            f"plugin {info.name!r} declares option(s) {sorted(clash)} that the core owns; "
            "rename them in its PluginInfo"
        )
    return {**CORE_OPTIONS, **info.options}


def resolve(
    info: PluginInfo,
    mode: str | None,
    options: Mapping[str, Any] | None,
    env: config.Env | None = None,
) -> Resolved:
    """Defaults, then the mode's options, then the explicit ones; all validated, and parsed
    into the typed pair. ``env`` (default: read now) adds ``SDK_DEBUG`` and
    ``SDK_GRAPH_CACHE``, and ``SDK_RUNNER`` as the ``runner`` option's default."""
    known = known_options(info)
    mode = mode or "default"
    if mode not in MODES:
        raise OptionError(
            f"unknown mode {mode!r} for sdk:{info.name}; known modes: {', '.join(MODES)}"
        )
    env = config.env() if env is None else env
    merged = {k: spec.default for k, spec in known.items()}
    if env.runner is not None:
        _check_runner(info.name, env.runner, "the environment variable SDK_RUNNER")
        merged["runner"] = env.runner
    merged.update(MODES[mode])
    for key, value in (options or {}).items():
        if key not in known:
            listing = "\n".join(f"  {k} (default {s.default!r}): {s.doc}" for k, s in known.items())
            raise OptionError(
                f"unknown option {key!r} for sdk:{info.name}; known options:\n{listing}"
            )
        spec = known[key]
        if spec.type is not object and (
            not isinstance(value, spec.type) or _bool_for_number(value, spec.type)
        ):
            raise OptionError(
                f"option {key!r} for sdk:{info.name} must be {_type_name(spec.type)}, "
                f"got {type(value).__name__} {value!r}"
            )
        merged[key] = value
    for key in ("wrappers", "chain"):
        merged[key] = tuple(merged[key])
    _check_chain(info.name, merged["chain"])
    _check_runner(info.name, merged["runner"], "option 'runner'")
    if merged["min_partition_size"] < 1:
        raise OptionError(
            f"option 'min_partition_size' for sdk:{info.name} must be at least 1, got "
            f"{merged['min_partition_size']}"
        )
    budget = merged["tune_budget_s"]
    if budget is not None and not budget >= 0:
        raise OptionError(
            f"option 'tune_budget_s' for sdk:{info.name} must be a number of seconds >= 0 "
            f"(0: measure nothing) or None (automatic), got {budget!r}"
        )
    limit = merged["isolate_timeout_s"]
    if limit is not None and not limit > 0:
        raise OptionError(
            f"option 'isolate_timeout_s' for sdk:{info.name} must be a number of seconds > 0 "
            f"or None (no limit), got {limit!r}"
        )
    core = CoreOptions(
        **{
            **{k: merged[k] for k in CORE_OPTIONS},
            "debug": merged["debug"] or env.debug,
            "cache": merged["cache"] and env.graph_cache,
        }
    )
    return Resolved(core, _plugin_options(info, {k: merged[k] for k in info.options}))


def _check_runner(backend: str, runner: str, what: str) -> None:
    if runner not in RUNNERS:
        raise OptionError(
            f"{what} for sdk:{backend} must be 'native', 'python' or 'check', got {runner!r}"
            + (" (unset it for the default, 'native')" if what.startswith("the env") else "")
        )


def _check_chain(backend: str, chain: tuple[Any, ...]) -> None:
    """The ``chain`` option names the plugins *after* the backend, each once: the backend
    itself or a repeated name is an error (trying a plugin twice on the same graph gives
    the same answer twice; the user likely took the chain for the whole list)."""
    seen = {backend}
    for name in chain:
        if name in seen:
            which = "the backend itself" if name == backend else "named twice"
            fixed = [n for n in dict.fromkeys(chain) if n != backend]
            raise OptionError(
                f"option 'chain' for sdk:{backend} names {name!r} again ({which}): the chain "
                f"lists the plugins tried after sdk:{backend}, each once; use "
                f"chain={fixed!r}"
            )
        seen.add(name)


def for_peer(info: PluginInfo, core: CoreOptions) -> Resolved:
    """The options of plugin ``info`` compiling for another's backend (a chain): the
    backend's core options (``core``, already resolved), the plugin's own at their
    defaults."""
    known_options(info)  # (a plugin that claims a core option's name fails here too)
    return Resolved(core, _plugin_options(info, {k: s.default for k, s in info.options.items()}))


def _plugin_options(info: PluginInfo, values: Mapping[str, Any]) -> PluginOptions:
    try:
        return PluginOptions.of(info.name, values, info.options_class)
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def as_mapping(resolved: Resolved) -> Mapping[str, Any]:
    """Every option by name, read-only: ``CompileContext.options``, for plugins written
    before the typed views."""
    return MappingProxyType({**resolved.core.as_dict(), **resolved.plugin.as_dict()})


def wrapper_names(wrappers: tuple[Any, ...], records: Mapping[str, Any]) -> list[str]:
    """The plugin names the ``wrappers`` option asks for: a name stands for itself; a
    :class:`Capability` (what a mode asks for: the core names no plugin) for every wrapper
    plugin that declares it, in name order."""
    names = []
    for entry in wrappers:
        if isinstance(entry, Capability):
            names += sorted(
                name
                for name, rec in records.items()
                if rec.info is not None
                and rec.info.kind == PluginKind.WRAPPER
                and entry in rec.info.capabilities
            )
        else:
            names.append(entry)
    return names


def _bool_for_number(value: Any, t: type | tuple[type, ...]) -> bool:
    """``True`` for an ``int`` option (``isinstance(True, int)`` holds, but a bool there is
    a mistake: ``min_partition_size=True``), unless the option takes bools too."""
    types = t if isinstance(t, tuple) else (t,)
    return isinstance(value, bool) and bool not in types


def check_wrappers(plugin: str, wrappers: tuple[Any, ...], records: Mapping[str, Any]) -> None:
    """Every plugin the ``wrappers`` option names is an installed wrapper plugin (whether it
    can wrap a graph of this device is known only per graph); a :class:`Capability` stands
    for the wrappers that declare it."""
    installed = sorted(
        n for n, r in records.items() if r.info is not None and r.info.kind == PluginKind.WRAPPER
    )
    for entry in wrappers:
        if isinstance(entry, Capability):
            continue
        allowed = (
            f"wrapper plugins installed: {', '.join(installed) or 'none'} (or an "
            "sdk.Capability, for every wrapper that declares it)"
        )
        if not isinstance(entry, str):
            raise OptionError(
                f"option 'wrappers' for sdk:{plugin} holds {type(entry).__name__} {entry!r}; "
                f"give plugin names: {allowed}"
            )
        rec = records.get(entry)
        if rec is None:
            raise OptionError(
                f"option 'wrappers' for sdk:{plugin} names {entry!r}, which is not an installed "
                f"plugin; {allowed}"
            )
        if rec.info is not None and rec.info.kind != PluginKind.WRAPPER:
            raise OptionError(
                f"option 'wrappers' for sdk:{plugin} names {entry!r}, a {rec.info.kind.value} "
                f"plugin, not a wrapper plugin; {allowed}"
            )


def _type_name(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return " or ".join(x.__name__ for x in t)
    return t.__name__
