"""Plugin discovery: one entry-point group, one plugin manager, no special cases.

Built-in plugins are found exactly like a third-party wheel's, through the
``sdk.plugins`` entry points of the distribution that ships them. A plugin that
is denied, fails to import, fails pluggy's validation, declares an unsupported
hook-API version or mismatches its entry-point name is *unavailable*: it is
listed with its distribution and the reason, and never affects the others.
"""

from __future__ import annotations

import difflib
import re
import threading
import traceback
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from sdk import _config as config
from sdk import hookspecs
from sdk.errors import (
    PluginFallbackWarning,
    PluginHookError,
    PluginHookWarning,
    PluginUnavailableError,
    SDKDeprecationWarning,
    UnknownPluginError,
    describe,
)
from sdk.plugin import (
    SUPPORTED_HOOK_APIS,
    CompileContext,
    CompileUnavailable,
    PluginInfo,
    PluginKind,
    Preferences,
    retired_fix,
)
from sdk.report import HookFault

#: what a fallback warning's reason names that changes between graphs failing alike
_PATH = re.compile(r"\S*/\S*")
_DIGEST = re.compile(r"\b[0-9a-f]{16,}\b")

ENTRY_POINT_GROUP = hookspecs.ENTRY_POINT_GROUP
hookimpl = pluggy.HookimplMarker(hookspecs.PROJECT)


@dataclass
class PluginRecord:
    """What discovery learnt about one entry point."""

    name: str
    value: str
    distribution: str
    dist_version: str
    plugin: Any = None  # the registered module/object, when loaded
    info: PluginInfo | None = None
    #: what the plugin prefers (its ``sdk_preferences`` answer, or for a plugin of hook API
    #: 5 or earlier the preferences it declared as capabilities); every compile's
    #: ``ctx.preferences``
    preferences: Preferences = field(default_factory=Preferences)
    error: str | None = None  # why it is unavailable (load-time)
    traceback: str | None = None
    #: hooks that raised since discovery and the first error of each (``sdk list``: faulty)
    faults: dict[str, str] = field(default_factory=dict)
    #: the reasons a :class:`sdk.PluginFallbackWarning` was given for (once each)
    fallbacks_warned: set[str] = field(default_factory=set)
    #: whether the one warning of a compile it cannot do here was given (see
    #: :meth:`Registry.compile_status`)
    cannot_compile_warned: bool = False
    _status: str | None = field(default=None, repr=False)
    _compile_status: str | None = field(default=None, repr=False)
    _status_checked: bool = field(default=False, repr=False)

    @property
    def loaded(self) -> bool:
        return self.error is None and self.info is not None


class _CoreImpls:
    """The core's own hookimpls: the innermost answer of wrapper hooks."""

    @hookimpl(trylast=True)
    def sdk_wrap_compiled(self, compiled):
        return compiled


_CORE = "sdk-core"


class _BadAnswer(TypeError):
    """A hook answered with something its contract does not allow (the message says what)."""


