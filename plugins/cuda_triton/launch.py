"""Load rendered Triton sources and turn each into a lean launcher ``fn(*tensors)``.

Modules
-------
Each source is written to ``cache_dir("triton", "kernels")/k<sha256>.py``
(named by the hash of the source; an existing file is used only if its text is
the source) and imported with importlib, once per process. Triton needs the
file: ``@triton.jit`` reads its function's source through ``inspect``.

Launchers
---------
Sizes are static per kernel, so the grid and the keyword arguments are
computed once when the launcher is built. A launcher takes the kernel's
buffers in ``Kernel.args`` order; each buffer's ``data_ptr()`` must be
element 0 of the kernel's index space (indices carry the layout's offset).

On a GPU the first call goes through ``kernel[grid](...)``, which compiles and
returns the ``CompiledKernel``; later calls skip Triton's Python dispatch
(argument binding, specialisation key, cache lookup) and call
``CompiledKernel.run(gx, gy, gz, stream, function, packed_metadata,
launch_metadata, enter_hook, exit_hook, *args, *constexprs)`` directly: the
signature Triton's own ``JITFunction.run`` uses in 3.x. If that call is
refused (``TypeError`` from the C launcher's argument parsing, before any
launch) the launcher stays on the portable ``kernel[grid]`` path; while
Triton launch hooks (profilers) are active, or another device is current, a
call takes the portable path too. Under ``TRITON_INTERPRET=1`` only the portable path
exists and CPU tensors are accepted.

Split reductions launch a chain of kernels (two for one reduction stage; see
:mod:`.split`) and pass scratch buffers after the arguments; the scratch is allocated on the first call per device and reused
(so one launcher must not run concurrently on two streams).

Measured configurations
-----------------------
On a GPU, :func:`kernel_choices` offers each static kernel's other launch configurations
(:func:`.heuristics.alternatives`: the few nearest the default, every candidate with the
``autotune`` option) to the core (``sdk_kernel_choices``), as sources whose ``meta["config"]``
is the configuration; the core compiles them through :func:`compile_sources`, times them
with ``torch.cuda.synchronize``, keeps the fastest and caches the choice. Under the
interpreter nothing is offered, so nothing is timed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

import sdk
from sdk.cache import cache_dir, stable_hash, write_atomic

from . import heuristics, interpreting, records
from .canonical import canonical

_MODULES: dict[tuple[str, bool], ModuleType] = {}
_log = logging.getLogger(__name__)


def load_module(source: str) -> ModuleType:
    """Import ``source`` from its file in the cache (once per process)."""
    digest = stable_hash("cuda_triton-source", source)
    interp = interpreting()  # @triton.jit decides at decoration time
    mod = _MODULES.get((digest, interp))
    if mod is not None:
        return mod
    name = f"k{digest[:40]}"
    path = cache_dir("triton", "kernels") / f"{name}.py"
    try:
        ok = path.read_text() == source
    except OSError:
        ok = False
    if not ok:
        write_atomic(path, source.encode())
    modname = f"sdk_cuda_triton_{name}" + ("_interp" if interp else "")
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    if interp:
        from .interp import prepare

        prepare(mod)
    _MODULES[(digest, interp)] = mod
    return mod


# ---------------------------------------------------------------------------
# One kernel launch
# ---------------------------------------------------------------------------


def _hooks_probe() -> Callable[[], bool]:
    """A cheap ``() -> bool``: are Triton launch hooks (profilers) active right now?

    Triton >= 3.5 keeps them in ``knobs.runtime`` as ``HookChain`` objects that
    are never None (active when they hold calls); older 3.x in ``knobs`` or on
    ``CompiledKernel`` as None-or-callable.
    """
    try:
        from triton import knobs

        holder: Any = knobs.runtime
    except ImportError:
        from triton.compiler import CompiledKernel as holder

    def active() -> bool:
        for hook in (
            getattr(holder, "launch_enter_hook", None),
            getattr(holder, "launch_exit_hook", None),
        ):
            if hook is not None and getattr(hook, "calls", True):
                return True
        return False

    return active


def _fast(compiled: Any, grid: tuple[int, int, int], consts: tuple[Any, ...]) -> Callable | None:
    """A direct ``CompiledKernel.run`` caller, or None where it is not available.

    It returns False without launching when the current device changed or
    launch hooks became active (they need Triton's launch metadata).
    """
    try:
        from triton.runtime import driver

        run, function = compiled.run, compiled.function
        packed = compiled.packed_metadata
        get_device = driver.active.get_current_device
        get_stream = driver.active.get_current_stream
        hooks_active = _hooks_probe()
    except (ImportError, AttributeError):
        return None
    g0, g1, g2 = grid
    device = get_device()

    def fast(*args: Any) -> bool:
        dev = get_device()
        if dev != device or hooks_active():
            return False
        run(g0, g1, g2, get_stream(dev), function, packed, None, None, None, *args, *consts)
        return True

    return fast


def kernel_call(
    jit_fn: Any,
    grid: tuple[int, int, int],
    constexprs: dict[str, int],
    options: dict[str, Any],
    nargs: int | None = None,
    *,
    entry: bool = True,
    record_key: str | None = None,
    record: records.KernelRecord | None = None,
) -> Callable[..., None]:
    """``fn(*args)`` launching ``jit_fn`` on ``grid`` with fixed constexprs and options.

    ``fn.path()`` says which launch path the next call takes ("portable" or "fast"). With
    ``nargs`` (the kernel's argument count), on a GPU, the kernel has a state in the shim
    (:mod:`.native`) and, with ``entry``, ``fn.native`` is its entry for the SDK's native
    runner, ready from its first launch on. With ``record`` (the kernel's
    :class:`~.records.KernelRecord`), the shim loads its cubin at the first launch, from the
    runner or from ``fn``, and Triton is the fallback; without it, the first launch through
    Triton stores the kernel's record under ``record_key``.
    """
    kw = {**constexprs, **options}
    if interpreting() or not torch.cuda.is_available():
        import numpy as np

        from .interp import checking_bounds

        portable = jit_fn[grid]
        name, asserts = getattr(jit_fn, "__name__", "kernel"), bool(kw.get("debug"))

        def interpreted(*args: Any) -> None:
            # NaN/inf results are kernel semantics, not errors: keep NumPy quiet
            with np.errstate(all="ignore"), checking_bounds(name, list(args), asserts=asserts):
                portable(*args, **kw)

        interpreted.path = lambda: "portable"  # type: ignore[attr-defined]
        return interpreted
    consts = tuple(constexprs.values())
    native = None
    if nargs is not None:
        from .native import Native

        name = getattr(jit_fn, "__name__", "kernel")
        native = Native(name, grid, nargs, entry=entry, record_key=record_key)
        if record is not None and not native.adopt(record, torch.cuda.current_device()):
            record = None
    state: dict[str, Any] = {
        "fast": native.launch if native is not None and record is not None else None,
        "tried": False,
        "portable": None,
    }

    def portable() -> Any:
        if state["portable"] is None:
            state["portable"] = jit_fn[grid]  # (a lazy kernel's module is imported here)
        return state["portable"]

    def call(*args: Any) -> None:
        fast = state["fast"]
        if fast is not None:
            try:
                if fast(*args):
                    return
            except TypeError:
                state["fast"] = None  # refused before launching: stay portable
        if not state["tried"]:
            state["tried"] = True
            records.count_triton_jit(
                getattr(jit_fn, "__name__", "kernel"), _why_triton(native, args)
            )
            compiled = portable()(*args, **kw)
            state["fast"] = _fast(compiled, grid, consts)
            if native is not None and state["fast"] is not None:
                native.fill(compiled, args)
            return
        portable()(*args, **kw)

    call.path = lambda: "fast" if state["fast"] is not None else "portable"  # type: ignore[attr-defined]
    if native is not None and native.entry is not None:
        call.native = native.entry  # type: ignore[attr-defined]
    if native is not None:
        call.native_state = native  # type: ignore[attr-defined]

    def warmup(dtypes: list[Any]) -> Any:
        """Compile without launching (Triton takes dtypes for pointer arguments)."""
        records.count_triton_jit(getattr(jit_fn, "__name__", "kernel"), "precompiled")
        return jit_fn.warmup(*dtypes, grid=grid, **kw)

    call.warmup = warmup  # type: ignore[attr-defined]
    return call


class _LazyJit:
    """A kernel's ``@triton.jit`` function, its module imported at first use: a kernel
    launched from its record never needs it."""

    def __init__(self, source: str, fn: str) -> None:
        self.source, self.__name__ = source, fn

    @functools.cached_property
    def fn(self) -> Any:
        return getattr(load_module(self.source), self.__name__)

    def __getitem__(self, grid: Any) -> Any:
        return self.fn[grid]

    def warmup(self, *args: Any, **kw: Any) -> Any:
        return self.fn.warmup(*args, **kw)


# ---------------------------------------------------------------------------
# A kernel source -> launcher
# ---------------------------------------------------------------------------


def _split_config(
    meta: dict[str, Any], cfg: dict[str, Any], names: list[str]
) -> tuple[dict[str, int], dict[str, Any]]:
    consts = {k: int(cfg[k]) for k in names}
    opts: dict[str, Any] = {k: int(cfg[k]) for k in ("num_warps", "num_stages") if k in cfg}
    if meta.get("debug"):
        # device_assert is compiled only in debug mode; without the integer-overflow
        # checks debug mode adds, as Inductor compiles its kernels
        opts["debug"] = True
        opts["sanitize_overflow"] = False
    return consts, opts


def _grid(spec: list[list[Any]], consts: dict[str, int]) -> tuple[int, int, int]:
    """Grid from per-axis ``[numel, divisor constexpr or None]`` specs."""
    dims = [heuristics.cdiv(int(n), consts[b]) if b else int(n) for n, b in spec]
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def _grid_src(spec: list[list[Any]], consts: dict[str, int]) -> list[str]:
    """The grid's three axes as Python expressions over the size arguments (a numel that is a
    string is such an expression, see ``render``)."""
    dims = [f"-(-({n}) // {int(consts[b])})" if b else f"({n})" for n, b in spec]
    return dims + ["1"] * (3 - len(dims))


def size_programs(
    meta: dict[str, Any], consts: dict[str, int]
) -> tuple[list[list[str]], str | None]:
    """A kernel of symbolic sizes' grids (the kernel's, then its persistent alternative's
    where it has one) as Python expressions over its size arguments, and the condition
    under which the alternative runs (None: no alternative)."""
    grids = [_grid_src(meta["grid"], consts)]
    alt = meta.get("alt")
    if alt is None:
        return grids, None
    aconsts, _aopts = _split_config(meta, alt["config"], alt["constexprs"])
    return [*grids, _grid_src(alt["grid"], aconsts)], alt["when"]


def _spec_key_src(names: list[str]) -> str:
    """What Triton specializes an integer argument on, as a Python expression: divisibility
    by 16, and whether it needs 64 bits (sizes are >= 2, so never the value 1). A compiled
    kernel is right only for sizes of its key."""
    div = "".join(f"{n} % 16 == 0, " for n in names)
    return f"({div}({' | '.join(names)}) >> 31)"


class _Variant:
    """One Triton function of a kernel of symbolic sizes, and its compiled kernels by key."""

    def __init__(
        self,
        jit_fn: Any,
        constexprs: dict[str, int],
        options: dict[str, Any],
        index: int = 0,
    ) -> None:
        self.jit_fn, self.kw = jit_fn, {**constexprs, **options}
        self.consts = tuple(constexprs.values())
        self.fast: dict[tuple, Any] = {}
        #: 0 the kernel, 1 its persistent alternative; the shim's state (.native), if any
        self.index = index
        self.sym: Any = None

    def slow(self, grid: tuple[int, int, int], key: tuple, args: tuple) -> None:
        """Triton's own launch; its first per key compiles, then that key's calls go direct."""
        if key in self.fast:
            self.jit_fn[grid](*args, **self.kw)
            return
        records.count_triton_jit(
            getattr(self.jit_fn, "__name__", "kernel"), "symbolic sizes (no records)"
        )
        compiled = self.jit_fn[grid](*args, **self.kw)
        self.fast[key] = _direct(compiled, self.consts)
        if self.sym is not None:  # the runner launches this key natively from now on
            self.sym.fill(self.index, compiled, args)


def _direct(compiled: Any, consts: tuple[Any, ...]) -> tuple | None:
    """What a direct ``CompiledKernel.run`` call needs (see :func:`_fast`), or None."""
    try:
        from triton.runtime import driver

        return (
            compiled.run,
            compiled.function,
            compiled.packed_metadata,
            driver.active.get_current_device(),
            consts,
        )
    except (ImportError, AttributeError):
        return None


def symbolic_call(
    mod: Any, meta: dict[str, Any], opts: dict[str, Any], consts: dict[str, int]
) -> Callable[..., None]:
    """``fn(*buffers, *sizes)`` for a kernel of symbolic sizes, generated as Python source:
    the grid from the sizes at each call. With ``meta["alt"]`` (a persistent form for rows
    that fit one block) the call takes it where ``alt["when"]`` holds. On a GPU, after
    Triton's own first launch for a specialization key (the sizes' and the pointers'), that
    key's calls run the compiled kernel directly (unless launch hooks are active or another
    device is current), and ``fn.native`` (:class:`.native.SymNative`) launches it from the
    runner without Python: the shim computes the grid, the variant and the key from the
    size arguments."""
    names, nargs = meta["sizes"], len(meta["args"])
    params = [f"a{i}" for i in range(nargs)] + list(names)
    args = ", ".join(params)
    grids, when = size_programs(meta, consts)
    variants = [("main", _Variant(getattr(mod, meta["fn"]), consts, opts), grids[0])]
    alt = meta.get("alt")
    if alt is not None:
        aconsts, aopts = _split_config(meta, alt["config"], alt["constexprs"])
        variants.insert(
            0, ("alt", _Variant(getattr(mod, alt["fn"]), aconsts, aopts, index=1), grids[1])
        )
    interp = interpreting() or not torch.cuda.is_available()
    env: dict[str, Any] = {}
    key = _spec_key_src(names)
    if not interp:  # Triton specializes pointers on their alignment too
        key = f"({key}, {', '.join(f'a{i}.data_ptr() % 16 == 0' for i in range(nargs))})"
    lines = [f"def call({args}):", f"    key = {key}"]
    for label, v, grid in variants:
        env[label] = v
        ind = "    "
        if label == "alt":
            lines.append(f"    if {alt['when']}:")
            ind = "        "
        lines.append(f"{ind}grid = ({', '.join(grid)})")
        if interp:
            lines.append(f"{ind}return _interp({label}, grid, ({args},))")
            continue
        lines += [
            f"{ind}ent = {label}.fast.get(key)",
            f"{ind}if ent is not None:",
            f"{ind}    run, function, packed, device, consts = ent",
            f"{ind}    dev = _get_device()",
            f"{ind}    if dev == device and not _hooks_active():",
            (
                f"{ind}        return run(*grid, _get_stream(dev), function, packed, None, "
                f"None, None, {args}, *consts)"
            ),
            f"{ind}return {label}.slow(grid, key, ({args},))",
        ]
    if interp:
        import numpy as np

        from .interp import checking_bounds

        def _interp(v: _Variant, grid: tuple, a: tuple) -> None:
            if 0 in grid:
                return
            name = getattr(v.jit_fn, "__name__", "kernel")
            with (
                np.errstate(all="ignore"),
                checking_bounds(name, list(a), asserts=bool(v.kw.get("debug"))),
            ):
                v.jit_fn[grid](*a, **v.kw)

        env["_interp"] = _interp
    else:
        from triton.runtime import driver

        env.update(
            _get_device=driver.active.get_current_device,
            _get_stream=driver.active.get_current_stream,
            _hooks_active=_hooks_probe(),
        )
    source = "\n".join(lines)
    exec(source, env)  # noqa: S102 - generated from the renderer's size expressions
    call = env["call"]
    if not interp:  # the runner's entry: the shim computes the grid and the key
        from .native import SymNative

        sym = SymNative(meta["fn"], nargs, list(names), grids, when)
        if sym.entry is not None:
            for _label, v, _grid in variants:
                v.sym = sym
            call.native = sym.entry  # type: ignore[attr-defined]
        call.native_state = sym  # type: ignore[attr-defined]
    call.path = lambda: (
        "fast"
        if any(  # type: ignore[attr-defined]
            e for _l, v, _g in variants for e in v.fast.values()
        )
        else "portable"
    )
    call.source = source  # type: ignore[attr-defined]
    return call


def _why_triton(native: Any, args: tuple) -> str:
    """Why a kernel's first launch goes through Triton's JIT path."""
    if native is None:
        return "no shim state (nargs not given)"
    if native.refused is not None:
        return f"the record was refused: {native.refused}"
    if native.record is not None:
        return f"the record's cubin did not launch: {native.not_launched(args)}"
    return "no record stored"


def bind(src: sdk.KernelSource, config: dict[str, Any] | None = None) -> Callable[..., None]:
    """The launcher of ``src`` with ``config`` (default: the renderer's), compiled under its
    :func:`canonical` names."""
    return _bind(canonical(src), config)


def _bind(
    src: sdk.KernelSource,
    config: dict[str, Any] | None = None,
    fresh: dict[str, records.KernelRecord] | None = None,
) -> Callable[..., None]:
    """:func:`bind` of a source already under its :func:`canonical` names; ``fresh``: records
    just made (by the compile workers), by record key, looked up before the disk cache.

    A launcher of kernels with no record yet has ``precompile`` (the caller's warm-up) and
    ``offline`` (the kernels as the compile workers take them, :data:`.offline.Offline`)."""
    meta = src.meta
    cfg = dict(meta["config"] if config is None else config)
    consts, opts = _split_config(meta, cfg, meta["constexprs"])
    if meta.get("sizes"):  # symbolic sizes: the grid at each call (no split reductions)
        if meta["mode"] == "split":
            raise ValueError(f"kernel {src.name}: a split reduction of symbolic sizes")
        mod = load_module(src.source)
        return symbolic_call(mod, {**meta, "fn": src.entry}, opts, consts)
    grid = _grid(meta["grid"], consts)
    if 0 in grid:
        return lambda *args: None
    names = tuple(dt for _name, _storage, dt, _role in meta["args"])
    dtypes = [getattr(torch, dt) for dt in names]
    if meta["mode"] != "split":
        kw = {**consts, **opts}
        ((key, rec),) = _records(src.source, [(src.entry, grid, kw)], dtypes, fresh)
        jit = _LazyJit(src.source, src.entry)
        if rec is None:
            jit.fn  # noqa: B018 - imported now where the kernel compiles through Triton
        main = kernel_call(jit, grid, consts, opts, len(dtypes), record_key=key, record=rec)
        if rec is None:
            main.precompile = lambda: [main.warmup(dtypes)]  # type: ignore[attr-defined]
            main.offline = [(src.source, src.entry, names, grid, kw, key)]  # type: ignore[attr-defined]
        return main
    return _bind_split(src, meta, cfg, consts, opts, grid, dtypes, fresh)


def _bind_split(
    src: sdk.KernelSource,
    meta: dict[str, Any],
    cfg: dict[str, Any],
    consts: dict[str, int],
    opts: dict[str, Any],
    grid: tuple[int, int, int],
    dtypes: list[torch.dtype],
    fresh: dict[str, records.KernelRecord] | None,
) -> Callable[..., None]:
    """The launcher of a split reduction's chain (:mod:`.split`): every kernel in
    ``meta["chain"]`` order, each on the arguments then the scratch buffers."""
    kinds = {"main": (grid, consts, opts)}
    for kind in ("pre", "flat"):
        if kind in meta:
            kconsts, kopts = _split_config(meta, cfg[kind], meta[kind]["constexprs"])
            kinds[kind] = (_grid(meta[kind]["grid"], kconsts), kconsts, kopts)
    specs = [(int(n), getattr(torch, dt)) for n, dt in meta["scratch"]]
    both = dtypes + [dt for _n, dt in specs]
    launches = [(fn, *kinds[kind]) for fn, kind in meta["chain"]]
    kws = [{**c, **o} for _fn, _g, c, o in launches]
    recs = _records(
        src.source, [(fn, g, kw) for (fn, g, _c, _o), kw in zip(launches, kws)], both, fresh
    )
    jits = [_LazyJit(src.source, fn) for fn, _g, _c, _o in launches]
    if any(rec is None for _key, rec in recs):
        jits[0].fn  # noqa: B018 - imported now where a kernel compiles through Triton
    # (each kernel's state has no entry of its own: the chain's launches them all)
    calls = [
        kernel_call(jit, g, c, o, len(both), entry=False, record_key=key, record=rec)
        for jit, (_fn, g, c, o), (key, rec) in zip(jits, launches, recs)
    ]
    from .native import Chain

    chain = Chain.of(src.name, calls, len(dtypes), len(specs))
    scratch: dict[Any, list[torch.Tensor]] = {}

    def launch(*args: torch.Tensor) -> None:
        dev = args[0].device
        bufs = scratch.get(dev)
        if bufs is None:
            # zeros: a chain's counters (``split.COUNTS``) start at 0; the rest, once
            bufs = scratch[dev] = [torch.zeros(n, dtype=dt, device=dev) for n, dt in specs]
            if chain is not None:
                chain.register(bufs)
        for call in calls:
            call(*args, *bufs)

    if chain is not None and chain.entry is not None:
        launch.native = chain.entry  # type: ignore[attr-defined]
    launch.natives = [getattr(c, "native_state", None) for c in calls]  # type: ignore[attr-defined]

    cold = [call for call, (_key, rec) in zip(calls, recs) if rec is None]
    launch.precompile = lambda: [k.warmup(both) for k in cold]  # type: ignore[attr-defined]
    names = tuple(str(dt).removeprefix("torch.") for dt in both)
    launch.offline = [  # type: ignore[attr-defined]
        (src.source, fn, names, g, kw, key)
        for (fn, g, _c, _o), kw, (key, rec) in zip(launches, kws, recs)
        if rec is None
    ]
    return launch


def _records(
    source: str,
    kernels: list[tuple[str, tuple[int, int, int], dict[str, Any]]],
    dtypes: list,
    fresh: dict[str, records.KernelRecord] | None = None,
) -> list[tuple[str | None, records.KernelRecord | None]]:
    """Each kernel's record key and record (:mod:`.records`) on the current CUDA device, from
    ``fresh`` or the disk cache; ``(None, None)`` each under the interpreter or without a
    GPU."""
    if interpreting() or not torch.cuda.is_available():
        return [(None, None)] * len(kernels)
    from . import device_cache_key

    index = torch.cuda.current_device()
    device = records.device_key(device_cache_key(index))
    major, minor = torch.cuda.get_device_capability(index)
    names = tuple(str(dt).removeprefix("torch.") for dt in dtypes)
    out = []
    for fn, grid, kw in kernels:
        key = records.key(source, fn, kw, grid, names, device)
        rec = (fresh or {}).get(key) or records.load(key, major * 10 + minor)
        out.append((key, rec))
    return out


def kernel_choices(src: sdk.KernelSource, many: bool = False) -> sdk.KernelChoices | None:
    """The other launch configurations of ``src`` for the core to measure, or None where
    nothing is measured (the interpreter, no GPU, symbolic sizes: their sizes change per
    call)."""
    if interpreting() or not torch.cuda.is_available() or src.meta.get("sizes"):
        return None
    alts = [
        sdk.KernelVariant(
            heuristics.label(cfg), dataclasses.replace(src, meta={**src.meta, "config": cfg})
        )
        for cfg in heuristics.alternatives(src.meta, many=many)
    ]
    if not alts:
        return None
    return sdk.KernelChoices(
        tuple(alts),
        synchronize=torch.cuda.synchronize,
        default=heuristics.label(src.meta["config"]),
    )


def compile_sources(sources: list[sdk.KernelSource]) -> list[Callable[..., None]]:
    """One launcher per source, in order (what ``sdk_compile_kernels`` returns), each with
    the launch configuration of its ``meta["config"]``.

    On a GPU, the kernels with no record yet go to the compile workers (:mod:`.offline`);
    a launcher whose every kernel came back with its record is bound again to launch from
    them, as in a warm process. The rest compile here (:func:`_precompile`)."""
    for src in sources:
        if src.language != "triton":
            raise ValueError(f"kernel {src.name} is {src.language}, not triton")
    same = [canonical(src) for src in sources]
    out = [_bind(s) for s in same]
    if not torch.cuda.is_available() or interpreting():
        return out
    from .offline import compile_in_workers

    made = compile_in_workers([k for fn in out for k in getattr(fn, "offline", ())])
    for i, fn in enumerate(out):
        kernels = getattr(fn, "offline", ())
        if made and kernels and all(k[5] in made for k in kernels):
            again = _bind(same[i], fresh=made)
            if _adopted(again):  # (else it compiles here, from Triton's cache)
                out[i] = again
    # kernels the same up to names share a module: the first of them precompiles (two
    # threads would compile the same kernel), the others then find it compiled
    first: dict[str, Callable[..., None]] = {}
    for src, canon, fn in zip(sources, same, out):
        meta = src.meta
        compiled_as = (meta.get("config"), [a[2] for a in meta["args"]], meta.get("scratch"))
        first.setdefault(stable_hash("cuda_triton-compile", canon.source, repr(compiled_as)), fn)
    _precompile(list(first.values()))
    return out


def _adopted(fn: Callable[..., None]) -> bool:
    """Whether each kernel of launcher ``fn`` launches from its record (the shim took it)."""
    natives = getattr(fn, "natives", None) or [getattr(fn, "native_state", None)]
    return all(n is not None and n.record is not None for n in natives)


def _precompile(launchers: list[Callable[..., None]]) -> list[Any]:
    """Compile every kernel now, several at a time, instead of one by one at first launch.

    These are the kernels with no record (:func:`compile_sources` sent them to the compile
    workers first: a kernel a worker compiled is in Triton's cache, where step 1 finds it).
    Two steps, each in a thread pool (part of either runs outside the GIL):

    1. Triton compiles each kernel (LLVM, ptxas) for the arguments' dtypes, with
       pointers taken as 16-byte aligned, as the guards require of every input a
       kernel reads; the first real launch then finds it in Triton's cache.
    2. Each compiled kernel is loaded and gets its launcher. Triton 3.6 builds
       that launcher with the C compiler once per kernel signature (0.3 s each,
       cached on disk by its source), which at first launch ran one after another
       on the caller's thread: 13 signatures took 4.6 s of a GPT-2 training step's
       cold compile. One kernel per signature goes first, so that no two threads
       build the same launcher; the rest then load it from Triton's cache.

    Workers make the caller's device current. A kernel whose warm-up fails simply
    compiles at its first launch, as before. Returns Triton's compiled kernels.
    """
    from concurrent.futures import ThreadPoolExecutor

    jobs = [fn.precompile for fn in launchers if hasattr(fn, "precompile")]
    if not jobs:
        return []
    device = torch.cuda.current_device()

    def run(job: Callable[[], Any]) -> list[Any]:
        try:
            with torch.cuda.device(device):
                return job()
        except Exception as exc:  # noqa: BLE001 - the first launch compiles instead
            _log.info("precompile failed, compiling at first launch: %s", exc)
            return []

    def load(compiled: Any) -> None:
        try:
            with torch.cuda.device(device):
                compiled.run  # noqa: B018 - Triton loads the module and builds the launcher
        except Exception as exc:  # noqa: BLE001 - the first launch raises it again
            _log.info("kernel load failed, retried at first launch: %s", exc)

    with ThreadPoolExecutor(max_workers=min(16, len(jobs))) as pool:
        compiled = [k for ks in pool.map(run, jobs) for k in ks if k is not None]
        first: dict[Any, Any] = {}
        rest = []
        for k in compiled:
            key = _launcher_key(k)
            if key is None or key in first:
                rest.append(k)
            else:
                first[key] = k
        list(pool.map(load, first.values()))
        list(pool.map(load, rest))
    return compiled


def _launcher_key(compiled: Any) -> Any:
    """What Triton's launcher source depends on (the kernel's signature and constants),
    or None where this Triton does not say."""
    try:
        src = compiled.src
        return (repr(src.signature), repr(sorted(src.constants.items(), key=repr)))
    except AttributeError:
        return None
