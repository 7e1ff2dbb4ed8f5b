"""Warm starts: a later process skips AOTAutograd and the SDK's compile.

Each Dynamo graph goes through torch's AOTAutograd cache (:mod:`core.adapters.aot_cache`)
when the whole-graph cache can serve its programs (``cache`` option on, the plugin answers
``sdk_cache_key``). What the SDK puts in torch's entry is a :class:`Recipe` per compiled
ATen graph: plain data naming each compiled variant's program in the whole-graph cache
(:mod:`core.graph_cache`, the SDK's private directory, entries verified) and the ATen graph
itself, pickled, read only when a variant must be built again (a new layout, an entry gone
from the whole-graph cache). A later process's hit restores the programs from their entries:
no AOTAutograd trace, partition, lowering or scheduling, and no decomposition table.

A recipe is read back from torch's directory, which the SDK does not verify; so when torch
stores it, its digest (:func:`recipe_digest`: every field, the graph's bytes included) goes
into the SDK's own cache (``DiskCache("aot-recipes")``, entries verified), and a recipe read
back is used only if its digest is there: a changed bit is a miss (torch compiles afresh),
never a wrong result.

The entry's key (torch's: the Dynamo graph, its inputs, torch's configuration) gets
:func:`cache_tag`: everything of the SDK's that changes the result. Torch writes the entry
with pickle into its own directory (``$TORCHINDUCTOR_CACHE_DIR/aotautograd``); the SDK uses
it only where that directory is private to the user and its parents safe, checked at each
compile, and torch reads an entry only after every directory from ``/`` down and the entry
file are checked at that lookup (:mod:`core.adapters.aot_cache`); the SDK says why not once
per cause otherwise (:class:`sdk.CacheDirWarning`). An entry whose bytes do not match the
digest torch named it by (a flipped bit anywhere in it: torch's own data as well as the
recipe) is removed at that lookup, with one such warning naming it: a miss, compiled afresh
and stored again, where torch would have loaded it and failed at the first call.

``torch.compiler.save_cache_artifacts()`` carries the SDK's program entries with torch's
(artifact type ``sdk_programs``, registered by ``import sdk``), so ``load_cache_artifacts()``
on another machine makes a warm start there.
"""

from __future__ import annotations

import contextvars
import pickle
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sdk._diskcache import DiskCache, stable_hash
from sdk.errors import describe

from . import fallback, graph_cache
from .adapters import aot_cache, mega_cache
from .adapters import torch_private as tp
from .session import CompileSession

#: the artifact type of the SDK's program entries in torch's MegaCache
ARTIFACT = "sdk_programs"
FORMAT = 2

#: the Dynamo graph being compiled: its session's ``restore_aten_graph``, bound to the
#: graph's capture (a cache hit restores its programs through it)
current: contextvars.ContextVar[Callable[[dict[str, Any], Callable], Callable] | None] = (
    contextvars.ContextVar("sdk_warm_session", default=None)
)


#: the SDK's cache namespace of the digests of the recipes it put in torch's entries
RECIPES = "aot-recipes"
_RECIPE = "recipe:"
_VOUCHED = b"sdk-recipe"


def populate(key: str, payload: bytes) -> None:
    """An entry of a loaded MegaCache blob, into the whole-graph cache (a program) or the
    recipes' digests."""
    if key.startswith(_RECIPE):
        DiskCache(RECIPES).put(key, payload)
    else:
        graph_cache.store().put(key, payload)


def record(key: str, payload: bytes) -> None:
    """A program entry stored or read: carried by the next ``save_cache_artifacts()``."""
    mega_cache.record(ARTIFACT, key, payload)


# -- whether, and under which tag ---------------------------------------------------


