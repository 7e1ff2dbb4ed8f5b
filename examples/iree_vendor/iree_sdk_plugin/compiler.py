"""Compile one ATen FX GraphModule with IREE for llvm-cpu and run it with the IREE runtime.

Independent of the SDK's hooks so that it can be tested on AOTAutograd graphs directly; the
hook module (hook API 3) wraps these two steps. Backward graphs return ``None`` for inputs
without gradients, which IREE's torch dialect rejects (``!torch.none``): they are stripped
before import and put back after the call.
"""

from __future__ import annotations

import atexit
import gc
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

# IREE's compiler and runtime are imported where they are used, not here: the registry loads
# every installed plugin when any sdk backend is looked up, and importing them takes about a
# second (ml_dtypes, the MLIR bindings) that a process compiling with another plugin would pay.

# Without target-cpu=host the code was 4-5x slower (notes of the feasibility run); the binary
# is then tied to this CPU's features, which a cache key must include.
COMPILE_FLAGS = (
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
    "--iree-input-demote-f64-to-f32=false",
)


def _strip_none_outputs(gm: torch.fx.GraphModule) -> list[int | None]:
    """Drop ``None`` outputs from gm in place; return, per original output, its new index."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    kept, where = [], []
    for value in values:
        where.append(None if value is None else len(kept))
        if value is not None:
            kept.append(value)
    out.args = (tuple(kept),)
    gm.recompile()
    return where


def _importer() -> Any:
    """IREE's FX importer, in a new MLIR context."""
    from iree.compiler import ir
    from iree.compiler.extras.fx_importer import FxImporter

    return FxImporter(context=ir.Context())


def compile_vmfb(gm: torch.fx.GraphModule) -> tuple[bytes, list[int | None]]:
    """Import gm to MLIR with IREE's FX importer and compile it; return (vmfb, output map)."""
    from iree.compiler import compile_str

    where = _strip_none_outputs(gm)
    importer = _importer()
    importer.import_stateless_graph(gm.graph, func_name="main")
    vmfb = compile_str(str(importer.module), input_type="torch", extra_args=list(COMPILE_FLAGS))
    return vmfb, where


class _Loaded:
    """One loaded module: the IREE runtime objects a compiled partition calls."""

    def __init__(self, vmfb: bytes) -> None:
        from iree import runtime as ireert

        self.config = ireert.Config("local-task")
        module = ireert.VmModule.copy_buffer(self.config.vm_instance, vmfb)
        self.context = ireert.SystemContext(vm_modules=[module], config=self.config)
        self.main = self.context.modules.module["main"]
        self.device = self.config.device
        _live.add(self)

    def release(self) -> None:
        self.main = self.context = self.device = self.config = None


#: Every loaded module, released at exit: IREE's nanobind bindings print a screen of "leaked
#: function" warnings for runtime objects still alive when the interpreter shuts down (Dynamo's
#: caches keep the compiled partitions alive until then).
_live: weakref.WeakSet[_Loaded] = weakref.WeakSet()


@atexit.register
def _release_all() -> None:
    for loaded in list(_live):
        loaded.release()
    gc.collect()


def load(vmfb: bytes, where: list[int | None]) -> Callable[..., tuple[Any, ...]]:
    """A callable running the module's ``main`` on torch tensors / ints; ``None`` put back."""
    loaded = _Loaded(vmfb)

    def run(*args: Any) -> tuple[Any, ...]:
        device = loaded.device
        results = loaded.main(*[_to_iree(device, a) for a in args])
        results = results if isinstance(results, (tuple, list)) else (results,)
        outs = [_to_torch(device, r) for r in results]
        return tuple(None if i is None else outs[i] for i in where)

    return run


def _to_iree(device: Any, arg: Any) -> Any:
    """Tensors go through DLPack without a copy when IREE accepts the memory as is (dense,
    no storage offset, 64-byte aligned); others are first copied into a fresh dense tensor,
    which torch's CPU allocator aligns."""
    if not isinstance(arg, torch.Tensor):
        return arg
    arg = arg.detach()
    if not (arg.is_contiguous() and arg.storage_offset() == 0 and arg.data_ptr() % 64 == 0):
        arg = arg.contiguous().clone()
    return device.from_dlpack_capsule(arg.__dlpack__())


def _to_torch(device: Any, result: Any) -> torch.Tensor:
    """An IREE result as a torch tensor sharing its memory (IREE results are dense row-major).
    ``_buffer_view`` is IREE's DeviceArray attribute for its HAL buffer view: 3.13 has no
    public accessor, and the version is pinned."""
    return torch.from_dlpack(device.create_dlpack_capsule(result._buffer_view, 1, 0))


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]):
    """Compile gm and return the callable; example_inputs unused (shapes come from node meta)."""
    del example_inputs
    return load(*compile_vmfb(gm))


def single_op_graph(node: torch.fx.Node) -> torch.fx.GraphModule:
    """A graph computing only ``node`` from placeholders with its inputs' fake values."""
    graph = torch.fx.Graph()
    env = {}
    for arg in node.all_input_nodes:
        env[arg] = graph.placeholder(arg.name)
        env[arg].meta["val"] = arg.meta.get("val")
    copy = graph.node_copy(node, lambda n: env[n])
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):  # a multi-output op returns its results one by one
        outs = []
        for i, item in enumerate(val):
            outs.append(graph.call_function(operator.getitem, (copy, i)))
            outs[-1].meta["val"] = item
        graph.output(tuple(outs))
    else:
        graph.output((copy,))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def tensor_valued(node: torch.fx.Node) -> str | None:
    """None for an op whose results are all tensors, else why IREE does not take it (size
    arithmetic stays with the graph around the partitions)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else (val,)
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return "IREE partitions take tensor-valued ops only"
    return None


def _to_input(graph: torch.fx.Graph) -> None:
    """Import ``graph`` and take it through IREE's torch input path; raises if it fails."""
    from iree.compiler import compile_str

    importer = _importer()
    importer.import_stateless_graph(graph, func_name="main")
    compile_str(
        str(importer.module), input_type="torch", extra_args=[*COMPILE_FLAGS, "--compile-to=input"]
    )


def legal_graph(gm: torch.fx.GraphModule) -> bool:
    """Whether IREE's torch input path takes all of ``gm`` (None outputs aside)."""
    copy = torch.fx.GraphModule(gm, copy_graph(gm.graph))
    _strip_none_outputs(copy)
    try:
        _to_input(copy.graph)
    except Exception:  # noqa: BLE001 - any failure: the ops are checked one by one
        return False
    return True


def copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    out = torch.fx.Graph()
    out.output(out.graph_copy(graph, {}))
    return out


def lowers(node: torch.fx.Node) -> str | None:
    """None if IREE's torch input path legalizes ``node`` (``--compile-to=input``), else why."""
    not_tensor = tensor_valued(node)
    if not_tensor:
        return not_tensor
    try:
        _to_input(single_op_graph(node).graph)
    except Exception as exc:  # noqa: BLE001 - importer and compiler raise many types: a refusal
        return f"IREE's torch input path does not lower it: {diagnostic(exc)}"
    return None


def diagnostic(exc: BaseException) -> str:
    """The compiler's own error line out of an exception (iree-compile's message starts with
    "Error invoking IREE compiler tool"; the ``error:`` diagnostic says what failed)."""
    lines = str(exc).splitlines()
    for line in lines:
        if "error:" in line:
            return line.split("error:", 1)[1].split(": %", 1)[0].strip()[:200]
    return (lines[0] if lines else type(exc).__name__)[:200]
