"""The vendor conformance suite: is a plugin right?

``pytest --sdk-plugin=NAME`` (the ``pytest11`` entry point of this distribution loads
:mod:`sdk.conformance.pytest_plugin`) or ``python -m sdk conformance NAME`` runs the checks of
:mod:`sdk.conformance.suite` through ``sdk:NAME`` and prints a summary, with the pass counts of
the built-in plugins for the same device beside it:

* **opinfo**: the first sample inputs of OpInfo ops (torch's ``op_db``; a curated subset by
  default, ``--sdk-opinfo=all`` for every op; ``--sdk-samples=N`` samples each, default
  :data:`DEFAULT_SAMPLES`), fp32 and bf16, forward and forward+backward, against eager at
  Inductor's tolerances;
* **fusion**: what ``sdk.explain`` reports: pointwise chains in one kernel, a reduction with its
  neighbours, training graphs (for a graph-level plugin: in one partition it compiled);
* **options**: unknown options and wrong types raise and name the fix, declared options
  compile at their defaults and at other values (:func:`option_values`), ``fusion=False``
  and ``fallback=False`` are honoured, the identity hooks answer;
* **sizes**: ``dynamic=True`` over several sizes is right; a plugin declaring
  ``Capability.SYMBOLIC_SIZES`` compiles one program for all of them;
* **faults**: a kernel that fails to render, to build or to run (a graph-level plugin: a
  partition that fails to compile or to run) falls back to ATen (or to the ``chain``);
  ``debug=True`` and ``fallback=False`` raise;
* **cache**: corrupt, truncated or foreign entries in the per-user cache are misses;
* **outputs** (graph-level plugins): each partition's outputs have the sizes, dtype and
  strides of the output node's ``meta["val"]``, share no input's storage unless ATen's do (or
  the plugin declared it, ``CompiledSubgraph.aliases``), and no input is written but those
  the core passed as output buffers (:func:`checking_outputs`).

A plugin may declare the cases it is known to fail, each with its reason, in a module
``known_failures`` of its package (``KNOWN_FAILURES = {"op-dtype-mode": "why", "sizes_dynamic":
"why"}``, see :func:`known_failures`): OpInfo cases and the other checks alike run as strict
xfails, so a known failure that passes is reported.

This module holds what the checks share; a plugin never imports it.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

import sdk
from sdk._seams import Plugins, plugins, plugins_from, private_torch
from sdk.hookspecs import ENTRY_POINT_GROUP

#: Inductor's tolerances (torch/_inductor tests, torch.testing defaults; bf16 looser).
TOL = {
    torch.float32: dict(rtol=1.3e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
}
DTYPES = ("float32", "bfloat16")

#: OpInfo samples compared per case (``--sdk-samples``): the first few, which differ in shape,
#: broadcasting and arguments (``add``: scalars, broadcasts, 0-d tensors ...).
DEFAULT_SAMPLES = 3

#: The OpInfo ops of ``--sdk-opinfo=quick``: pointwise, reduction, normalization, indexing.
#: Each name is one OpInfo, its variant included (``softmax`` is not ``softmax.with_dtype``).
QUICK_OPS = (
    "add", "mul", "nn.functional.gelu", "sum", "softmax", "nn.functional.layer_norm", "where",
    "index_select",
)  # fmt: skip
#: ``--sdk-opinfo=default``: the quick ones and the ops of the models users compile.
DEFAULT_OPS = QUICK_OPS + (
    "sub", "div.no_rounding_mode", "exp", "tanh", "sigmoid", "rsqrt", "abs", "maximum",
    "clamp", "nn.functional.relu", "nn.functional.silu", "pow", "lerp", "addcmul",
    "masked_fill", "mean", "amax", "var", "log_softmax", "logsumexp", "argmax", "prod",
    "gather", "cat", "transpose", "permute", "reshape", "expand", "matmul",
    "nn.functional.embedding", "nn.functional.cross_entropy", "cumsum",
    "softmax.with_dtype", "log_softmax.with_dtype", "var.unbiased",
)  # fmt: skip


# -- plugins and devices -------------------------------------------------------------


def registry() -> Plugins:
    """The installed plugins this process uses now (the core's registry)."""
    return plugins()


#: The plugins that compile graphs: kernel-level (CODEGEN) and graph-level (GRAPH) ones.
COMPILING = (sdk.PluginKind.CODEGEN, sdk.PluginKind.GRAPH)


def require(name: str) -> sdk.PluginInfo:
    """The plugin's info; an error naming the cause and fix if it cannot run here."""
    return registry().require(name, COMPILING).info


def graph_level(name: str) -> bool:
    """Whether ``name`` compiles whole subgraphs (``sdk_compile_subgraph``), not kernels."""
    return require(name).kind == sdk.PluginKind.GRAPH


def known_failures(name: str) -> dict[str, str]:
    """The cases plugin ``name`` declares it fails: ``{case id: reason}``. An OpInfo case's id
    is ``"op-dtype-mode"`` (``"cumsum-bfloat16-fw"``); another check's is its test name
    without ``test_``, its parameters other than plugin and device in brackets
    (``"fault_falls_back_and_strict_raises[build]"``, ``"sizes_dynamic"``: the ids
    ``pytest --collect-only`` shows, less plugin and device).

    Read from the module ``known_failures`` of the package that holds the plugin's hooks
    (a file beside them, shipped in the same wheel; nothing is loaded when compiling): its
    ``KNOWN_FAILURES`` dict. A plugin without one declares none."""
    import importlib

    hooks = registry().record(name).plugin
    is_package = getattr(hooks, "__path__", None) is not None
    package = hooks.__name__ if is_package else hooks.__name__.rpartition(".")[0]
    if not package:
        return {}
    module_name = f"{package}.known_failures"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return {}
        raise
    declared = getattr(module, "KNOWN_FAILURES", None)
    if not isinstance(declared, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in declared.items()
    ):
        raise TypeError(
            f"{module_name}.KNOWN_FAILURES must be a dict of case ids ('op-dtype-mode' for an "
            "OpInfo case, the check's name without 'test_' for the others) to non-empty "
            "reasons, e.g. {'cumsum-bfloat16-fw': 'why it fails', 'sizes_dynamic': 'why'}"
        )
    return declared


def device_for(name: str, override: str | None = None) -> str:
    """The device the checks of plugin ``name`` make their tensors on: ``override``, else
    the first of its ``device_types`` that torch has here (``torch.<type>.is_available()``;
    a ``PrivateUse1`` backend's module answers the same)."""
    if override:
        return override
    info = require(name)
    for dt in info.device_types:
        if dt == "cpu":
            return dt
        mod = getattr(torch, dt, None)
        available = getattr(mod, "is_available", None)
        if callable(available) and available():
            return dt
    raise sdk.PluginUnavailableError(
        f"sdk:{name} runs on {', '.join(info.device_types)}, and torch has none of them here "
        f"(torch.<device>.is_available() is False); run on such a machine, or pass "
        f"--sdk-device=<type> to name the device"
    )


def builtin_peers(name: str, device: str) -> list[str]:
    """The available built-in compiling plugins (this distribution's) for ``device``."""
    reg = registry()
    out = []
    for n in reg.usable_names(COMPILING):
        rec = reg.record(n)
        if n != name and rec.distribution == "torch-backend-sdk":
            try:
                if device_for(n) == device:
                    out.append(n)
            except sdk.SDKError:
                continue
    return out


# -- comparing with eager ------------------------------------------------------------


def tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in tensors(y)]
    if isinstance(x, dict):
        return [t for y in x.values() for t in tensors(y)]
    return []


