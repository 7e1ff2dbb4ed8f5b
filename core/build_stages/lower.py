"""The ``lower`` stage: the graph lowered to loop IR (:class:`~core.lowering.Lowerer`; the ATen
nodes the ``schedule`` stage refused run in ATen), with how each output is produced and every
buffer's layout."""

from __future__ import annotations

import torch

from sdk.ir.graph import ComputedView, ExternNode, TensorValue
from sdk.ir.kernel import Layout
from sdk.plugin import CompileContext

from ..lowering import SEED_BUFFER, Lowerer, _dense, same_strides, shape_of, strides_of
from ..session import CompileSession
from .artifacts import Graph, Lowered


def run(session: CompileSession, ctx: CompileContext, graph: Graph) -> Lowered:
    L = Lowerer(
        graph.gm,
        graph.specs,
        ctx,
        session.hooks,
        refused=graph.refused,
        vendor=graph.vendor,
        channels_last=graph.layout,
    )
    L.run()
    outputs, keep = plan_outputs(L)
    return Lowered(graph, L, outputs, keep, _layouts(ctx, L))


def _layouts(ctx: CompileContext, L: Lowerer) -> dict[str, Layout]:
    """Each buffer's layout: the inputs', the IR nodes' and library calls' outputs', the
    constants', the host copies' and the seed's."""
    layouts: dict[str, Layout] = {}
    for name, spec in L.inputs:
        if name:
            layouts[name] = Layout(
                spec.sizes, spec.strides, spec.offset, spec.dtype, spec.device.type
            )
    for n in L.nodes:
        if isinstance(n, ExternNode):
            layouts.update({o[0]: o[1] for o in n.outputs if o})
        else:
            layouts[n.name] = n.layout
    for name, t in L.constants.items():
        layouts[name] = Layout(
            tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.device.type
        )
    for dev_name, (_host, dev_layout) in L.host.items():
        layouts[dev_name] = dev_layout
    layouts[SEED_BUFFER] = Layout((1,), (1,), 0, torch.int64, ctx.device_type)
    return layouts


def plan_outputs(L: Lowerer) -> tuple[list[tuple], set[str]]:
    """How each graph output is produced, and the computed buffers that must be stored."""
    plan, keep = [], set()
    returned: set[str] = set()
    computed = {n.name for n in L.nodes if not isinstance(n, ExternNode)}
    for i, (v, meta) in enumerate(zip(L.outputs, L.output_metas)):
        st = v.storage if isinstance(v, TensorValue) else None
        if st is not None and st.buffer in L.merged and st.buffer in returned:
            # two graph nodes of equal values became one node: each output gets its own
            v = L.pointwise(v.sizes, v.dtype, v.load, cse=False)
        if st is not None:
            returned.add(st.buffer)
        if (
            L.channels_last
            and i not in L.free_outputs
            and isinstance(v, TensorValue)
            and isinstance(meta, torch.Tensor)
        ):
            # a layout the core chose stays inside the graph: outputs leave in eager's
            want = strides_of(meta)
            st = v.storage
            if (
                st is not None
                and shape_of(meta) == tuple(v.sizes)
                and _dense(v.sizes, want)
                and not same_strides(v.sizes, st.layout.strides, want)
            ):
                v = L.require_layout(v, want)
        if isinstance(v, ComputedView) and v.reindex is None and v.sizes == v.node.sizes:
            plan.append(("buf", v.node.name, None))
            keep.add(v.node.name)
        elif isinstance(v, TensorValue) and v.storage is not None:
            st = L.on_host(v.storage)  # a host value leaves the graph as itself, as in eager
            plan.append(("view", st.buffer, st.layout))
            if isinstance(v, ComputedView):
                keep.add(v.node.name)
            elif st.buffer in computed:  # a view of a computed buffer (an as_strided of it)
                keep.add(st.buffer)
        elif isinstance(v, TensorValue):
            copy = L.pointwise(v.sizes, v.dtype, v.load)
            plan.append(("buf", copy.node.name, None))
            keep.add(copy.node.name)
        else:
            plan.append(("const", v, None))
    # the new values of inputs written in place are stored (into the inputs' memory)
    keep |= set(L.written)
    return plan, keep
