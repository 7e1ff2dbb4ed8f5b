"""A graph-level plugin's partition compile in a worker process of its own
(``PluginInfo.isolate_compile``, the ``isolate_compile`` option).

A vendor compiler that crashes (a segfault, an ``abort()`` on a failed check) would take the
user's process with it; run in a worker, it takes the worker only, and the partition falls
back (the next plugin of the chain, else ATen) with the signal in its reason
(:class:`CompileCrashed`). The worker is a fresh interpreter (``sys.executable``, not a fork:
the parent's threads and device state stay where they are) started per compile; it gets the
parent's ``sys.path``, the plugin's entry point, the compile's context and the partition's
graph, its nodes' ``meta["val"]`` as fake tensors of the same layouts, and its constants as real
tensors. It calls the plugin's ``sdk_compile_subgraph`` there and sends back what the
:class:`sdk.CompiledSubgraph` holds but ``fn``: the ``artifact`` (required), which the plugin's
``sdk_load_subgraph`` turns into the callable in the user's process, as on a whole-graph cache
hit, and ``preallocated_outputs``, ``aliases`` and the context's notes.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint
from typing import Any, NamedTuple

import pluggy
import torch
import torch.fx

from sdk import hookspecs
from sdk.errors import SDKError, describe
from sdk.plugin import CompileContext, CompiledSubgraph, CoreOptions, PluginInfo, PluginKind

from .adapters import torch_private as tp
from .session import CompileSession
from .subgraph_io import is_static

#: how much of the worker's last output a crash's reason quotes
TAIL_CHARS = 400

#: what the worker runs: the parent's sys.path first (the plugin may be importable from a
#: directory only the parent added), then the SDK's side of the exchange
_BOOT = (
    "import pickle, sys\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    sys.path[:] = pickle.load(f)\n"
    "    from sdk.core.isolate import serve\n"
    "    serve(f, sys.argv[2])\n"
)


class CompileCrashed(RuntimeError):
    """The worker process of an isolated partition compile died (a signal, an exit) before it
    answered: the partition falls back, with this as its reason."""


def wanted(info: PluginInfo, options: CoreOptions) -> bool:
    """Whether this compile's partitions by the graph-level plugin ``info`` are compiled in a
    worker: the ``isolate_compile`` option where set, else the plugin's declaration."""
    if info.kind != PluginKind.GRAPH:
        return False
    if options.isolate_compile is not None:
        return bool(options.isolate_compile)
    return bool(info.isolate_compile)


def compile_subgraph(
    s: CompileSession, c: CompileContext, sub: torch.fx.GraphModule, inputs: list[Any]
) -> tuple[CompiledSubgraph, float]:
    """``sdk_compile_subgraph`` of ``c.plugin`` on ``sub``, run in a worker process; the
    callable made from its artifact here by ``sdk_load_subgraph``, and the seconds the hook
    took in the worker. Raises
    :class:`CompileCrashed` where the worker died, TypeError where the contract of an
    isolated compile is not kept (symbolic sizes, no artifact, no ``sdk_load_subgraph``)."""
    if not all(is_static(x) for x in inputs):
        raise TypeError(
            f"sdk:{c.plugin} compiles in a worker process (isolate_compile), which takes "
            "concrete sizes only"
        )
    if not s.hooks.implements("sdk_load_subgraph"):
        raise TypeError(
            f"sdk:{c.plugin} compiles in a worker process (isolate_compile) but implements no "
            "sdk_load_subgraph, which turns the artifact the worker made into the callable "
            "here; implement it, or set the option isolate_compile=False"
        )
    record = s.registry.record(c.plugin)
    with tp.real_mode():
        request = {
            "entry_point": (record.name, record.value),
            "context": _context_fields(c),
            "graph": _graph_fields(sub),
        }
    answer = _run(c.plugin, request, c.core_options.isolate_timeout_s)
    for note in answer["notes"]:
        c.note(note)
    artifact = answer["artifact"]
    if not isinstance(artifact, bytes):
        raise TypeError(
            f"sdk:{c.plugin} compiled in a worker process (isolate_compile) returned no "
            "artifact: an isolated sdk_compile_subgraph must return "
            "sdk.CompiledSubgraph(fn, artifact=bytes), which sdk_load_subgraph turns into fn "
            "in the user's process"
        )
    fn = s.hooks.sdk_load_subgraph(ctx=c, artifact=artifact)
    if fn is None:
        raise TypeError(
            f"sdk:{c.plugin} sdk_load_subgraph returned None for the artifact its isolated "
            "compile made"
        )
    compiled = CompiledSubgraph(
        fn=fn,
        artifact=artifact,
        preallocated_outputs=answer["preallocated"],
        aliases=answer["aliases"],
    )
    return compiled, answer["seconds"]