def assert_close(actual: Any, expected: Any, what: str = "output") -> None:
    """Each tensor of ``actual`` against ``expected`` at :data:`TOL` for its dtype."""
    a, e = tensors(actual), tensors(expected)
    assert len(a) == len(e), f"{len(a)} {what}s, eager gives {len(e)}"
    for i, (x, y) in enumerate(zip(a, e)):
        assert x.shape == y.shape, f"{what} {i}: shape {tuple(x.shape)}, eager {tuple(y.shape)}"
        assert x.dtype == y.dtype, f"{what} {i}: dtype {x.dtype}, eager {y.dtype}"
        tol = TOL.get(x.dtype, dict(rtol=0, atol=0))
        torch.testing.assert_close(
            x.detach(), y.detach(), equal_nan=True, msg=lambda m, i=i: f"{what} {i}: {m}", **tol
        )


def run_both(
    fn: Callable, args: list[Any], compiled: Callable, grad: bool, seed: int
) -> tuple[list[torch.Tensor] | None, list[torch.Tensor] | None]:
    """Outputs (and, with ``grad``, input gradients for a random upstream gradient) of
    ``compiled`` and of eager ``fn`` on copies of ``args``; None where there is no gradient."""

    def run(f: Callable) -> list[torch.Tensor] | None:
        ins = [
            a.detach().clone().requires_grad_(grad and a.requires_grad)
            if isinstance(a, torch.Tensor)
            else a
            for a in args
        ]
        torch.manual_seed(seed)
        outs = tensors(f(*ins))
        if not grad:
            return [t.detach() for t in outs]
        diff = [t for t in outs if t.requires_grad]
        leaves = [t for t in ins if isinstance(t, torch.Tensor) and t.requires_grad]
        if not diff or not leaves:
            return None
        gen = torch.Generator(device=diff[0].device).manual_seed(seed)
        gouts = [torch.randn(t.shape, dtype=t.dtype, device=t.device, generator=gen) for t in diff]
        gs = torch.autograd.grad(diff, leaves, gouts, allow_unused=True)
        return [t.detach() for t in outs] + [g for g in gs if g is not None]

    return run(compiled), run(fn)


