"""Adapter over Dynamo and AOTAutograd (torch._dynamo, torch._functorch): the compile entry
(:func:`aot_compile`), Dynamo's counters and graph-break reasons, what a ``torch.compile``
result was compiled with, Dynamo's backend registry, and errors Dynamo shows as the user's.

Split out of :mod:`core.adapters.torch_private` (which re-exports every name here, so callers
may import either). Supported: torch 2.11 and 2.13.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


def aot_compile(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    forward: Callable[..., Any],
    backward: Callable[..., Any],
    inference: Callable[..., Any],
    decompositions: Mapping[Any, Callable[..., Any]],
    cache_tag: str | None = None,
    on_cache_refused: Callable[[str], None] = lambda why: None,
    cache_keys: Any = None,
    keep_input_mutations: bool = False,
    joint_pass: Callable[[torch.fx.GraphModule], Any] | None = None,
) -> Callable[..., Any]:
    """Run AOTAutograd on a Dynamo graph.

    With no input that needs grad, AOTAutograd calls ``inference`` on a
    functionalized ATen graph. Otherwise it traces the joint forward/backward
    graph, splits it with the min-cut rematerialization partitioner and calls
    ``forward`` now and ``backward`` when the backward first runs.

    ``decompositions`` is read only when AOTAutograd traces (a lazy mapping is not
    built on a cache hit). With ``cache_tag``, the three compilers return
    :class:`~core.adapters.aot_cache.SDKOutputCode` and AOTAutograd's cache is used under
    keys that include the tag (:mod:`core.adapters.aot_cache`): a hit skips AOTAutograd
    and the compilers; the backward is then compiled with the forward. A lookup whose
    entries are not safe to unpickle is a miss, and ``on_cache_refused(why)`` is called.
    ``cache_keys`` (an :class:`~core.adapters.aot_cache.KeyMemo`) remembers torch's keys.
    ``joint_pass(joint)`` rewrites the joint graph in place before the partition (where
    Inductor runs its joint-graph passes), each node it adds with its ``meta["val"]``; the
    partitioner carries each node's ``meta`` into the graph that gets the node.
    """
    # imported here, not with this module: both import Dynamo (about a second and a half),
    # which commands that compile nothing (`python -m sdk list`, `ops`, `cache`) never need
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def partition(joint: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        if joint_pass is not None:
            joint_pass(joint)
        return min_cut_rematerialization_partition(joint, *args, **kwargs)

    common = dict(
        partition_fn=partition,
        decompositions=decompositions,
        keep_inference_input_mutations=keep_input_mutations,
    )
    if cache_tag is not None:
        from . import aot_cache

        with aot_cache.caching(cache_tag, on_cache_refused, cache_keys):
            return aot_autograd(
                fw_compiler=aot_cache.serializable(forward),
                bw_compiler=aot_cache.serializable(backward),
                inference_compiler=aot_cache.serializable(inference),
                **common,
            )(gm, example_inputs)

    @torch._dynamo.disable
    def compile_backward(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        # What Dynamo's wrapper does (keep Dynamo out of the compiler and of the
        # compiled backward), but keeping the boxed calling convention. The compiler
        # itself is disabled too: a loss.backward() inside the compiled function runs
        # it under Dynamo's frame hook, which would trace it.
        compiled = backward(gm, example_inputs)
        wrapped = torch._dynamo.disable(compiled)
        wrapped._boxed_call = getattr(compiled, "_boxed_call", False)
        return wrapped

    compile_backward._is_wrapped_bw_compiler = True
    compiler = aot_autograd(
        fw_compiler=forward, bw_compiler=compile_backward, inference_compiler=inference, **common
    )
    return compiler(gm, example_inputs)


def module_buffers(gm: torch.fx.GraphModule) -> frozenset[int]:
    """The positions of the inputs of Dynamo's graph ``gm`` that are buffers of the model
    (registered with ``register_buffer``: BatchNorm's running statistics), by where Dynamo
    read them (each placeholder's source: ``L['self']._modules['bn']._buffers['running_mean']``).
    Parameters are told apart by their type (``nn.Parameter``), buffers only by this."""
    out = set()
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(places):
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(source, "name", None)
        name = name() if callable(name) else name  # (a method before torch 2.12)
        if isinstance(name, str) and "._buffers[" in name:
            out.add(i)
    return frozenset(out)


def model_state_inputs(dynamo_inputs: Sequence[Any], aot_inputs: Sequence[Any]) -> dict[int, Any]:
    """The inputs of AOTAutograd's inference graph that are the model's parameters and
    buffers and that the graph does not write, by position: ``{index: tensor}`` (the real
    tensors Dynamo passed the backend). Called while AOTAutograd compiles that graph.

    ``dynamo_inputs`` holds, per input of Dynamo's graph, the model's ``nn.Parameter`` or
    buffer there (:func:`module_buffers`), else None; it may hold weak references (called to
    get the tensor). Dynamo lifts a module's parameters and buffers to graph inputs
    (``inline_inbuilt_nn_modules``, the default since torch 2.5) and passes the backend the
    real tensors; AOTAutograd's inference graph takes the same inputs in the same order,
    unless it changed them (an effect token added, duplicate inputs merged, a synthetic base
    for aliased inputs). Then the count or a layout differs and the answer is ``{}``: none
    is known, all stay inputs. An input the graph writes (BatchNorm's running statistics in
    training mode under ``no_grad``, a cache the model updates) is not a constant: it stays
    an input (AOTAutograd's metadata of the graph it compiles says which)."""
    real = [x() if callable(x) and not isinstance(x, torch.Tensor) else x for x in dynamo_inputs]
    if len(real) != len(aot_inputs):
        return {}
    written = _written_inputs(len(real))
    if written is None:
        return {}
    out = {}
    for i, (x, fake) in enumerate(zip(real, aot_inputs, strict=True)):
        if not isinstance(x, torch.Tensor) or i in written:
            continue
        if not (
            isinstance(fake, torch.Tensor)
            and fake.dtype == x.dtype
            and fake.device == x.device
            and _same(fake.shape, x.shape)
            and _same(fake.stride(), x.stride())
        ):
            return {}
        out[i] = x
    return out


def _written_inputs(count: int) -> frozenset[int] | None:
    """The inputs the graph AOTAutograd is compiling now writes (their data or metadata),
    from its ``fw_metadata``; None where that is not known (nothing is then frozen)."""
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    meta = getattr(tc, "fw_metadata", None) if tc is not None else None
    info = getattr(meta, "input_info", None)
    if info is None or len(info) != count:
        return None
    return frozenset(
        i
        for i, a in enumerate(info)
        if getattr(a, "mutates_data", True)
        or getattr(a, "mutates_metadata", True)
        or getattr(a, "mutates_storage_metadata", False)
    )


def _same(sizes: Sequence[Any], ints: Sequence[int]) -> bool:
    """Equal sizes, a symbolic one never (comparing a SymInt would add a guard)."""
    return len(sizes) == len(ints) and all(
        type(d) is int and d == e for d, e in zip(sizes, ints, strict=True)
    )


def reset_dynamo(*, keep_compiled: bool = False) -> None:
    """Forget every compiled frame (used by ``explain`` and the benchmarks).

    With ``keep_compiled`` the frames compiled so far stay compiled and keep running
    without a recompile; only what Dynamo remembers of the frames it has seen (the sizes
    behind its automatic dynamic shapes) is forgotten. A backend compiled next (Dynamo
    guards on the backend, so it traces afresh) then gets the static graphs a fresh
    process would give it, not graphs made dynamic by the sizes an earlier backend's calls
    saw.
    """
    if not keep_compiled:
        torch._dynamo.reset()
        return
    from torch._dynamo import convert_frame, pgo

    with convert_frame.compile_lock:
        pgo.reset_code_state()


def graph_break_count() -> int:
    """How many graph breaks Dynamo has counted in this process."""
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def dynamo_graph_count() -> int:
    """How many graphs Dynamo has compiled (handed to a backend) in this process."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def graph_break_reasons() -> dict[str, int]:
    """Dynamo's graph breaks so far in this process: its reason text -> how many."""
    from torch._dynamo.utils import counters

    return dict(counters["graph_break"])


_log = logging.getLogger(__name__)

#: the graph breaks Dynamo logged since :func:`locate_graph_breaks`: (serial, reason, the
#: user's stack, innermost line last), the last ``_SITES_KEPT``
_SITES_KEPT = 4096
_sites: collections.deque[tuple[int, str, tuple[str, ...]]] = collections.deque(maxlen=_SITES_KEPT)
_serial = [0]
_sites_lock = threading.Lock()


def locate_graph_breaks() -> None:
    """From now on in this process, note the user's line of every graph break Dynamo logs
    (:func:`graph_break_sites`): its counters keep the reason alone, and a break before which
    there was nothing to compile ends no graph that would carry the line. Dynamo's
    ``log_graph_break`` is wrapped once (torch 2.13: ``InstructionTranslatorBase``); on a
    torch without it, breaks keep their reason alone."""
    from torch._dynamo import symbolic_convert

    cls = getattr(symbolic_convert, "InstructionTranslatorBase", None)
    original = getattr(cls, "log_graph_break", None)
    if original is None or getattr(original, "_sdk_locating", False):
        return

    @functools.wraps(original)
    def log_graph_break(self: Any, *args: Any, **kwargs: Any) -> Any:
        exc = kwargs.get("exc", args[2] if len(args) > 2 else None)
        if exc is not None and not getattr(exc, "logged", False):
            _note_site(exc)
        return original(self, *args, **kwargs)

    log_graph_break._sdk_locating = True  # type: ignore[attr-defined]
    cls.log_graph_break = log_graph_break  # type: ignore[union-attr]


def _note_site(exc: Any) -> None:
    reason = getattr(exc, "msg", None)
    stack = getattr(exc, "real_stack", None)
    if not isinstance(reason, str) or not stack:
        return
    frames = tuple(f"{fs.filename}:{fs.lineno} in {fs.name}" for fs in stack)
    where = frames[-1]
    with _sites_lock:
        _serial[0] += 1
        _sites.append((_serial[0], reason, frames))
    if _log.isEnabledFor(logging.INFO):  # TORCH_LOGS=sdk: every break, with its line
        from sdk.report import GraphBreak

        _log.info("%s", GraphBreak(reason, where))


def graph_break_mark() -> int:
    """A mark for :func:`graph_break_sites`: the breaks logged after it."""
    with _sites_lock:
        return _serial[0]


def graph_break_sites(since: int) -> list[tuple[str, tuple[str, ...]]]:
    """The graph breaks logged after mark ``since`` (:func:`locate_graph_breaks`), oldest
    first: (Dynamo's reason text, the user's stack as lines "file:line in function",
    innermost last)."""
    with _sites_lock:
        return [(reason, frames) for serial, reason, frames in _sites if serial > since]


def graph_break_of(gm: torch.fx.GraphModule) -> tuple[str, str] | None:
    """Why Dynamo ended the graph ``gm`` at a graph break: (Dynamo's reason, the user's line
    "file:line in function"), or None where the graph ended at the function's return (or
    this torch does not say). Dynamo sets ``compile_subgraph_reason`` on every graph it
    hands a backend (torch 2.11 and 2.13 alike)."""
    why = getattr(gm, "compile_subgraph_reason", None)
    if why is None or not getattr(why, "graph_break", False):
        return None
    stack = list(getattr(why, "user_stack", None) or ())
    where = f"{stack[-1].filename}:{stack[-1].lineno} in {stack[-1].name}" if stack else ""
    return str(getattr(why, "reason", "") or ""), where


@dataclass(frozen=True)
class CompiledWith:
    """The backend a ``torch.compile`` result, or a Dynamo cache entry, was compiled with:
    the compiler function and torch.compile's ``mode`` and ``options`` for it."""

    compiler: Any
    mode: str | None = None
    options: Mapping[str, Any] | None = None
    #: the backend as Dynamo holds it (its cache entries' key: see :func:`run_with`)
    raw: Any = None

    @property
    def name(self) -> str:
        c = self.compiler
        return str(getattr(c, "__name__", None) or getattr(c, "compiler_name", None) or c)


def _compiled_with(backend: Any) -> CompiledWith | None:
    """The innermost backend of a Dynamo callback (the ``_torchdynamo_orig_backend`` chain),
    unwrapped from torch.compile's wrapper, which holds ``mode`` and ``options``."""
    if backend is None:
        return None
    seen = 0
    while hasattr(backend, "_torchdynamo_orig_backend") and seen < 32:
        backend, seen = backend._torchdynamo_orig_backend, seen + 1
    inner = getattr(backend, "compiler_fn", None)  # torch._TorchCompileWrapper
    if inner is None or not callable(inner):
        return CompiledWith(backend, raw=backend)
    kwargs = getattr(backend, "kwargs", None) or {}
    return CompiledWith(inner, kwargs.get("mode"), kwargs.get("options"), backend)


def compiled_parts(fn: Any) -> tuple[Callable[..., Any], CompiledWith | None] | None:
    """For what ``torch.compile`` returned (an ``OptimizedModule``, or the function it
    wraps another in): the callable it compiles and the backend it compiles with (None where
    this torch does not tell). None for anything else."""
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(fn, OptimizedModule):
        ctx = getattr(fn, "dynamo_ctx", None)
        return fn._orig_mod, _compiled_with(getattr(ctx, "callback", None))
    orig = getattr(fn, "_torchdynamo_orig_callable", None)
    if orig is None or not callable(orig) or getattr(fn, "_torchdynamo_disable", False):
        return None
    wrapper_id = getattr(fn, "_torchdynamo_wrapper_id", None)  # (newer torch versions)
    if wrapper_id is not None and wrapper_id != id(fn):
        return None  # a copy of the attributes (functools.wraps), not Dynamo's wrapper
    # the wrapper's closure holds Dynamo's callback (or the context that holds it)
    cells = {}
    code = getattr(fn, "__code__", None)
    for name, cell in zip(getattr(code, "co_freevars", ()), getattr(fn, "__closure__", None) or ()):
        with contextlib.suppress(ValueError):  # (an empty cell)
            cells[name] = cell.cell_contents
    callback = cells.get("callback", getattr(cells.get("self"), "callback", None))
    return orig, _compiled_with(callback)


def _codes_of(fn: Any) -> list[Any]:
    """The code objects Dynamo may compile when ``fn`` is called: a module's ``forward``, and
    the frame torch.compile adds around a module whose ``forward`` Dynamo does not start at
    (``torch.nn``'s own: ``external_utils.wrap_inline``, one code for all of them)."""
    import types

    codes = []
    if isinstance(fn, torch.nn.Module):
        with contextlib.suppress(ImportError, AttributeError):
            from torch._dynamo import external_utils

            codes.append(external_utils.wrap_inline(len).__code__)
        fn = fn.forward
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None and callable(fn):  # an object with __call__
        call = type(fn).__call__
        code = getattr(getattr(call, "__func__", call), "__code__", None)
    return [c for c in (code, *codes) if isinstance(c, types.CodeType)]


def cached_backends(fn: Any) -> list[CompiledWith] | None:
    """The backends of the graphs Dynamo keeps for ``fn`` (one per cache entry, most recent
    first; empty: none compiled, or ``torch._dynamo.reset()`` since), or None where this
    torch does not tell. For a ``torch.nn`` module compiled whole, the entries of every
    such module are there (Dynamo's guards tell them apart)."""
    codes = _codes_of(fn)
    if not codes:
        return None
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        entries = [e for code in codes for e in _debug_get_cache_entry_list(code)]
    except (ImportError, AttributeError, TypeError, RuntimeError):
        return None
    out = []
    for entry in entries:
        if not hasattr(entry, "backend"):
            return None
        found = _compiled_with(entry.backend)
        if found is not None:
            out.append(found)
    return out


def run_with(backend: CompiledWith, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as ``torch.compile`` with ``backend`` (one of :func:`cached_backends`) runs it:
    through the graphs Dynamo keeps for that backend (it keys its cache entries by the
    backend object), compiling with it only where none fits the inputs, as the user's
    compiled callable would."""
    return torch._dynamo.optimize(backend.raw, dynamic=getattr(backend.raw, "dynamic", None))(fn)


def configure_for_benchmark() -> None:
    """Switch off Inductor's persistent caches so that cold compiles are cold.

    ``fx_graph_cache`` (Inductor's compiled-graph cache) and
    ``enable_autograd_cache`` (AOTAutograd's cache) would otherwise turn a
    "cold" compile into a cache load. Attributes missing from a torch version
    are skipped.
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    if hasattr(inductor_config, "fx_graph_cache"):
        inductor_config.fx_graph_cache = False
    if hasattr(functorch_config, "enable_autograd_cache"):
        functorch_config.enable_autograd_cache = False


_USER_ERRORS: dict[type, type] = {}


def user_error(exc: Exception, frame: Any = None) -> Exception:
    """``exc`` as an exception Dynamo re-raises as it is from a backend, instead of wrapping
    it in ``BackendCompilerFailed`` under its "report this bug to PyTorch" text: a bad option
    or plugin name is the user's to fix, not a compiler crash. The result is still an
    instance of ``type(exc)`` (``except sdk.OptionError`` catches it), with the same message.
    Dynamo re-raises its ``ShortenTraceback`` family unwrapped (torch 2.11 and 2.13 alike);
    where a torch lacks it, ``exc`` is returned unchanged. ``frame`` (the raising function's,
    ``inspect.currentframe()``) is where Dynamo starts the traceback it shows: the frames of
    torch between the user's call and the backend are left out."""
    base = getattr(torch._dynamo.exc, "ShortenTraceback", None)
    if base is None or isinstance(exc, base):
        return exc
    cls = _USER_ERRORS.get(type(exc))
    if cls is None:
        cls = _USER_ERRORS[type(exc)] = type(
            type(exc).__name__,
            (type(exc), base),
            {
                "__module__": type(exc).__module__,
                "__str__": lambda self: str(self.args[0]) if self.args else "",
            },
        )
    err = cls.__new__(cls)
    Exception.__init__(err, *exc.args)
    err.first_useful_frame = frame
    return err


def dynamo_has_backend(name: str) -> bool:
    """Whether Dynamo's backend registry holds a compiler registered as ``name``."""
    from torch._dynamo.backends import registry as dynamo_registry

    return name in dynamo_registry._COMPILER_FNS


def dynamo_forget_backend(name: str, entry_point: Any) -> None:
    """Drop Dynamo's registration of backend ``name``, so that the lookup of it in flight,
    which registers what ``entry_point`` loads, does not fail on a duplicate name.

    Dynamo's ``lookup_backend`` checks for a registration, loads the entry point, then
    registers what it loaded, asserting the name is new; two threads looking the name up
    at once both load, and the second assertion fails (see ``sdk.backends``). The entry
    point goes back first, so that a lookup while the name is unregistered loads it again
    (and waits its turn in ``sdk.backends``) instead of finding neither.
    """
    from torch._dynamo.backends import registry as dynamo_registry

    dynamo_registry._BACKENDS[name] = entry_point
    dynamo_registry._COMPILER_FNS.pop(name, None)


def _output_strides() -> list[tuple[int, ...] | None] | None:
    """AOTAutograd's list of the forward graph's output strides, while it compiles one."""
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    return getattr(tc, "output_strides", None) if tc is not None else None


def report_output_strides(strides: list[tuple[int, ...] | None]) -> None:
    """Tell AOTAutograd the strides the forward graph's outputs have (None: eager's), as
    Inductor does: it compiles the backward graph for saved activations of these
    strides. Only while it compiles a forward graph."""
    out = _output_strides()
    if out is not None:
        out[:] = strides


def reported_output_strides() -> list[tuple[int, ...] | None] | None:
    """What :func:`report_output_strides` told AOTAutograd for the forward graph being
    compiled (empty: nothing, eager's strides), or None outside a forward's compile."""
    out = _output_strides()
    return None if out is None else list(out)
