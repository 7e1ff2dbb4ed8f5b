"""CUDA graphs: a wrapper plugin that records a compiled graph once and replays it.

Used by ``mode="reduce-overhead"`` or ``options={"wrappers": ["cudagraphs"]}``.

Inputs
    The first call of a graph (per input shapes) runs as it is and notes where each input
    lives. The second records: an input found at the same address both times (parameters,
    buffers) or one that a recorded graph wrote (the activations a backward reads from its
    forward's memory) is read in place, every other one is copied into a buffer of the
    recording before each replay.
    Each replay checks that the in-place inputs are where they were; where one moved, the
    graph is recorded again with that input copied (at most 3 recordings per shape, then
    the graph runs unrecorded and says why in ``sdk.explain``).

Outputs
    A replay writes its outputs into memory the recording owns, and hands out tensors over
    that memory, not copies (the same tensor objects again where nothing holds the last
    ones). Every graph of a device records into one memory pool. The outputs of a step
    stay valid until a later step replays a graph of the device; from
    then on, reading one raises an error that says so and what to do (clone it, or call
    ``torch.compiler.cudagraph_mark_step_begin()``), as Inductor's CUDA graphs do. A step
    begins at each call of a torch.compile'd function, except while a forward graph of
    the step has a backward yet to run (forwards and backwards are counted: gradient
    accumulation over several forwards is one step), and at each
    ``cudagraph_mark_step_begin()``.

    Within a step, a replay that would overwrite outputs still in use (the same graph
    called twice while its first results live, say, or gradient accumulation over two
    forwards) runs unrecorded instead, and ``sdk.explain`` says so. So does one that would
    overwrite an earlier step's output held where the error cannot reach: torch revokes
    tensor objects, not memory, so a view made from an output, or a ``.grad`` autograd
    kept from a recorded backward (gradients accumulated over steps), keeps its values
    and blocks the replays that could overwrite it until it is gone.

An output that is (a view of) an input (a forward hands its backward the weights it
saves) is handed out as the caller's input, or that view of it. An input the graph writes
in place (``ctx.written_inputs``: BatchNorm's running statistics) is written once per call:
the recording's warm-up runs write copies of it, and where the input is copied into the
recording, the replay's result is copied back into it.

A call with a CPU tensor among its inputs runs unrecorded (the next call may have none: an
attention without dropout returns CPU seed tensors when run as it is, CUDA ones when
recorded). The converse needs care: ATen's attention backward reads its RNG seed and offset
through their pointers on the host unless a capture is under way, so a backward handed the
CUDA seeds of a recorded forward may not run unrecorded as they are (the host would read
device memory: a segfault). Wherever a graph has been given a CPU tensor before, an
unrecorded run (and a recording's warm-up) gets a CPU copy of what it is given there; the
recording itself reads the CUDA tensor, as a captured forward meant it to. A graph that cannot be recorded (an op that synchronizes with the host or
copies from pageable memory) runs unrecorded, every call. Both say why in ``sdk.explain``.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import sdk
from sdk import runtime

__version__ = "0.2.0"

#: recordings per input shapes before a graph whose inputs keep moving runs unrecorded
MAX_RECORDINGS = 3

STALE = (
    "Error: accessing a tensor output of CUDA graphs (sdk:cudagraphs) that a later replay "
    "has overwritten. Clone it (outside the compiled function) before the next step, or "
    "call torch.compiler.cudagraph_mark_step_begin() where a new step begins."
)
STALE_GRAD = (
    "Error: accessing a gradient output of a backward recorded by CUDA graphs "
    "(sdk:cudagraphs) that a later replay has overwritten. Clone it before the next "
    "step, or call torch.compiler.cudagraph_mark_step_begin() where a new step "
    "begins."
)
HELD = (
    "a call ran uncaptured: memory of an earlier step's outputs is still held by a tensor "
    "the wrapper cannot revoke (a view of an output, or a .grad kept from a recorded "
    "backward); drop it (optimizer.zero_grad(set_to_none=True), or clone the view) and "
    "the next call replays"
)


@sdk.hookimpl
def sdk_plugin_info() -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name="cudagraphs",
        version=__version__,
        hook_api=1,
        device_types=("cuda",),
        kind=sdk.PluginKind.WRAPPER,
        capabilities=frozenset({sdk.Capability.GRAPH_CAPTURE}),
        description="record and replay compiled graphs with CUDA graphs",
    )


@sdk.hookimpl
def sdk_plugin_status() -> str | None:
    if not torch.cuda.is_available():
        return (
            "no CUDA device visible (torch.cuda.is_available() is False); "
            "use it on a machine with an NVIDIA GPU and a CUDA build of torch"
        )
    return None


@sdk.hookimpl(wrapper=True)
def sdk_wrap_compiled(ctx: sdk.CompileContext, compiled: Callable[..., Any]):
    inner = yield
    return CudaGraphed(inner, ctx)


@dataclass
class _Recording:
    device: int
    index: int  # recording order on the device
    graph: Any  # torch.cuda.CUDAGraph
    in_place: dict[int, int]  # input position -> the address it is read at
    copied: dict[int, torch.Tensor]  # input position -> the buffer it is copied into
    shapes: list[torch.Size]  # each tensor input's sizes, in order
    out: runtime.Outputs  # what the recording wrote (it keeps the memory), handed out
    # outputs that are (views of) an input: position, input, and sizes, strides and offset
    # in it (None: the input itself)
    aliases: list[tuple[int, int, tuple[torch.Size, tuple[int, ...], int] | None]]
    #: inputs the graph writes in place that are copied in: copied back after each replay
    written_back: list[int] = field(default_factory=list)

    @property
    def outputs(self) -> tuple[Any, ...]:
        return self.out.outputs

    def in_use(self) -> bool:
        return self.out.in_use()

    def __post_init__(self) -> None:
        self._at = list(self.in_place)
        self._ptrs = [self.in_place.get(i, 0) for i in range(max(self._at, default=-1) + 1)]

    def moved(self, args: list[Any]) -> list[int]:
        if runtime.data_ptrs_equal(args, self._ptrs, self._at):
            return []
        return [i for i, ptr in self.in_place.items() if args[i].data_ptr() != ptr]


class _Device:
    """One device: the memory pool its recordings share, and the current step."""

    def __init__(self) -> None:
        self._pool: Any = None
        self.order = itertools.count()
        self.token: Any = None
        self.pending = 0  # forwards of this step whose backward has not run
        self.step: dict[int, _Recording] = {}  # recordings replayed in the current step
        self.stale: dict[int, _Recording] = {}  # replayed before it: revoked at the next replay
        self.retired: list[_Recording] = []  # replaced, kept while their outputs live
        self.managed: set[int] = set()  # storages of recorded outputs (in the pool)

    @property
    def pool(self) -> Any:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        return self._pool

    def begin(self) -> None:
        now = runtime.step_token()
        if now == self.token:
            return
        if (
            self.token is not None
            and self.pending
            and not runtime.mark_step_called(self.token, now)
        ):
            return  # a forward's backward has yet to run: the step goes on
        self.token, self.pending = now, 0
        self.stale.update(self.step)
        self.step = {}
        self.retired = [r for r in self.retired if r.in_use()]

    def blocking(self, rec: _Recording) -> str | None:
        """Why ``rec``'s replay would overwrite memory still in use, if it would: outputs
        of this step in use, or of an earlier step held where revoking cannot reach; its
        own, and those of graphs recorded after it (they may sit in its scratch memory)."""
        return self.check(rec)[0]

    def check(self, rec: _Recording) -> tuple[str | None, dict[int, runtime.Scan]]:
        """:meth:`blocking`'s answer, and the look it took at each earlier step's outputs
        (for :meth:`revoke_stale`, if the replay follows at once)."""
        if any(r.index >= rec.index and r.in_use() for r in self.step.values()):
            return (
                "a call ran uncaptured: outputs of an earlier call in this step are "
                "still in use (call torch.compiler.cudagraph_mark_step_begin() where a "
                "new step begins)",
                {},
            )
        scans = {}
        for key, r in self.stale.items():
            scans[key] = scan = r.out.scan()
            if r.index >= rec.index and scan.unreachable:
                return HELD, {}
        return None, scans

    def revoke_stale(self, scans: dict[int, runtime.Scan] | None = None) -> set[int]:
        """Revoke the outputs of earlier steps; those still held out of reach stay. Given
        :meth:`check`'s ``scans`` (nothing ran since), with what it looked at. Returns the
        recordings released: nothing holds their outputs now."""
        scans = scans or {}
        released = set()
        for key, r in list(self.stale.items()):
            if not r.out.release(scans.get(key)):
                del self.stale[key]
                released.add(key)
        return released


_DEVICES: dict[int, _Device] = {}


def _device(index: int) -> _Device:
    d = _DEVICES.get(index)
    if d is None:
        d = _DEVICES[index] = _Device()
    return d


@dataclass
class _Shape:
    """What a graph knows about one set of input shapes."""

    seen: list[int | None] | None = None  # input addresses at the first call
    copy: set[int] = field(default_factory=set)  # positions that must be copied
    recording: _Recording | None = None
    recordings: int = 0


class CudaGraphed:
    """Replays ``fn`` as a CUDA graph (see the module's docstring)."""

    _boxed_call = True  # AOTAutograd may hand the inputs over as one list

    def __init__(self, fn: Callable[..., Any], ctx: sdk.CompileContext | None = None) -> None:
        self.fn = fn
        self.ctx = ctx
        self.backward = ctx is not None and ctx.graph_kind == "backward"
        self.forward = ctx is not None and ctx.graph_kind == "forward"
        self._shapes: dict[tuple, _Shape] = {}
        self._own: set[int] = set()  # storages of this graph's recorded outputs
        self._index: int | None = None  # the device, from the first call's inputs
        self._layout_key = False  # key on every input's layout, not on its scalars alone
        self._host: set[int] = set()  # input positions that have held a CPU tensor
        self.uncaptured: str | None = None  # why this graph runs unrecorded, once it does

    def __del__(self) -> None:
        # handed-out outputs do not own their memory: recordings they use outlive this
        for shape in getattr(self, "_shapes", {}).values():
            with contextlib.suppress(Exception):  # at interpreter exit, nothing to keep
                self._retire(shape)

    # -- bookkeeping ----------------------------------------------------------

    def _note(self, message: str) -> None:
        if self.ctx is not None:
            self.ctx.note(f"cudagraphs: {message}")

    def _give_up(self, why: str) -> None:
        self.uncaptured = why
        for shape in self._shapes.values():
            self._retire(shape)
        self._shapes.clear()
        self._note(f"runs uncaptured: {why}")

    def _retire(self, shape: _Shape) -> None:
        rec, shape.recording = shape.recording, None
        if rec is not None and rec.in_use():
            _device(rec.device).retired.append(rec)

    def _key(self, args: tuple[Any, ...], scalars: bool) -> tuple:
        """Graphs whose inputs are all tensors have static shapes (Dynamo guards them, a
        backward's follow from its forward): one key, sizes checked at replay. Symbolic
        sizes come as int inputs; then every input's layout is part of the key."""
        if not scalars and not self._layout_key:
            return ()
        return tuple(
            (tuple(a.shape), a.stride(), a.storage_offset(), a.dtype, a.device)
            if isinstance(a, torch.Tensor)
            else a
            for a in args
        )

    def _eager(self, args: tuple[Any, ...] | list[Any]) -> Any:
        """Run ``fn`` unrecorded, with host copies where it has been given host tensors."""
        if self._host:
            args = [
                a.cpu() if i in self._host and isinstance(a, torch.Tensor) and a.is_cuda else a
                for i, a in enumerate(args)
            ]
        return self.fn(*args)

    def _run(self, dev: _Device | None, args: tuple[Any, ...]) -> Any:
        out = self._eager(args)
        if dev is not None:
            self._ran(dev)
        return out

    def _ran(self, dev: _Device) -> None:
        if self.forward:
            dev.pending += 1
        elif self.backward and dev.pending:
            dev.pending -= 1

    # -- a call ---------------------------------------------------------------

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and type(args[0]) is list:
            args = tuple(args[0])
        host, scalars, shapes = _scan(args)
        self._host.update(host)
        if self.uncaptured is not None:
            return self._eager(args)
        if torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        ):
            return self._eager(args)  # autograd state cannot live in a graph
        if self._index is None:
            on_device = [a for a in args if isinstance(a, torch.Tensor) and a.is_cuda]
            self._index = on_device[0].get_device() if on_device else torch.cuda.current_device()
        dev = _device(self._index)
        if not self.backward:  # a backward belongs to the step of its forward
            dev.begin()
        if host:
            # per call, not for good: a forward run unrecorded hands its backward the CPU
            # seed tensors of an attention without dropout, a recorded one CUDA tensors
            self._note(
                f"a call ran uncaptured: input {host[0]} is a "
                f"{args[host[0]].device.type} tensor; a CUDA graph replays device "
                "work only"
            )
            return self._run(dev, args)
        key = self._key(args, scalars)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _Shape()
        if shape.seen is None:  # first call: run as it is, note where the inputs live
            shape.seen = [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]
            return self._run(dev, args)
        rec = shape.recording
        if rec is not None and not key and shapes != rec.shapes:
            # sizes changed with no symbolic size among the inputs: key on layouts from now
            self._layout_key = True
            for old in self._shapes.values():
                self._retire(old)
            self._shapes.clear()
            return self(*args)
        if rec is not None:
            moved = rec.moved(list(args))
            if moved:
                shape.copy.update(moved)
                self._retire(shape)
                rec = None
        if rec is None:
            if shape.recordings >= MAX_RECORDINGS:
                self._give_up(
                    f"inputs {sorted(shape.copy)} moved between calls after "
                    f"{MAX_RECORDINGS} recordings"
                )
                return self._run(dev, args)
            try:
                rec = self._record(args, shape, self._index, dev)
            except Exception as exc:  # noqa: BLE001 - any recording failure: run unrecorded
                self._give_up(f"capture failed: {type(exc).__name__}: {exc}")
                return self._run(dev, args)
            shape.recording, shape.recordings = rec, shape.recordings + 1
        blocked, scans = dev.check(rec)
        if blocked is not None:
            self._note(blocked)
            return self._run(dev, args)
        return self._replay(rec, dev, args, scans)

    def _replay(
        self, rec: _Recording, dev: _Device, args: tuple[Any, ...], scans: dict | None = None
    ) -> Any:
        """Replay ``rec`` on ``args`` (``dev.check(rec)`` has just said None, and looked at
        the earlier steps' outputs as ``scans``) and hand out its outputs."""
        for i, buf in rec.copied.items():
            buf.copy_(args[i])
        released = dev.revoke_stale(scans)
        rec.graph.replay()
        for i in rec.written_back:
            args[i].copy_(rec.copied[i])
        # what revoke_stale released, nothing has taken since
        out = rec.out.hand_out(unheld=id(rec) in released)
        if rec.aliases:
            out = list(out)
            for k, i, view in rec.aliases:
                a = args[i]
                out[k] = (
                    a
                    if view is None
                    else a.as_strided(view[0], view[1], a.storage_offset() + view[2])
                )
        dev.step[id(rec)] = rec
        self._ran(dev)
        return out

    # -- recording ------------------------------------------------------------

    def _record(self, args: tuple[Any, ...], shape: _Shape, index: int, dev: _Device) -> _Recording:
        assert shape.seen is not None
        in_place: dict[int, int] = {}
        copied: dict[int, torch.Tensor] = {}
        cap_args: list[Any] = list(args)
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                continue
            st = a.untyped_storage().data_ptr()
            # read in place: an input that stayed where it was (parameters, buffers), or
            # a recorded output (a backward reads its forward's activations); copied: one
            # that moved before, and this graph's own outputs (the replay overwrites them)
            stays = a.data_ptr() == shape.seen[i] or st in dev.managed
            if i not in shape.copy and st not in self._own and stays:
                in_place[i] = a.data_ptr()
            else:
                copied[i] = cap_args[i] = _buffer_like(a)
        # inputs the graph writes in place (BatchNorm's running statistics) are written
        # once per call, by the replay: the warm-up runs write copies of them
        written = self.ctx.written_inputs if self.ctx is not None else frozenset()
        warm_args = [
            _buffer_like(a) if i in written and i in in_place else a for i, a in enumerate(cap_args)
        ]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm up: lazy compiles and allocator growth stay out
                self._eager(warm_args)
        del warm_args
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=dev.pool, capture_error_mode="thread_local"):
            outputs = tuple(self.fn(*cap_args))
        inputs = {
            a.untyped_storage().data_ptr(): i
            for i, a in enumerate(cap_args)
            if isinstance(a, torch.Tensor)
        }
        aliases = []
        owned = list(outputs)
        for k, o in enumerate(outputs):
            if not isinstance(o, torch.Tensor):
                continue
            i = inputs.get(o.untyped_storage().data_ptr())
            if i is not None:  # (a view of) an input: handed out as that of the caller's
                a = cap_args[i]
                same = (o.shape, o.stride(), o.storage_offset()) == (
                    a.shape,
                    a.stride(),
                    a.storage_offset(),
                )
                aliases.append(
                    (
                        k,
                        i,
                        None
                        if same
                        else (o.shape, o.stride(), o.storage_offset() - a.storage_offset()),
                    )
                )
                owned[k] = None
        ptrs = {o.untyped_storage().data_ptr() for o in owned if isinstance(o, torch.Tensor)}
        self._own |= ptrs
        dev.managed |= ptrs
        shapes = _scan(args)[2]
        out = runtime.Outputs(
            owned,
            STALE_GRAD if self.backward else STALE,
            reuse=not self.backward,
            grad_ok=self.forward,
        )
        back = [i for i in copied if i in written]
        return _Recording(
            index, next(dev.order), graph, in_place, copied, shapes, out, aliases, back
        )


def _scan(args: tuple[Any, ...]) -> tuple[list[int], bool, list[torch.Size]]:
    """One look at each input: the positions of host tensors, whether any input is not a
    tensor (a symbolic size), and the tensors' sizes in order."""
    host: list[int] = []
    shapes: list[torch.Size] = []
    scalars = False
    tensor = torch.Tensor
    for i, a in enumerate(args):
        if isinstance(a, tensor):
            if not a.is_cuda:
                host.append(i)
            shapes.append(a.shape)
        else:
            scalars = True
    return host, scalars, shapes


def _buffer_like(a: torch.Tensor) -> torch.Tensor:
    """A copy of ``a`` with its sizes, strides and storage offset (kernels bake them in)."""
    extent = 0 if 0 in a.shape else 1 + sum((s - 1) * st for s, st in zip(a.shape, a.stride()))
    base = torch.empty(a.storage_offset() + extent, dtype=a.dtype, device=a.device)
    buf = base.as_strided(a.shape, a.stride(), a.storage_offset())
    buf.copy_(a)
    return buf