def seed_of(*parts: Any) -> int:
    return zlib.crc32(" ".join(map(str, parts)).encode())


def reset() -> None:
    sdk.reset()


# -- OpInfo ------------------------------------------------------------------------------


def op_db() -> list[Any]:
    try:
        db = private_torch().opinfo_db()
    except ImportError as exc:  # expecttest is torch's test-only dependency
        raise ImportError(
            f"the OpInfo checks need torch's test database, which failed to import ({exc}); "
            "install the missing module: pip install 'torch-backend-sdk[conformance]' "
            "(or pip install expecttest)"
        ) from exc
    return db


def op_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def opinfo_cases(selection: str, device: str) -> list[tuple[str, str, str]]:
    """``(op, dtype, mode)`` cases: ``selection`` is quick, default, all or op names
    (``name`` or ``name.variant``, comma-separated: ``softmax`` names every variant, as a
    user means it); modes are fw and fwbw. The named sets hold exact OpInfo names: quick
    runs ``len(QUICK_OPS)`` OpInfos, default ``len(DEFAULT_OPS)``."""
    db = op_db()
    exact = selection in ("quick", "default")
    if exact:
        wanted: set[str] | None = set(QUICK_OPS if selection == "quick" else DEFAULT_OPS)
    elif selection == "all":
        wanted = None
    else:
        wanted = {s.strip() for s in selection.split(",") if s.strip()}
    found: set[str] = set()
    cases = []
    for op in db:
        name = op_name(op)
        if wanted is not None and name not in wanted and (exact or op.name not in wanted):
            continue
        found |= {name, op.name}
        dts = op.supported_dtypes(device)
        for dt in DTYPES:
            if getattr(torch, dt) not in dts:
                continue
            cases.append((name, dt, "fw"))
            if op.supports_autograd:
                cases.append((name, dt, "fwbw"))
    if wanted is not None and wanted - found:
        raise ValueError(
            f"--sdk-opinfo: no OpInfo named {', '.join(sorted(wanted - found))} in torch "
            f"{torch.__version__}'s op_db; use quick, default, all or names such as "
            "'add,softmax,div.no_rounding_mode'"
        )
    return cases


def run_opinfo_case(
    plugin: str, device: str, name: str, dt: str, mode: str, samples: int = 1
) -> bool:
    """Compare the first ``samples`` sample inputs of OpInfo ``name`` through ``sdk:plugin``
    with eager, each compiled afresh; True when the plugin generated a kernel for one (else
    every op ran through ATen or a library). A graph-level plugin must compile every op of
    the case: one it left to ATen fails it.

    Skips (``pytest.skip``) when eager can run none of the samples or there is nothing to
    differentiate in any; fails on a mismatch or an error of the compiled function, naming
    the sample."""
    import itertools

    import pytest

    op = next(o for o in op_db() if op_name(o) == name)
    grad = mode == "fwbw"
    seed = seed_of(name, dt, mode)
    torch.manual_seed(seed)
    first = list(
        itertools.islice(
            op.sample_inputs(device, getattr(torch, dt), requires_grad=grad), max(samples, 1)
        )
    )
    if not first:
        pytest.skip(f"OpInfo {name} has no {dt} sample on {device}")
    made, ran, why = False, 0, ""
    for i, sample in enumerate(first):
        try:
            made |= _run_sample(plugin, op, name, sample, grad, seed + i)
            ran += 1
        except pytest.skip.Exception as exc:
            why = str(exc)
        except AssertionError as exc:
            raise AssertionError(
                f"sample {i} of {len(first)} ({_describe(sample)}): {exc}"
            ) from None
    if not ran:
        pytest.skip(why)
    return made


