"""``sdk.explain``: say what became of every op of what ran, compiling only what must be;
``sdk.collect_reports``: the reports of the graphs compiled inside a block; ``sdk.reset``:
forget what ``torch.compile`` compiled."""

from __future__ import annotations

import contextlib
import enum
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sdk.report import ExplainReport

if TYPE_CHECKING:
    import torch

# (torch is imported where it is used: ``import sdk`` imports no torch, so that
# ``python -m sdk --help`` is quick)

#: the plugin explain compiles with when nothing names one
DEFAULT_PLUGIN = "cpu_cpp"
#: the backends explain compiled with: a graph the user's own backend compiled is preferred
_own: weakref.WeakSet[Any] = weakref.WeakSet()


def explain(
    fn: Callable[..., Any],
    *args: Any,
    backend: Any = None,
    mode: str | None = None,
    dynamic: bool | None = None,
    verbose: bool = False,
    **options: Any,
) -> ExplainReport:
    """Run ``fn`` once on ``args`` and report each graph an SDK backend compiled for it.

    ``fn`` may be what ``torch.compile`` returned (with an SDK backend), or the model or
    function it compiled: graphs compiled earlier in this process for these inputs (Dynamo's
    own guards choose them) are reported without compiling again, with their compile times
    then. Otherwise ``fn`` is compiled now, and ``report.compile_note`` says why (never
    compiled; compiled with another backend, other options, or not for these inputs).

    ``backend`` is ``"sdk:<plugin>"`` or an ``sdk.backend(...)``; ``options`` are the
    backend's options (added to the backend's own) and ``mode`` is ``torch.compile``'s. With
    none of them, any SDK backend's graphs are reported, and a compile takes the backend
    ``fn`` was compiled with (its mode and options too), else ``sdk:cpu_cpp``; with any, only
    graphs compiled with that plugin and those options (defaults resolved, the mode's
    included) count; where ``fn`` is what ``torch.compile`` returned with an SDK backend of
    that plugin, what it was made with fills in what is not given: its options (under those
    given), its mode unless ``mode`` is. ``dynamic`` is ``torch.compile``'s (True: symbolic
    sizes, see ``GraphReport.sizes``); given, ``explain`` compiles.

    The report prints (``str()``) in lines of at most 160 characters, a kernel's long list of
    ATen ops shortened ("12 ops: ..., ... (9 more)"); with ``verbose`` it prints every
    detail: all the ops, and the graph passes that rewrote nothing
    (``report.text(verbose=True)`` too).

    If an output needs grad, the backward runs as well (through ``torch.autograd.grad``, so
    no ``.grad`` is touched) and its graph is reported. Each graph break is reported with
    Dynamo's reason (``report.breaks``).
    """
    import torch

    from sdk.core import pipeline, records
    from sdk.core.adapters import torch_private as tp

    parts = tp.compiled_parts(fn)
    original, used = parts if parts is not None else (fn, None)
    cached = tp.cached_backends(original)
    hint = next(filter(_is_sdk, [used, *(cached or ())]), None)
    asked = _asked(backend, options, hint, mode, used if _is_sdk(used) else None)
    why, run = _plan(fn, parts is not None, used, cached, asked, dynamic)

    fresh: list[Any] = []
    serial = records.next_serial()
    watch = records.BreakWatch()
    token = pipeline.collect_reports(fresh)
    try:
        with records.watching() as ran:
            if run is not None:
                out = run(*args)
                if not (ran and all(asked.fits_record(r) for r in ran)):
                    why, run = _mismatch(ran, asked), None  # (compiled otherwise, or not at all)
                    ran.clear()
            if run is None:
                tp.reset_dynamo(keep_compiled=True)  # (no sizes of earlier calls: a cold compile)
                out = asked.compile(original, dynamic)(*args)
        outs = [t for t in _tensors(out) if t.requires_grad and t.grad_fn is not None]
        leaves = _leaves(outs)
        if outs and leaves:
            torch.autograd.grad(outs, leaves, [torch.ones_like(t) for t in outs], allow_unused=True)
    finally:
        pipeline.stop_collecting(token)
    new = sum(r.serial >= serial for r in ran)
    seen = [r.graph_break for r in ran if r.graph_break]
    return ExplainReport(
        graphs=[g for r in ran for g in r.reports],
        breaks=watch.breaks(seen, counted=bool(new)),
        compiled_now=bool(fresh),
        compile_note=_note(why, ran, new, fresh),
        dynamo_compiles=new,
        verbose=verbose,
    )