class Registry:
    """All discovered plugins and the pluggy manager they are registered in."""

    def __init__(self, eps: Iterable[EntryPoint] | None = None) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.pm.register(_CoreImpls(), name=_CORE)
        self.records: dict[str, PluginRecord] = {}
        self._discover(entry_points(group=ENTRY_POINT_GROUP) if eps is None else eps)

    # -- discovery --------------------------------------------------------

    def _discover(self, eps: Iterable[EntryPoint]) -> None:
        env = config.env()
        for ep in sorted(eps, key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            rec = PluginRecord(
                name=ep.name,
                value=ep.value,
                distribution=getattr(dist, "name", None) or "<unknown distribution>",
                dist_version=getattr(dist, "version", None) or "?",
            )
            if ep.name in self.records:
                first = self.records[ep.name]
                rec.error = (
                    f"the name is already taken by {first.distribution}; "
                    f"uninstall one of the two distributions"
                )
                self.records[f"{ep.name} ({rec.distribution})"] = rec
                continue
            self.records[ep.name] = rec
            # Allow- and deny-lists are checked before anything is imported.
            if ep.name in env.plugins_deny:
                rec.error = "denied by SDK_PLUGINS_DENY; remove it from that variable to use it"
            elif env.plugins_allow is not None and ep.name not in env.plugins_allow:
                rec.error = "not in SDK_PLUGINS_ALLOW; add it to that variable to use it"
            else:
                self._load(ep, rec)

    def _load(self, ep: EntryPoint, rec: PluginRecord) -> None:
        try:
            plugin = ep.load()
        except BaseException as exc:  # noqa: BLE001 - a plugin must never break the rest
            if isinstance(exc, KeyboardInterrupt):
                raise
            rec.error = f"import failed: {describe(exc, one_line=True)}; fix or reinstall {rec.distribution}"
            rec.traceback = traceback.format_exc()
            return
        unmarked = [
            n
            for n in dir(plugin)
            if n.startswith("sdk_")
            and callable(getattr(plugin, n, None))
            and self.pm.parse_hookimpl_opts(plugin, n) is None
        ]
        if unmarked:
            rec.error = (
                f"{', '.join(unmarked)} not decorated with @sdk.hookimpl; "
                "decorate every hook function"
            )
            return
        try:
            self.pm.register(plugin, name=rec.name)
        except Exception as exc:  # pluggy.PluginValidationError and friends
            # pluggy registers hookimpls one by one: drop the ones already in
            if self.pm.get_plugin(rec.name) is not None:
                self.pm.unregister(name=rec.name)
            rec.error = (
                f"invalid hookimpl: {' '.join(str(exc).split())}; a hookimpl may take only "
                "arguments its hook declares in sdk/hookspecs.py"
            )
            return
        unknown = [hc.name for hc in self.pm.get_hookcallers(plugin) or () if not hc.has_spec()]
        if unknown:
            self.pm.unregister(plugin)
            rec.error = (
                f"unknown hook(s) {', '.join(sorted(unknown))}: no such hook in hook API "
                f"{max(SUPPORTED_HOOK_APIS)}; see sdk/hookspecs.py for the names"
            )
            return
        try:
            info = self.pm.subset_hook_caller(
                "sdk_plugin_info", remove_plugins=self._others(rec.name)
            )()
        except Exception as exc:
            self.pm.unregister(plugin)
            rec.error = (
                f"sdk_plugin_info raised: {describe(exc, one_line=True)}; fix that hook or "
                f"reinstall {rec.distribution}"
            )
            return
        problem = _check_info(info, rec.name)
        if problem:
            self.pm.unregister(plugin)
            rec.error = problem
            return
        try:
            preferences = self._preferences(rec.name, info)
        except _BadAnswer as exc:
            self.pm.unregister(plugin)
            rec.error = f"sdk_preferences {exc}; fix that hook or reinstall {rec.distribution}"
            return
        except Exception as exc:
            self.pm.unregister(plugin)
            rec.error = (
                f"sdk_preferences raised: {describe(exc, one_line=True)}; fix that hook or "
                f"reinstall {rec.distribution}"
            )
            return
        rec.plugin, rec.info, rec.preferences = plugin, info, preferences
        retired = info.retired_capabilities
        if retired:
            names = ", ".join(sorted(f"Capability.{r.name}" for r in retired))
            warnings.warn(
                f"plugin {rec.name!r} (hook_api={info.hook_api}) declares {names}, retired "
                f"in hook API 6; it loads and compiles as before, but {retired_fix(retired)}",
                SDKDeprecationWarning,
                stacklevel=2,
            )

    def _preferences(self, name: str, info: PluginInfo) -> Preferences:
        """The plugin's ``sdk_preferences`` answer; for a plugin of hook API 5 or earlier
        that does not answer, the preferences it declared as capabilities (retired in hook API
        6; :meth:`_load` warns once, naming the fix)."""
        answer = self.caller("sdk_preferences", [name])()
        if answer is not None and not isinstance(answer, Preferences):
            raise _BadAnswer(
                f"returned {type(answer).__name__}, not sdk.Preferences; return an "
                "sdk.Preferences (or None for the defaults)"
            )
        if answer is None:
            answer = Preferences.of_retired(info.capabilities)
        return answer

    def _others(self, keep: str) -> list[Any]:
        return [p for n, p in self.pm.list_name_plugin() if n not in (keep, _CORE)]

    # -- queries ------------------------------------------------------------

    def status(self, name: str) -> str | None:
        """None when the plugin is usable here, else why not (and the fix)."""
        rec = self.record(name)
        if rec.error:
            return rec.error
        if not rec._status_checked:
            try:
                rec._status = self.caller("sdk_plugin_status", [name])()
            except Exception as exc:
                rec._status = (
                    f"sdk_plugin_status raised: {describe(exc, one_line=True)}; fix that hook "
                    f"or reinstall {rec.distribution}"
                )
            if isinstance(rec._status, CompileUnavailable):  # usable: it runs what is cached
                rec._compile_status, rec._status = str(rec._status), None
            rec._status_checked = True
        return rec._status

    def compile_status(self, name: str) -> str | None:
        """None when the usable plugin ``name`` can compile here, else why not (and the fix):
        its ``sdk_plugin_status`` answered :class:`sdk.CompileUnavailable`. Such a plugin
        runs the programs the caches hold; a graph or partition that needs a compile goes to
        the chain or ATen (:class:`CannotCompile`)."""
        self.status(name)
        return self.record(name)._compile_status

    def record(self, name: str) -> PluginRecord:
        try:
            return self.records[name]
        except KeyError:
            known = ", ".join(sorted(self.records)) or "none"
            near = difflib.get_close_matches(name, list(self.records), n=1)
            guess = f"did you mean {near[0]!r} (backend='sdk:{near[0]}')? If not, " if near else ""
            raise UnknownPluginError(
                f"no SDK plugin named {name!r} is installed (discovered: {known}); "
                f"{guess}install the wheel that provides it, which must declare an "
                f"{ENTRY_POINT_GROUP!r} entry point named {name!r}"
            ) from None

    def require(
        self, name: str, kind: PluginKind | tuple[PluginKind, ...] | None = None
    ) -> PluginRecord:
        """The usable plugin called ``name`` (of ``kind``, or one of the kinds), or an error
        naming cause and fix."""
        rec = self.record(name)
        why = self.status(name)
        if why:
            raise PluginUnavailableError(
                f"SDK plugin {name!r} from distribution {rec.distribution} "
                f"{rec.dist_version} is unavailable: {why}"
            )
        kinds = (kind,) if isinstance(kind, PluginKind) else kind
        if kinds is not None and rec.info.kind not in kinds:
            wanted = " or ".join(k.value for k in kinds)
            usable = self.usable_names(kinds)
            raise PluginUnavailableError(
                f"SDK plugin {name!r} is a {rec.info.kind.value} plugin, not a {wanted} "
                f"plugin; use one of those here (available: {', '.join(usable) or 'none'})"
            )
        return rec

    def usable_names(self, kinds: tuple[PluginKind, ...]) -> list[str]:
        """The plugins of one of ``kinds`` that load and are usable here, in discovery order."""
        return [
            n
            for n, r in self.records.items()
            if r.loaded and r.info.kind in kinds and self.status(n) is None
        ]

    def caller(self, hook: str, plugins: Iterable[str]) -> Any:
        """A caller of ``hook`` that reaches only the named plugins (and the core)."""
        keep = set(plugins) | {_CORE}
        remove = [p for n, p in self.pm.list_name_plugin() if n not in keep]
        return self.pm.subset_hook_caller(hook, remove_plugins=remove)

    def notify(self, hook: str, strict: bool, **kwargs: Any) -> list[HookFault]:
        """Call observer ``hook`` of every available plugin, each on its own.

        pluggy stops a 1:N call at the first hookimpl that raises, so one plugin's broken
        observer would take the compile, the user's call and the other observers down with
        it. Here a raising observer is a fault of its plugin only (see :meth:`fault`).
        """
        faults = []
        for name in self._observers(hook):
            try:
                self.caller(hook, [name])(**kwargs)
            except Exception as exc:  # noqa: BLE001 - an observer must never break the rest
                faults.append(self.fault(name, hook, exc, strict))
        return faults

    def fault(self, name: str, hook: str, exc: Exception, strict: bool) -> HookFault:
        """Plugin ``name``'s ``hook`` raised ``exc`` and the SDK goes on without that hook.

        The fault is returned (for the graph's report), remembered for ``sdk list`` and
        warned about once per plugin and hook. ``strict`` (``fallback=False`` or debug,
        where nothing may go wrong unseen) raises :class:`sdk.PluginHookError` instead.
        """
        rec = self.records[name]
        fault = HookFault(name, hook, describe(exc, one_line=True))
        first = hook not in rec.faults
        rec.faults.setdefault(hook, fault.error)
        if strict:
            raise PluginHookError(
                f"SDK plugin {name!r}: {hook} raised {fault.error}, and strict mode (options "
                f"fallback=False or debug) is on; fix that hook in {rec.distribution}, or "
                f"deny the plugin with SDK_PLUGINS_DENY={name}"
            ) from exc
        if first:
            warnings.warn(
                f"SDK plugin {name!r} ({rec.distribution} {rec.dist_version}): its {hook} "
                f"raised {fault.error}; the SDK goes on without it and sdk.explain lists "
                f"each time. Fix that hook, deny the plugin (SDK_PLUGINS_DENY={name}), or "
                "silence this warning with warnings.filterwarnings('ignore', "
                "category=sdk.PluginHookWarning)",
                PluginHookWarning,
                stacklevel=3,
            )
        return fault

    def warn_fallback(
        self,
        name: str,
        reason: str,
        ops: list[str],
        went_to: str,
        what: str = "a partition",
        *,
        cannot_compile: bool = False,
    ) -> None:
        """Plugin ``name`` failed to compile ``what`` (a chain's partition, or a kernel-level
        plugin's whole graph: "graph g1_forward") of ``ops`` for ``reason``, which runs in
        ``went_to`` instead: a :class:`sdk.PluginFallbackWarning`, once per plugin and
        reason. ``cannot_compile``: ``what`` needed a compile the plugin cannot do here
        (:class:`CannotCompile`): one warning per process for all of those."""
        rec = self.records[name]
        if cannot_compile:
            self._warn_cannot_compile(rec, ops, went_to, what)
            return
        # (the same failure of another graph names other files: temporary build
        # directories, sources named by their digest)
        key = _DIGEST.sub("<digest>", _PATH.sub("<path>", reason))
        if key in rec.fallbacks_warned:
            return
        rec.fallbacks_warned.add(key)
        shown = ", ".join(ops[:8]) + (f" and {len(ops) - 8} more" if len(ops) > 8 else "")
        warnings.warn(
            f"SDK plugin {name!r} ({rec.distribution} {rec.dist_version}) could not compile "
            f"{what} of {len(ops)} op(s) ({shown}); it runs in {went_to} instead: "
            f"{reason}. Bring a plugin up with options fallback=False and debug=True (they "
            "raise the plugin's error); sdk.explain lists every graph and partition that fell "
            "back. This warning is given once per plugin and reason (silence it with "
            "warnings.filterwarnings('ignore', category=sdk.PluginFallbackWarning))",
            PluginFallbackWarning,
            stacklevel=3,
        )

    def _warn_cannot_compile(
        self, rec: PluginRecord, ops: list[str], went_to: str, what: str
    ) -> None:
        if rec.cannot_compile_warned:
            return
        rec.cannot_compile_warned = True
        shown = ", ".join(ops[:8]) + (f" and {len(ops) - 8} more" if len(ops) > 8 else "")
        warnings.warn(
            f"SDK plugin {rec.name!r} ({rec.distribution} {rec.dist_version}) cannot compile "
            f"on this machine: {(rec._compile_status or '').rstrip('.')}. What the caches hold still runs "
            f"compiled, but {what} of {len(ops)} op(s) ({shown}) is not there and runs in "
            f"{went_to} instead, as does every other graph or partition of this process "
            "that needs a compile (sdk.explain lists each, with this reason). This warning "
            "is given once per process (silence it with warnings.filterwarnings('ignore', "
            "category=sdk.PluginFallbackWarning))",
            PluginFallbackWarning,
            stacklevel=4,
        )

    def _observers(self, hook: str) -> list[str]:
        """The available plugins that implement ``hook``, in pluggy's call order."""
        impls = reversed(getattr(self.pm.hook, hook).get_hookimpls())
        names = dict.fromkeys(i.plugin_name for i in impls if i.plugin_name != _CORE)
        return [n for n in names if self.status(n) is None]


class CannotCompile(RuntimeError):
    """A graph or partition needs a compile, and its plugin cannot compile here
    (:meth:`Registry.compile_status`): raised by the core instead of calling the plugin's
    compile hook; the graph goes to the chain or ATen, with this message as the reason."""

    def __init__(self, plugin: str, why: str) -> None:
        super().__init__(
            f"not in the cache, and sdk:{plugin} cannot compile on this machine: {why}"
        )


def observe(
    reg: Registry, ctx: CompileContext, faults: list[HookFault], hook: str, **kwargs: Any
) -> None:
    """Call observer ``hook`` of every available plugin; the hooks that raised go to
    ``faults`` (a graph's report), or raise in strict mode (``fallback=False`` or debug),
    where nothing may go wrong unseen."""
    faults.extend(reg.notify(hook, strict(ctx), ctx=ctx, **kwargs))


def strict(ctx: CompileContext) -> bool:
    """Strict mode (:attr:`sdk.CoreOptions.strict`): ``fallback`` off or ``debug`` on (the
    option or ``SDK_DEBUG=1``); a plugin's fault raises."""
    return ctx.core_options.strict


def _check_info(info: Any, ep_name: str) -> str | None:
    if not isinstance(info, PluginInfo):
        return (
            f"sdk_plugin_info returned {type(info).__name__}, not sdk.PluginInfo; "
            "return a PluginInfo from that hook"
        )
    if info.name != ep_name:
        return (
            f"declares the name {info.name!r} but its entry point is named {ep_name!r}; "
            "make the two agree"
        )
    if info.hook_api not in SUPPORTED_HOOK_APIS:
        return (
            f"written for hook API {info.hook_api}, but this SDK supports "
            f"{min(SUPPORTED_HOOK_APIS)}..{max(SUPPORTED_HOOK_APIS)}; install a plugin "
            "release built for this API, or upgrade torch-backend-sdk"
        )
    return None


_lock = threading.Lock()
_registry: Registry | None = None


def registry() -> Registry:
    """The process-wide registry, discovered on first use."""
    global _registry
    with _lock:
        if _registry is None:
            _registry = Registry()
        return _registry


def set_registry(reg: Registry | None) -> Registry | None:
    """Swap the process-wide registry (tests, tools); returns the previous one."""
    global _registry
    with _lock:
        prev, _registry = _registry, reg
        return prev