def _describe(sample: Any) -> str:
    """A sample's shapes, for a failure message."""
    flat, _ = private_torch().tree_flatten((sample.input, sample.args, sample.kwargs))
    return ", ".join(
        f"{tuple(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)[:20] for x in flat
    )


def _run_sample(plugin: str, op: Any, name: str, sample: Any, grad: bool, seed: int) -> bool:
    import pytest

    tp = private_torch()
    flat, spec = tp.tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]

    def fn(*ts: torch.Tensor) -> Any:
        vals = list(flat)
        for i, t in zip(where, ts):
            vals[i] = t
        inp, args, kwargs = tp.tree_unflatten(vals, spec)
        return op(inp, *args, **kwargs)

    ins = [flat[i] for i in where]
    try:
        _, expected = run_both(fn, ins, fn, grad, seed)
    except Exception as exc:  # noqa: BLE001 - eager cannot run it: nothing to compare with
        pytest.skip(f"eager cannot run the sample: {type(exc).__name__}: {exc}"[:300])
    if expected is None:
        pytest.skip(f"{name}: no differentiable output or input in the sample")
    reset()
    compiled = torch.compile(fn, backend=sdk.backend(plugin), dynamic=False)
    with sdk.collect_reports() as compiled_now:
        actual, _ = run_both(fn, ins, compiled, grad, seed)
    graphs = compiled_now.graphs
    assert actual is not None, "the compiled function has no gradient where eager has one"
    if name.startswith(("empty", "new_empty")):  # uninitialized memory: layouts only
        actual = [t.new_zeros(t.shape) for t in actual]
        expected = [t.new_zeros(t.shape) for t in expected]
    assert_close(actual, expected, "output or gradient")
    if graph_level(plugin):
        return _compiled_whole(plugin, graphs, name)
    return any(g.kernels for g in graphs)


def option_values(spec: sdk.OptionSpec) -> list[Any]:
    """The values other than its default the options check compiles a declared option with:
    its ``examples``, else a ``bool`` flipped or an ``int`` one more; none for another type
    (declare ``examples`` to have it checked)."""
    if spec.examples:
        return [v for v in spec.examples if v != spec.default]
    if isinstance(spec.default, bool):
        return [not spec.default]
    if isinstance(spec.default, int):
        return [spec.default + 1]
    return []


def _compiled_whole(plugin: str, graphs: list[sdk.GraphReport], name: str) -> bool:
    """True when graph-level ``plugin`` compiled every op of the case's graphs, else the case
    fails: a result ATen computed says nothing of the plugin (skips when there is no op)."""
    import pytest

    if not any(g.aten_ops for g in graphs):
        pytest.skip(f"{name}: the compiled graphs hold no ATen op (nothing to compile)")
    missed = not_compiled(plugin, graphs)
    assert not missed, f"sdk:{plugin} did not compile all of {name}: " + "; ".join(missed)
    return True


def not_compiled(plugin: str, graphs: list[sdk.GraphReport]) -> list[str]:
    """What of ``graphs`` graph-level ``plugin`` did not compile, each with the reason: ops
    left to ATen, partitions another plugin (or ATen) compiled, graphs it was not given."""
    out = [f"{f.op} ran in ATen ({f.reason})" for g in graphs for f in g.fallbacks]
    out += [
        f"partition {p.name} ({', '.join(p.nodes)}) compiled by {p.compiled_by} ({p.note})"
        for g in graphs
        for p in g.partitions
        if p.compiled_by != plugin
    ]
    out += [f"graph {g.name} has no partition" for g in graphs if g.aten_ops and not g.partitions]
    return out


# -- explain -------------------------------------------------------------------------


def explain(plugin: str, fn: Callable, *args: Any, **options: Any) -> sdk.ExplainReport:
    reset()
    return sdk.explain(fn, *args, backend=f"sdk:{plugin}", **options)


def generated_ops(report: sdk.ExplainReport) -> list[str]:
    return [op for k in report.kernels for op in k.ops]


# -- fault injection -----------------------------------------------------------------


class InjectedFault(RuntimeError):
    """The fault the conformance suite puts into a plugin's kernels."""