@contextlib.contextmanager
def collect_reports() -> Iterator[ExplainReport]:
    """The reports of every graph an SDK backend compiles inside the block::

        with sdk.collect_reports() as compiled:
            loss = torch.compile(model, backend="sdk:cpu_cpp")(x).sum()
            loss.backward()
        print(compiled)  # as sdk.explain prints: kernels, fallbacks, graph breaks

    Yields an :class:`sdk.ExplainReport` whose ``graphs`` fill as graphs compile (a backward
    graph compiled in autograd's thread included: it belongs to the compile that traced it),
    and whose ``breaks`` (Dynamo's graph breaks while the block ran) and ``compiled_now`` are
    set when the block ends. Unlike :func:`explain` it runs nothing itself and reports only
    what compiled in the block, never a graph compiled earlier. Blocks may nest: each
    collects what compiled inside it.
    """
    from sdk.core import pipeline, records

    report = ExplainReport(compile_note="")
    watch = records.BreakWatch()
    token = pipeline.collect_reports(report.graphs)
    try:
        yield report
    finally:
        pipeline.stop_collecting(token)
        report.breaks = watch.breaks([g.graph_break for g in report.graphs if g.graph_break])
        report.compiled_now = bool(report.graphs)


def reset(*, keep_compiled: bool = False) -> None:
    """Forget what ``torch.compile`` compiled in this process (``torch._dynamo.reset()``):
    the next call of a compiled function traces and compiles again (the SDK's on-disk
    caches may still serve its programs).

    With ``keep_compiled`` the functions compiled so far stay compiled; only what Dynamo
    remembers of the frames it has seen (the sizes behind its automatic dynamic shapes) is
    forgotten, so that a backend compiled next gets the static graphs a fresh process would
    (a benchmark comparing backends in one process wants this).
    """
    from sdk.core.adapters import torch_private as tp

    tp.reset_dynamo(keep_compiled=keep_compiled)


# -- which graphs answer, and what explain compiles with -------------------------------------


@dataclass
class _Asked:
    """The backend asked for: a plugin, its options and torch.compile's mode to compile with;
    ``resolved``: the options (defaults resolved) a compile must have had to count, None for
    any SDK backend's."""

    plugin: str
    options: dict[str, Any] = field(default_factory=dict)
    mode: str | None = None
    resolved: Mapping[str, Any] | None = None

    def fits(self, plugin: str, options: Mapping[str, Any]) -> bool:
        if self.resolved is None:
            return True
        return plugin == self.plugin and dict(options) == dict(self.resolved)

    def fits_record(self, record: Any) -> bool:
        from sdk.core.registry import registry

        return record.registry is registry() and self.fits(record.plugin, record.options)

    def compile(self, original: Callable, dynamic: bool | None) -> Callable:
        import torch

        from sdk.core.pipeline import Backend

        # a new backend object: Dynamo guards on the backend, so it traces afresh
        backend = Backend(self.plugin, self.options)
        _own.add(backend)
        return torch.compile(original, backend=backend, mode=self.mode, dynamic=dynamic)


def _is_sdk(used: Any) -> bool:
    from sdk.core.pipeline import Backend

    return used is not None and isinstance(used.compiler, Backend)


def _asked(
    backend: Any, options: Mapping[str, Any], hint: Any, mode: str | None, made: Any
) -> _Asked:
    """What ``backend``, ``options`` and ``mode`` ask for; ``hint``: the SDK backend ``fn`` was
    compiled with (or None), compiled with if explain must and nothing is given; ``made``:
    the SDK backend of what torch.compile returned (or None), whose mode and options fill
    in what is not given for its plugin."""
    from sdk.core import options as opts
    from sdk.core.pipeline import COMPILERS, Backend
    from sdk.core.registry import registry

    own = {} if hint is None else {**hint.compiler.options, **dict(hint.options or {})}
    if backend is None and not options and mode is None:
        if hint is None:
            return _Asked(DEFAULT_PLUGIN)
        return _Asked(hint.compiler.name, own, hint.mode)
    base: dict[str, Any] = {}
    if backend is None:
        name = hint.compiler.name if hint is not None else DEFAULT_PLUGIN
    elif isinstance(backend, str):
        name = backend.removeprefix("sdk:")
    elif isinstance(backend, Backend):
        name, base = backend.name, dict(backend.options)
    else:
        raise TypeError(
            f"sdk.explain: backend must be 'sdk:<plugin>' or sdk.backend(...), "
            f"got {type(backend).__name__}"
        )
    if made is not None and made.compiler.name == name:
        # (what torch.compile made it with, unless given now)
        base = {**made.compiler.options, **dict(made.options or {}), **base}
        mode = made.mode if mode is None else mode
    raw = {**base, **options}
    Backend(name, raw)  # an unknown plugin or option raises here, in one line
    info = registry().require(name, COMPILERS).info
    return _Asked(name, raw, mode, opts.as_mapping(opts.resolve(info, mode, raw)))


