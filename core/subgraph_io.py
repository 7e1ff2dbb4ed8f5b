"""What passes in and out of a graph-level plugin's partition, beyond its inputs: the
model's parameters and buffers as constants of an inference partition
(``PluginInfo.frozen_parameters``: :class:`Frozen`, guarded on each one's identity and
version), and the partition's
outputs (:func:`buffers`: copied into ``meta["val"]``'s strides, or allocated by the core with
inputs donated, ``CompiledSubgraph.preallocated_outputs`` and ``aliases``). Split out of
:mod:`core.chain`, which compiles the partitions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx

from sdk.errors import SDKError, describe
from sdk.plugin import CompileContext, PluginKind

from . import fallback, graph_cache
from .adapters.torch_private import fresh_result, real_mode
from .registry import strict
from .session import CompileSession


def buffers(
    s: CompileSession,
    c: CompileContext,
    sub: torch.fx.GraphModule,
    fn: Callable,
    preallocated: bool,
    aliases: Mapping[int, int],
    dead: frozenset[int],
) -> Callable:
    """``fn`` as a callable that returns the outputs: as it is, or (``preallocated``) one
    that allocates each output per its ``meta["val"]`` (an aliased output: the input itself,
    where ``dead`` proves nothing reads it after and its layout is the output's) and calls
    ``fn(*inputs, *outputs)``. Symbolic output sizes raise TypeError (compiled per shape)."""
    vals = output_vals(sub)
    if not preallocated:
        return restrided(fn, vals)
    places = placeholder_vals(sub)
    there = c.device_type if c.device_type in s.info.device_types else s.info.device_types[0]
    layouts = []
    for i, v in enumerate(vals):
        if not isinstance(v, torch.Tensor):
            raise TypeError(
                f"sdk:{c.plugin} asked for preallocated outputs, but output {i} of "
                f"{c.graph_name} is a {type(v).__name__}, not a tensor"
            )
        if not is_static(v):
            raise TypeError(
                f"sdk:{c.plugin} asked for preallocated outputs of symbolic sizes "
                f"({tuple(v.shape)}): the core compiles {c.graph_name} per shape"
            )
        device = v.device if v.device.type == there else torch.device(there)
        layouts.append((tuple(v.shape), tuple(v.stride()), v.dtype, device))
    donated: dict[int, int] = {}
    for out, inp in aliases.items():
        if out >= len(vals) or inp >= len(places):
            raise ValueError(
                f"sdk:{c.plugin} declared output {out} an alias of input {inp}, but "
                f"{c.graph_name} has {len(vals)} outputs and {len(places)} inputs"
            )
        x = places[inp]
        same = (
            isinstance(x, torch.Tensor)
            and is_static(x)
            and (tuple(x.shape), tuple(x.stride()), x.dtype) == layouts[out][:3]
            and x.storage_offset() == 0
        )
        if inp in dead and same:
            donated[out] = inp
        else:
            why = (
                "it may be read after the partition: a graph input, a view, or read again"
                if inp not in dead
                else "its layout differs"
            )
            c.note(f"output {out} not written into input {inp} ({why}): a buffer of its own")
    if donated:
        c.note(
            "outputs written into their inputs (donated): "
            + ", ".join(f"{o} -> input {i}" for o, i in sorted(donated.items()))
        )

    # an expanded output (stride 0 over a dimension): the plugin writes a dense buffer, which
    # is then put into that layout (a buffer of overlapping elements cannot be written)
    expanded = {i for i, (shape, stride, _, _) in enumerate(layouts) if overlaps(shape, stride)}

    def into(*args: Any) -> tuple[Any, ...]:
        outs = [
            args[donated[i]]
            if i in donated
            else torch.empty(shape, dtype=dtype, device=device)
            if i in expanded
            else torch.empty_strided(shape, stride, dtype=dtype, device=device)
            for i, (shape, stride, dtype, device) in enumerate(layouts)
        ]
        fn(*args, *outs)
        for i in expanded:
            outs[i] = into_layout(outs[i], layouts[i][1])
        return tuple(outs)

    return into


def overlaps(shape: Any, stride: Any) -> bool:
    """Whether a layout has stride 0 over a dimension of more than one element (an expand):
    several of its elements are one memory location."""
    return any(st == 0 and sz > 1 for sz, st in zip(shape, stride, strict=False))


def into_layout(o: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """``o``'s values in a new tensor of strides ``stride``: one copy. An expanded layout
    (:func:`overlaps`) gets the elements it holds only: ``o``'s first along each dimension of
    stride 0 (an expand's are all the same)."""
    out = torch.empty_strided(o.shape, stride, dtype=o.dtype, device=o.device)
    if not overlaps(o.shape, stride):
        return out.copy_(o)
    first = tuple(slice(0, 1) if st == 0 else slice(None) for st in stride)
    sizes = [1 if st == 0 else sz for sz, st in zip(o.shape, stride, strict=True)]
    out.as_strided(sizes, stride).copy_(o[first])
    return out


def restrided(fn: Callable, vals: list[Any]) -> Callable:
    """``fn``, its outputs copied into ``meta["val"]``'s strides where they come with others
    (sizes of 1 aside; symbolic layouts unchecked): the outer graph's ATen ops may depend on
    them (a ``view``). One copy per such output and call: the contract asks for those
    strides, and ``preallocated_outputs`` gives them for free."""
    want: list[tuple[int, ...] | None] = [
        tuple(v.stride()) if isinstance(v, torch.Tensor) and is_static(v) else None for v in vals
    ]
    if not any(w is not None for w in want):
        return fn

    def strided(*args: Any) -> Any:
        outs = fn(*args)
        fixed = None
        for i, (o, w) in enumerate(zip(outs, want, strict=False)):
            if w is None or not isinstance(o, torch.Tensor) or o.stride() == w:
                continue
            if all(a == b or d <= 1 for a, b, d in zip(o.stride(), w, o.shape, strict=False)):
                continue
            fixed = list(outs) if fixed is None else fixed
            fixed[i] = into_layout(o, w)
        return outs if fixed is None else tuple(fixed)

    return strided


def dead_after(outer: torch.fx.GraphModule, name: str) -> frozenset[int]:
    """The inputs of partition ``name`` that nothing reads after it and that share no
    storage the core can see: each made by an ATen op of the outer graph that is not a view
    (a fresh tensor), read only by this partition (not a graph input or output)."""
    call = next(n for n in outer.graph.nodes if n.op == "call_module" and n.target == name)
    dead = set()
    for i, a in enumerate(call.args):
        if not isinstance(a, torch.fx.Node) or a.op != "call_function" or len(a.users) != 1:
            continue
        if call.args.count(a) != 1:
            continue
        if fresh_result(a.target):
            dead.add(i)
    return frozenset(dead)


def frozen_inputs(
    session: CompileSession,
    ctx: CompileContext,
    plugin: str,
    outer: torch.fx.GraphModule,
    name: str,
    params: Mapping[str, Any],
) -> dict[int, Any]:
    """``{partition input index: parameter or buffer}``: the inputs of partition ``name`` that
    ``plugin`` gets as constants (an inference graph, a graph-level plugin declaring
    ``PluginInfo.frozen_parameters``, an input that is one of the model's parameters or
    buffers, which the graph does not write)."""
    if not params or ctx.graph_kind != "inference":
        return {}
    info = session.peer(plugin).info
    if info.kind != PluginKind.GRAPH or not getattr(info, "frozen_parameters", False):
        return {}
    call = next(n for n in outer.graph.nodes if n.op == "call_module" and n.target == name)
    return {
        i: params[a.name]
        for i, a in enumerate(call.args)
        if isinstance(a, torch.fx.Node) and a.op == "placeholder" and a.name in params
    }


def frozen_graph(
    sub: torch.fx.GraphModule,
    values: Mapping[int, torch.Tensor],
    sources: Mapping[int, torch.Tensor] | None = None,
) -> torch.fx.GraphModule:
    """A copy of ``sub`` whose placeholders at ``values``' positions are ``get_attr`` nodes
    of buffers holding those values (named after the placeholders). ``sources``: the
    parameters or buffers the values were taken of, whose digests (once per tensor and
    version) key the partition in the whole-graph cache."""
    gm = copy_graph(sub)
    gm.meta[graph_cache.CONSTANT_SOURCES] = {}
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for i, value in values.items():
        place = places[i]
        attr = f"frozen_{place.name}"
        gm.register_buffer(attr, value, persistent=False)
        if sources is not None:
            gm.meta[graph_cache.CONSTANT_SOURCES][attr] = sources[i]
        with gm.graph.inserting_before(first):
            node = gm.graph.get_attr(attr)
        node.meta.update(place.meta)
        place.replace_all_uses_with(node)
        gm.graph.erase_node(place)
    gm.graph.lint()
    gm.recompile()
    return gm


class Frozen:
    """A graph-level plugin's partition compiled with the model's parameters and buffers as
    constants (``PluginInfo.frozen_parameters``), guarded on each one's identity, version and
    storage: a parameter or buffer replaced, written in place or given other data
    (``p.data = ...``) since the compile makes the partition compile
    again with the new values (outside the compile's fake mode, as at compile time). Called
    with every input of the partition; the plugin's callable gets the others.
    ``compile(s, c, graph, inputs, dead) -> (callable, cache state)`` is the partition compile
    (:mod:`core.chain`'s), which keys the whole-graph cache on the values' digests;
    :attr:`cache` is the last compile's cache state."""

    def __init__(
        self,
        compile: Callable[..., Callable],
        s: CompileSession,
        c: CompileContext,
        sub: torch.fx.GraphModule,
        inputs: list[Any],
        frozen: Mapping[int, Any],
        dead: frozenset[int],
        tell: Callable[[str], None],
    ) -> None:
        self._s, self._c, self._sub, self._inputs = s, c, sub, inputs
        self._graph_compile = compile
        self._tell = tell  # the outer graph's notes (sdk.explain shows them)
        self._positions = tuple(sorted(frozen))
        self._keep = tuple(i for i in range(len(inputs)) if i not in frozen)
        self._dead = frozenset(k for k, i in enumerate(self._keep) if i in dead)
        self._aten: Callable | None = None
        self.compiles = 0
        self._compile([frozen[i] for i in self._positions])
        places = [n.name for n in sub.graph.nodes if n.op == "placeholder"]
        params = sum(isinstance(frozen[i], torch.nn.Parameter) for i in self._positions)
        self.note = (
            f"{params} parameter(s) and {len(self._positions) - params} buffer(s) frozen as "
            "constants: " + ", ".join(places[i] for i in self._positions)
        )

    def _compile(self, params: list[Any]) -> None:
        there = self._s.info.device_types[0]
        # the plugin folds real values: outside the compile's fake mode (as a re-compile)
        with real_mode():
            values = {
                i: (
                    p.detach()
                    if p.device.type in self._s.info.device_types
                    else p.detach().to(torch.device(there))
                )
                for i, p in zip(self._positions, params, strict=True)
            }
            graph = frozen_graph(self._sub, values, dict(zip(self._positions, params)))
            fn, self.cache = self._graph_compile(
                self._s, self._c, graph, [self._inputs[i] for i in self._keep], self._dead
            )
        self._fn = fn
        self._params = list(params)
        self._versions = [p._version for p in params]
        # ``p.data = other`` keeps the object and its version: its storage tells
        self._storages = [p.data_ptr() for p in params]
        self.compiles += 1

    def __call__(self, *args: Any) -> Any:
        if self._aten is not None:
            return self._aten(*args)
        params, versions, storages = self._params, self._versions, self._storages
        for k, i in enumerate(self._positions):
            a = args[i]
            if a is not params[k] or a._version != versions[k] or a.data_ptr() != storages[k]:
                self._recompile([args[j] for j in self._positions])
                if self._aten is not None:
                    return self._aten(*args)
                break
        fn, keep = self._fn, self._keep
        return fn(*[args[i] for i in keep])

    def _recompile(self, params: list[Any]) -> None:
        changed = sorted(
            {
                "replaced"
                if p is not old
                else "written in place"
                if p._version != v
                else "given other data"
                for p, old, v, ptr in zip(
                    params, self._params, self._versions, self._storages, strict=True
                )
                if p is not old or p._version != v or p.data_ptr() != ptr
            }
        )
        try:
            self._compile(params)
        except SDKError:
            raise
        except Exception as exc:  # noqa: BLE001 - this partition runs in ATen from now on
            if strict(self._c):
                raise
            self._tell(
                f"sdk:{self._c.plugin} failed to compile {self._c.graph_name} again with new "
                f"parameter or buffer values: {describe(exc, one_line=True)}; ATen runs it"
            )
            run, _ = fallback.whole_graph(self._sub, "")
            self._aten = lambda *args: run(list(args))
            return
        self._tell(
            f"{self._c.graph_name} compiled again: a frozen parameter or buffer was "
            f"{' or '.join(changed)} since its last compile"
        )


def copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A GraphModule over a copy of ``gm``'s graph (nodes' meta copied, attributes shared)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def placeholder_vals(sub: torch.fx.GraphModule) -> list[Any]:
    return [n.meta.get("val") for n in sub.graph.nodes if n.op == "placeholder"]


def output_vals(sub: torch.fx.GraphModule) -> list[Any]:
    out = next(n for n in sub.graph.nodes if n.op == "output")
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in out.args[0]]


def is_static(x: Any) -> bool:
    if isinstance(x, torch.SymInt):
        return False
    if isinstance(x, torch.Tensor):
        return not any(isinstance(d, torch.SymInt) for d in (*x.shape, *x.stride()))
    return True