# -- the parent's side ------------------------------------------------------------------


def _run(plugin: str, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """The worker's answer to ``request``; raises what the worker's compile raised (as
    :class:`SDKError` or RuntimeError) or :class:`CompileCrashed` (also where the worker
    took more than ``timeout`` seconds: it is killed)."""
    with tempfile.TemporaryDirectory(prefix="sdk-isolated-") as tmp:
        ask, answer, log = (os.path.join(tmp, n) for n in ("request", "answer", "output"))
        with open(ask, "wb") as f:
            pickle.dump(list(sys.path), f)
            try:
                _Pickler(f).dump(request)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise TypeError(
                    f"sdk:{plugin} compiles in a worker process (isolate_compile), but this "
                    f"partition's compile cannot be sent there: {describe(exc, one_line=True)}"
                    " (an option value or a constant that cannot be pickled)"
                ) from exc
        with open(log, "wb") as out:
            try:
                done = subprocess.run(
                    [sys.executable, "-c", _BOOT, ask, answer],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=False,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:  # (run() killed the worker)
                done = None
        with open(log, "rb") as f:
            output = f.read().decode(errors="replace")
        if output:  # (the vendor's own messages: not swallowed)
            sys.stderr.write(output)
        if done is None:
            raise CompileCrashed(
                f"sdk:{plugin} sdk_compile_subgraph did not finish within {timeout:g} s in its "
                "worker process (isolate_compile), which was killed; if the compile is only "
                "slow, raise the option isolate_timeout_s (None: no limit)"
            )
        if done.returncode != 0 or not os.path.exists(answer):
            raise CompileCrashed(_crash(plugin, done.returncode, output))
        with open(answer, "rb") as f:
            result = pickle.load(f)
    if result["ok"]:
        return result
    error = f"sdk:{plugin} sdk_compile_subgraph raised {result['error']} (in its worker process)"
    raise SDKError(error) if result["sdk_error"] else RuntimeError(error)


def _crash(plugin: str, returncode: int, output: str) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "a signal"
        how = f"killed by {name} (signal {-returncode})"
    elif returncode > 0:
        how = f"exited with status {returncode}"
    else:
        how = "exited without an answer"
    tail = " | ".join(ln.strip() for ln in output.strip().splitlines()[-4:] if ln.strip())
    if len(tail) > TAIL_CHARS:
        tail = "..." + tail[-TAIL_CHARS:]
    said = f"; its last output: {tail}" if tail else ""
    return (
        f"sdk:{plugin} sdk_compile_subgraph crashed its worker process (isolate_compile): "
        f"{how}{said}"
    )


class _Pickler(pickle.Pickler):
    """Pickles ATen op overloads by name (torch's cannot be pickled)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, tp.OpOverload):
            return tp.op_by_name, (tp.op_name(obj),)
        return NotImplemented


class _Ref(NamedTuple):
    """A node argument: the node of this name."""

    name: str


def _context_fields(c: CompileContext) -> dict[str, Any]:
    """The context's fields, as the worker rebuilds it (its notes come back in the answer)."""
    return {
        f.name: dict(c.options) if f.name == "options" else getattr(c, f.name)
        for f in dataclasses.fields(c)
        if f.name != "notes"
    }


def _graph_fields(sub: torch.fx.GraphModule) -> dict[str, Any]:
    """``sub`` as plain data: each node (op, name, target, arguments, the layout of its
    ``meta["val"]``), and the values of its ``get_attr`` constants."""
    nodes, attrs = [], {}
    for n in sub.graph.nodes:
        nodes.append((n.op, n.name, n.target, _refs(n.args), _refs(n.kwargs), _spec(n.meta)))
        if n.op == "get_attr":
            value: Any = sub
            for part in n.target.split("."):
                value = getattr(value, part)
            if not isinstance(value, torch.Tensor) or tp.is_fake(value):
                raise TypeError(
                    f"partition constant {n.target} is a {type(value).__name__}, which an "
                    "isolated compile cannot send to its worker"
                )
            attrs[n.target] = value.detach()
    return {"nodes": nodes, "attrs": attrs}


def _refs(x: Any) -> Any:
    if isinstance(x, torch.fx.Node):
        return _Ref(x.name)
    if isinstance(x, list):  # (torch.fx's immutable lists as plain ones)
        return [_refs(y) for y in x]
    if isinstance(x, tuple):
        return tuple(_refs(y) for y in x)
    if isinstance(x, Mapping):
        return {k: _refs(v) for k, v in x.items()}
    return x


def _spec(meta: Mapping[str, Any]) -> Any:
    return _layout(meta["val"]) if "val" in meta else None


def _layout(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), v.stride(), v.storage_offset(), v.dtype, str(v.device))
    if isinstance(v, (tuple, list)):
        return tuple(_layout(x) for x in v)
    if isinstance(v, torch.SymInt):
        raise TypeError("a symbolic size cannot be sent to an isolated compile's worker")
    return v if v is None or isinstance(v, (bool, int, float)) else None


# -- the worker's side ------------------------------------------------------------------


def serve(f: io.BufferedReader, answer_path: str) -> None:
    """The worker: the request read from ``f`` compiled, the answer written to
    ``answer_path`` (only once whole: a crash leaves no answer)."""
    try:
        answer = _compile(pickle.load(f))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        answer = {"ok": False, "error": describe(exc), "sdk_error": isinstance(exc, SDKError)}
    partial = answer_path + ".part"
    with open(partial, "wb") as out:
        pickle.dump(answer, out)
    os.replace(partial, answer_path)


def _compile(request: dict[str, Any]) -> dict[str, Any]:
    name, value = request["entry_point"]
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(EntryPoint(name, value, hookspecs.ENTRY_POINT_GROUP).load(), name=name)
    ctx = CompileContext(**request["context"])
    if ctx.threads > 0:
        torch.set_num_threads(ctx.threads)
    gm, inputs = _rebuilt(request["graph"], tp.fake_strided())
    start = time.perf_counter()
    result = pm.hook.sdk_compile_subgraph(ctx=ctx, gm=gm, example_inputs=inputs)
    if not isinstance(result, CompiledSubgraph):
        raise TypeError(
            f"sdk_compile_subgraph returned {type(result).__name__}, not an sdk.CompiledSubgraph"
        )
    return {
        "ok": True,
        "artifact": result.artifact,
        "preallocated": result.preallocated_outputs,
        "aliases": dict(result.aliases),
        "notes": list(ctx.notes),
        "seconds": time.perf_counter() - start,
    }


def _rebuilt(
    fields: dict[str, Any], fake: Callable[..., torch.Tensor]
) -> tuple[torch.fx.GraphModule, list[Any]]:
    root = torch.nn.Module()
    for target, value in fields["attrs"].items():
        owner = root
        *path, last = target.split(".")
        for part in path:
            if not hasattr(owner, part):
                owner.add_module(part, torch.nn.Module())
            owner = getattr(owner, part)
        owner.register_buffer(last, value, persistent=False)
    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}

    def resolve(x: Any) -> Any:
        if isinstance(x, _Ref):
            return env[x.name]
        if isinstance(x, (tuple, list)):
            return type(x)(resolve(y) for y in x)
        if isinstance(x, dict):
            return {k: resolve(v) for k, v in x.items()}
        return x

    def value(spec: Any) -> Any:
        if isinstance(spec, tuple) and spec and spec[0] == "tensor":
            _, sizes, strides, offset, dtype, device = spec
            return fake(sizes, strides, offset, dtype, torch.device(device))
        if isinstance(spec, tuple):
            return tuple(value(s) for s in spec)
        return spec

    inputs = []
    for op, name, target, args, kwargs, spec in fields["nodes"]:
        if op == "output":
            graph.output(resolve(args)[0])
            continue
        node = graph.create_node(op, target, resolve(args), resolve(kwargs), name=name)
        if spec is not None:
            node.meta["val"] = value(spec)
        if op == "placeholder":
            inputs.append(node.meta.get("val"))
        env[name] = node
    return torch.fx.GraphModule(root, graph), inputs