def _plan(
    fn: Callable,
    compiled: bool,
    used: Any,
    cached: list[Any] | None,
    asked: _Asked,
    dynamic: bool | None,
) -> tuple[str | None, Callable | None]:
    """Why explain must compile (None: it need not), and else what to run: what
    ``torch.compile`` returned (``compiled``) as it is, or a model or function as
    ``torch.compile`` with the SDK backend it was compiled with runs it (through the graphs
    Dynamo keeps for it; compiling only where none fits these inputs, as the user's next
    call would)."""
    from sdk.core.adapters import torch_private as tp

    if dynamic is not None:
        return f"dynamic={dynamic} asks for a compile of its own", None
    if compiled:
        if used is None:  # (this torch does not tell which backend: what runs tells)
            return None, fn
        if not _is_sdk(used):
            return f"it was compiled with backend {used.name!r}, not an SDK backend", None
        if asked.resolved is not None:
            why = _differs_from(used, asked)
            if why:
                return why, None
        return None, fn
    if not cached:
        return "not compiled in this process", None
    ours = [c for c in cached if _is_sdk(c)]
    if not ours:
        names = ", ".join(dict.fromkeys(repr(c.name) for c in cached))
        return f"compiled in this process only with backend {names}", None
    fitting = [c for c in ours if asked.resolved is None or _differs_from(c, asked) is None]
    fitting.sort(key=lambda c: c.compiler in _own)  # the user's own backends first
    if not fitting:
        return _differs_from(ours[0], asked), None
    return None, tp.run_with(fitting[0], fn)


def _differs_from(used: Any, asked: _Asked) -> str | None:
    """Why the SDK backend ``used`` is not the one asked for, or None."""
    from sdk.core import options as opts
    from sdk.core.pipeline import COMPILERS
    from sdk.core.registry import registry

    name = used.compiler.name
    try:
        info = registry().require(name, COMPILERS).info
        resolved = opts.as_mapping(
            opts.resolve(info, used.mode, {**used.compiler.options, **(used.options or {})})
        )
    except Exception:  # noqa: BLE001 - its own options are bad: running it says so
        return None
    return None if asked.fits(name, resolved) else _differs(name, resolved, asked)


def _mismatch(ran: list[Any], asked: _Asked) -> str:
    if not ran:
        return (
            "no graph an SDK backend compiled earlier in this process runs for these inputs "
            "(Dynamo's guards: other sizes, dtypes, devices or grad mode)"
        )
    other = next(r for r in ran if not asked.fits_record(r))
    if asked.fits(other.plugin, other.options):
        return "the plugins installed changed since its graphs were compiled (another registry)"
    return _differs(other.plugin, other.options, asked)


def _differs(plugin: str, options: Mapping[str, Any], asked: _Asked) -> str:
    if plugin != asked.plugin:
        return f"its graphs were compiled by sdk:{plugin}, not sdk:{asked.plugin}"
    want = asked.resolved or {}
    keys = sorted(k for k in {*options, *want} if options.get(k) != want.get(k))
    diff = ", ".join(f"{k}={_plain(options.get(k))} (asked: {_plain(want.get(k))})" for k in keys)
    return f"its graphs were compiled by sdk:{plugin} with other options: {diff}"


def _plain(value: Any) -> str:
    """An option's value in plain words: an enum by its value (a mode's wrappers are
    capabilities: ``graph_capture``), a sequence by its items ("none" when empty), a
    string unquoted."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (tuple, list, frozenset, set)):
        items = [_plain(v) for v in value]
        return "none" if not items else items[0] if len(items) == 1 else f"[{', '.join(items)}]"
    return str(value)


def _note(why: str | None, ran: list[Any], new: int, fresh: list[Any]) -> str:
    if why is not None:
        why = f"compiled now: {why}"
        if not ran:
            return (
                f"{why}; Dynamo handed the SDK no graph (no tensor operation, or the "
                "recompile limit torch._dynamo.config.recompile_limit reached for this code: "
                "it runs eagerly)"
            )
        return why
    if new:
        return (
            f"compiled now: {new} graph(s) for these inputs (its first call, or Dynamo's "
            "guards failed for those compiled before)"
        )
    plugins = ", ".join(dict.fromkeys(f"sdk:{r.plugin}" for r in ran))
    note = f"no new compile: the graphs {plugins} compiled earlier in this process"
    if fresh:
        kinds = ", ".join(dict.fromkeys(g.kind for g in fresh))
        note += f" ({kinds} compiled now, at its first run)"
    return note


def _tensors(x: Any) -> list[torch.Tensor]:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item)]
    if isinstance(x, dict):
        return [t for item in x.values() for t in _tensors(item)]
    return []


def _leaves(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The leaf tensors the outputs' autograd graph accumulates into (inputs, parameters)."""
    import torch

    leaves: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack = [t.grad_fn for t in outs if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        leaf = getattr(fn, "variable", None)
        if isinstance(leaf, torch.Tensor):
            leaves[id(leaf)] = leaf
        stack.extend(f for f, _ in fn.next_functions)
    return list(leaves.values())