def cache_tag(session: CompileSession, ctx: Any) -> tuple[str | None, str]:
    """The tag of this Dynamo graph's AOTAutograd entries, or None, and what to report
    (``"on"``, or ``"off: <why>"``)."""
    if not ctx.core_options.cache:
        return None, "off: the whole-graph cache is off"
    why = aot_cache.unsupported()
    if why:
        return None, f"off: {why}"
    try:
        plugin_key = session.hooks.sdk_cache_key(ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - the plugin's fault: no warm start, no failure
        return None, f"off: sdk_cache_key raised {describe(exc)}"
    if plugin_key is None:
        return None, f"off: sdk:{ctx.plugin} does not implement sdk_cache_key"
    bad = graph_cache.unplain(ctx.core_options, ctx.plugin_options)
    if bad:
        return None, f"off: option(s) {bad} are not plain data"
    why = _torch_dir_refused()
    if why:
        return None, f"off: {why}"
    import sdk

    peers = []
    for name in (*ctx.core_options.chain, *ctx.core_options.wrappers):
        rec = session.registry.records.get(name)
        peers.append((name, rec.info.version if rec else "-"))
    tag = stable_hash(
        "sdk-aot",
        FORMAT,
        sdk.__version__,
        graph_cache.sdk_digest(),
        ctx.plugin,
        session.info.version,
        plugin_key,
        ctx.device_type,
        ctx.core_options.hash(),
        ctx.plugin_options.hash(),
        repr(session.mode),
        tuple(peers),
    )
    return f"sdk:{ctx.plugin}:{tag}", "on"


#: the causes already warned about (once each per process)
_refused: set[str] = set()


def _warn_once(why: str) -> None:
    if why in _refused:
        return
    _refused.add(why)
    from sdk.errors import CacheDirWarning

    warnings.warn(why, CacheDirWarning, stacklevel=4)


def _torch_dir_refused() -> str | None:
    """Why torch's AOTAutograd directory may not be used (its entries are unpickled), or
    None; one ``CacheDirWarning`` per cause. Checked on every compile (the directories
    from ``/`` down, :func:`core.adapters.aot_cache.refused`), and again at each lookup."""
    try:
        path = Path(aot_cache.entry_dir())
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = aot_cache.refused(str(path))
        if why:
            why = f"torch's AOTAutograd cache directory {path}: {why}"
    except OSError as exc:
        why = f"torch's AOTAutograd cache directory is not usable ({exc})"
    if why:
        _warn_once(why)
    return why


#: the SDK's cache namespace of torch's AOTAutograd keys, by what they were computed from
#: (:class:`core.adapters.aot_cache.KeyMemo`)
KEYS = "aot-keys"


def key_memo() -> DiskCache:
    """Where torch's AOTAutograd keys are remembered: a warm process takes a graph's key
    from there instead of computing it (:mod:`core.adapters.aot_cache`), most of the key's
    cost being the same for every graph. The SDK's own cache: entries verified, a bad one a
    miss."""
    return DiskCache(KEYS)


def lookup_refused(why: str) -> None:
    """A lookup of torch's AOTAutograd cache read nothing (an entry or directory of the
    lookup not safe to unpickle), or skipped an entry (corrupt, or not a pickle: removed):
    a miss, and one ``CacheDirWarning`` per cause."""
    _warn_once(f"torch's AOTAutograd cache: no warm start from it: {why}")


# -- one compiled ATen graph ----------------------------------------------------------


@dataclass
class Recipe:
    """What ``compile_aten_graph`` made of one ATen graph, as far as a later process needs
    it: filled while it compiles, frozen to plain data when torch stores the entry."""

    kind: str
    device_type: str
    guarded: bool = False
    #: the first variant's specs (a symbolic graph's: its general program's)
    first: tuple | None = None
    general: bool = False
    #: why the result must not be stored (None: it may)
    refused: str | None = None
    program: Any = None  # Specializing, or _LazySpecializing before its first call
    fallback: Any = None  # the _RunTimeFallback around it
    #: each variant's specs -> its program's key in the whole-graph cache (None: none)
    keys: dict[tuple, str | None] = field(default_factory=dict)
    report: Any = None  # the graph's GraphReport (its ATen call count and sizes)

    def freeze(self, gm: torch.fx.GraphModule) -> dict[str, Any]:
        """Plain data (and the pickled ATen graph); raises ``aot_cache.Uncacheable``."""
        if self.refused:
            raise aot_cache.Uncacheable(self.refused)
        why = aot_cache.unkeyed_guard()
        if why:
            if self.report is not None:
                self.report.notes.append(f"not stored for a warm start: {why}")
            raise aot_cache.Uncacheable(why)
        if self.fallback is not None and self.fallback._eager is not None:
            raise aot_cache.Uncacheable("the program failed when run; ATen runs the graph")
        program = getattr(self.program, "_inner", self.program)
        if program is None or self.first is None:
            raise aot_cache.Uncacheable("no variant compiled yet")
        variants = []
        for specs in program.variants:
            key = self.keys.get(specs)
            if key is None:
                raise aot_cache.Uncacheable(
                    "a variant is not a program of the whole-graph cache (a fallback, a "
                    "chained plugin, or not stored)"
                )
            variants.append((specs, key))
        try:
            with tp.real_mode():
                graph = pickle.dumps(gm)
        except Exception as exc:  # noqa: BLE001 - not storable: no entry
            raise aot_cache.Uncacheable(f"the ATen graph does not pickle: {exc}") from exc
        state = {
            "format": FORMAT,
            "kind": self.kind,
            "device_type": self.device_type,
            "guarded": self.guarded,
            "first": self.first,
            "general": self.general,
            "variants": variants,
            "aten_ops": self.report.aten_ops,
            "sizes": self.report.sizes,
            "written_inputs": sorted(fallback.written_inputs(gm)),
            "graph": graph,
        }
        key = _RECIPE + recipe_digest(state)
        try:
            DiskCache(RECIPES).put(key, _VOUCHED)
        except OSError as exc:  # its digest not kept: the recipe could not be verified
            raise aot_cache.Uncacheable(f"the recipe's digest is not storable: {exc}") from exc
        record(key, _VOUCHED)
        return state


def recipe_digest(state: dict[str, Any]) -> str:
    """sha256 over every field of a recipe (plain data: its ``repr``), the graph's bytes
    included. Raises ``ValueError`` for a state that is not a recipe's."""
    graph = state.get("graph")
    if not isinstance(graph, bytes):
        raise ValueError("the recipe has no stored graph")
    rest = tuple(sorted((str(k), repr(v)) for k, v in state.items() if k != "graph"))
    return stable_hash("sdk-aot-recipe", FORMAT, rest, graph)


def _check_vouched(state: dict[str, Any]) -> None:
    """Raise ``LookupError`` unless the SDK's cache holds the digest of ``state``."""
    key = _RECIPE + recipe_digest(state)
    if DiskCache(RECIPES).get(key) != _VOUCHED:
        raise LookupError(
            "the recipe read back from torch's AOTAutograd cache has no matching digest in "
            "the SDK's cache (changed on disk, or not stored by the SDK): compiled afresh"
        )
    record(key, _VOUCHED)  # carried with the programs by the next save_cache_artifacts()


def output_code(compiled: Callable, recipe: Recipe, gm: torch.fx.GraphModule) -> Any:
    """``compiled`` as the OutputCode torch's AOTAutograd cache stores."""
    return aot_cache.SDKOutputCode(compiled, lambda: recipe.freeze(gm), restore)


def restore(state: dict[str, Any]) -> Callable:
    """The compiled callable of a stored recipe, in a later process (torch calls this on a
    cache hit, inside the compile of the Dynamo graph). Raises where it cannot; torch then
    compiles afresh."""
    restore_aten_graph = current.get()
    if restore_aten_graph is None:
        raise RuntimeError("an SDK program restored outside an SDK compile")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"recipe format {got}, not {FORMAT}")
    _check_vouched(state)  # before any of it is used
    return restore_aten_graph(state, _GraphLoader(state["graph"]))


class _GraphLoader:
    """The stored ATen graph, unpickled at first need."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data
        self._gm: torch.fx.GraphModule | None = None

    def __call__(self) -> torch.fx.GraphModule:
        if self._gm is None:
            assert self._data is not None
            self._gm, self._data = pickle.loads(self._data), None
        return self._gm