def _call(fn: Callable, **kwargs: Any) -> Any:
    """Call a hookimpl with the arguments it names (a hookimpl may take a subset)."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in params})


def faulty(plugin: str, where: str) -> types.ModuleType:
    """A copy of ``plugin``'s hook module with a fault: ``where`` is ``render`` (rendering
    raises), ``build`` (compiling raises) or ``run`` (every compiled kernel raises); for a
    graph-level plugin ``build`` and ``run`` are its subgraphs' compile and run."""
    orig = registry().record(plugin).plugin
    mod = types.ModuleType(f"sdk_conformance_faulty_{plugin}_{where}")
    for n in dir(orig):
        if n.startswith("sdk_"):
            setattr(mod, n, getattr(orig, n))
    if graph_level(plugin):
        return _faulty_subgraphs(mod, orig, plugin, where)
    message = f"fault injected into sdk:{plugin}'s kernel {where} by the conformance suite"

    if where == "render":

        @sdk.hookimpl
        def sdk_render_kernel(ctx: sdk.CompileContext, kernel: Any) -> Any:
            raise InjectedFault(message)

        mod.sdk_render_kernel = sdk_render_kernel
    elif where == "build":

        @sdk.hookimpl
        def sdk_compile_kernels(ctx: sdk.CompileContext, sources: list) -> Any:
            raise InjectedFault(message)

        mod.sdk_compile_kernels = sdk_compile_kernels
    elif where == "run":
        compile_kernels = orig.sdk_compile_kernels

        @sdk.hookimpl
        def sdk_compile_kernels(ctx: sdk.CompileContext, sources: list) -> Any:
            fns = _call(compile_kernels, ctx=ctx, sources=sources)

            def raising(*tensors: Any) -> None:
                raise InjectedFault(message)

            return [raising for _ in fns]

        mod.sdk_compile_kernels = sdk_compile_kernels
    else:
        raise ValueError(f"fault at {where!r}: use render, build or run")
    return mod


def _faulty_subgraphs(
    mod: types.ModuleType, orig: Any, plugin: str, where: str
) -> types.ModuleType:
    """``mod`` (a graph-level plugin's hooks) with ``sdk_compile_subgraph`` raising
    (``build``), or returning subgraphs that raise when run (``run``; with no artifact, so
    the whole-graph cache cannot hand the intact program back)."""
    message = f"fault injected into sdk:{plugin}'s subgraph {where} by the conformance suite"
    compile_subgraph = orig.sdk_compile_subgraph

    if where == "build":

        @sdk.hookimpl
        def sdk_compile_subgraph(ctx: sdk.CompileContext, gm: Any, example_inputs: list) -> Any:
            raise InjectedFault(message)

    elif where == "run":

        @sdk.hookimpl
        def sdk_compile_subgraph(ctx: sdk.CompileContext, gm: Any, example_inputs: list) -> Any:
            _call(compile_subgraph, ctx=ctx, gm=gm, example_inputs=example_inputs)

            def raising(*tensors: Any) -> None:
                raise InjectedFault(message)

            return sdk.CompiledSubgraph(fn=raising, artifact=None)

    else:
        raise ValueError(f"fault at {where!r} of a graph-level plugin: use build or run")
    mod.sdk_compile_subgraph = sdk_compile_subgraph
    return mod


def checking_outputs(plugin: str) -> tuple[types.ModuleType, list[str]]:
    """A copy of graph-level ``plugin``'s hook module whose subgraphs are checked on every
    call against the output contract (``sdk.CompiledSubgraph``), and the list each violation
    is appended to (one line each, naming the partition, what was expected and what came)."""
    orig = registry().record(plugin).plugin
    mod = types.ModuleType(f"sdk_conformance_outputs_{plugin}")
    for n in dir(orig):
        if n.startswith("sdk_"):
            setattr(mod, n, getattr(orig, n))
    violations: list[str] = []
    compile_subgraph = orig.sdk_compile_subgraph

    @sdk.hookimpl
    def sdk_compile_subgraph(ctx: sdk.CompileContext, gm: Any, example_inputs: list) -> Any:
        import copy

        ref = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        vals = [a.meta.get("val") if hasattr(a, "meta") else a for a in out_node.args[0]]
        result = _call(compile_subgraph, ctx=ctx, gm=gm, example_inputs=example_inputs)
        if not isinstance(result, sdk.CompiledSubgraph):
            return result
        n_in = len(example_inputs)
        where = f"{ctx.graph_name} ({ctx.graph_kind})"

        def checked(*args: Any) -> Any:
            ins = args[:n_in]
            before = [a.clone() if isinstance(a, torch.Tensor) else a for a in ins]
            ret = result.fn(*args)
            if result.preallocated_outputs:
                outs, buffers = list(args[n_in:]), {id(b) for b in args[n_in:]}
            else:
                outs, buffers = list(ret), set()
            violations.extend(_output_violations(where, outs, vals, ins, ref, result))
            for j, (a, b) in enumerate(zip(ins, before, strict=True)):
                if isinstance(a, torch.Tensor) and id(a) not in buffers and not _same(a, b):
                    violations.append(
                        f"{where}: input {j} was written (partitions are functional: only an "
                        "input the core passes as an output buffer may be, "
                        "CompiledSubgraph.aliases)"
                    )
            return ret

        return sdk.CompiledSubgraph(
            fn=checked,
            artifact=None,
            preallocated_outputs=result.preallocated_outputs,
            aliases=result.aliases,
        )

    mod.sdk_compile_subgraph = sdk_compile_subgraph
    return mod, violations


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    except AssertionError:
        return False
    return True


def _output_violations(
    where: str, outs: list[Any], vals: list[Any], ins: Any, ref: Any, result: Any
) -> list[str]:
    """What breaks the output contract in one call's outputs."""
    if len(outs) != len(vals):
        return [f"{where}: {len(outs)} outputs returned, the graph has {len(vals)}"]
    found = []
    expected_alias = None
    for i, (o, v) in enumerate(zip(outs, vals, strict=True)):
        if not isinstance(v, torch.Tensor):
            continue
        if not isinstance(o, torch.Tensor):
            found.append(f"{where}: output {i} is a {type(o).__name__}, expected a tensor")
            continue
        want = (tuple(int(d) for d in v.shape), v.dtype, v.device.type)
        got = (tuple(o.shape), o.dtype, o.device.type)
        if got != want:
            found.append(f"{where}: output {i} is {got}, expected {want} (meta['val'])")
            continue
        strides = [int(st) for st, d in zip(v.stride(), v.shape, strict=True) if int(d) > 1]
        actual = [st for st, d in zip(o.stride(), o.shape, strict=True) if d > 1]
        # (an expanded output, stride 0, may come back dense: the core puts it into that layout)
        if o.numel() > 1 and strides != actual and 0 not in strides:
            found.append(
                f"{where}: output {i} has strides {tuple(o.stride())}, expected "
                f"{tuple(int(st) for st in v.stride())} (meta['val']; sizes of 1 aside): "
                "return it in that layout, or ask for preallocated_outputs"
            )
        for j, x in enumerate(ins):
            if not isinstance(x, torch.Tensor) or x.numel() == 0 or o.numel() == 0:
                continue
            if o.untyped_storage().data_ptr() != x.untyped_storage().data_ptr():
                continue
            if result.aliases.get(i) == j:
                continue
            if expected_alias is None:
                expected_alias = _ref_aliases(ref, ins)
            if (i, j) not in expected_alias:
                found.append(
                    f"{where}: output {i} shares input {j}'s storage, which ATen's does not "
                    "and the plugin did not declare (return a new tensor, or declare it in "
                    "CompiledSubgraph.aliases with preallocated_outputs)"
                )
    return found


def _ref_aliases(ref: Any, ins: Any) -> set[tuple[int, int]]:
    """(output, input) pairs whose storage ATen's run of the partition shares."""
    try:
        outs = ref(*ins)
    except Exception:  # noqa: BLE001 - no reference: no aliasing is expected
        return set()
    return {
        (i, j)
        for i, o in enumerate(outs)
        for j, x in enumerate(ins)
        if isinstance(o, torch.Tensor)
        and isinstance(x, torch.Tensor)
        and o.numel()
        and o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    }


@contextlib.contextmanager
def registry_with(plugin: str, module: types.ModuleType) -> Iterator[Any]:
    """The installed plugins, with ``plugin``'s hooks served by ``module``, process-wide."""
    from importlib.metadata import EntryPoint, entry_points

    sys.modules[module.__name__] = module
    eps = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name != plugin]
    eps.append(EntryPoint(plugin, module.__name__, ENTRY_POINT_GROUP))
    try:
        with plugins_from(eps) as reg:
            yield reg
    finally:
        sys.modules.pop(module.__name__, None)
        reset()


def implements(plugin: str, hook: str) -> bool:
    return callable(getattr(registry().record(plugin).plugin, hook, None))


def environ(**values: str) -> contextlib.AbstractContextManager[None]:
    """Set environment variables for the block (the SDK reads them when it needs them)."""
    from sdk import _config as config

    return config.overridden(**values)
