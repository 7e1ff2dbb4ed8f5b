"""Fault injection: one plugin's hook raises, and everything else holds.

A plugin ``faulty`` (cpu_cpp's code generator under another name, so it really compiles) gets
one hook that raises, for every hook of ``sdk/hookspecs.py`` (read from the module: a hook
added there without a case in :data:`CASES` fails :func:`test_fault_in_hook`), plus a plugin
that fails to import and one whose kernels fail when run. Each time, beside it:

* the healthy plugin (cpu_cpp) compiles the same kernels as without ``faulty`` installed, and
  its results equal eager;
* the fault lands where its contract says: the plugin unavailable (identity hooks, import),
  its compile falling back to ATen with the plugin and hook in ``sdk.explain`` (compile
  hooks, run time), or a hook fault in the report of the graph it was called for, a warning
  and ``faulty`` in ``sdk.list_plugins()`` (observers, wrappers);
* strict mode (``fallback=False``, or ``debug=True`` where an op must fall back) raises an
  error naming the plugin and the hook.
"""

from __future__ import annotations

import copy
import inspect
import re
import sys
import warnings
from collections.abc import Callable

import pytest
import torch

import sdk
from sdk import hookspecs

HOOKS = sorted(
    n for n, f in vars(hookspecs).items() if n.startswith("sdk_") and inspect.isfunction(f)
)

#: What every injected fault says, so a reason can be traced back to the injection.
FAULT = "fault injected into"

#: The faulty plugin: cpu_cpp's identity and code generator, under the name "faulty".
HEAD = '''
import dataclasses

import sdk
from sdk.plugins import cpu_cpp


class InjectedFault(RuntimeError):
    """What a faulty hook raises."""

'''

INFO = """
@sdk.hookimpl
def sdk_plugin_info():
    return dataclasses.replace(cpu_cpp.sdk_plugin_info(), name="faulty", version="0.0.1",
                               kind=sdk.PluginKind.{kind})
"""

#: cpu_cpp's codegen hooks, which ``faulty`` uses unless the fault is in one of them.
CODEGEN = ("sdk_render_kernel", "sdk_compile_kernels")


#: A graph-level ``faulty``: it claims every op, "compiles" a partition by running its
#: GraphModule, stores an artifact and finds none usable later (the fault overrides one).
GRAPH_LEVEL = """
@sdk.hookimpl
def sdk_claim_nodes(ctx, gm):
    return {n: sdk.Support.yes() for n in gm.graph.nodes if n.op == "call_function"}


@sdk.hookimpl
def sdk_compile_subgraph(ctx, gm, example_inputs):
    return sdk.CompiledSubgraph(fn=gm, artifact=b"the partition")


@sdk.hookimpl
def sdk_load_subgraph(ctx, artifact):
    return None


@sdk.hookimpl
def sdk_cache_key(ctx):
    return "faulty graph-level"
"""


def faulty_source(hook: str | None, kind: str = "CODEGEN") -> str:
    """The faulty plugin's module, with ``hook`` raising :data:`FAULT` (None: no fault)."""
    parts = [HEAD]
    parts += [f"{h} = cpu_cpp.{h}\n" for h in CODEGEN if h != hook]
    if kind == "GRAPH":
        parts.append(GRAPH_LEVEL)
    if hook != "sdk_plugin_info":
        parts.append(INFO.format(kind=kind))
    if hook is not None:
        params = ", ".join(inspect.signature(getattr(hookspecs, hook)).parameters)
        wrapper = hook == "sdk_wrap_compiled"  # wrappers are generators: inner = yield
        parts.append(
            f"\n@sdk.hookimpl{'(wrapper=True)' if wrapper else ''}\n"
            f"def {hook}({params}):\n"
            f"    raise InjectedFault('{FAULT} sdk:faulty {hook}')\n"
            + ("    yield\n" if wrapper else "")
        )
    return "".join(parts)


@pytest.fixture
def install(make_plugin, fake_dist, use_registry) -> Callable[..., object]:
    """``install(source)``: a registry with the built-in plugins and ``faulty`` from
    ``source``; ``install(None)``: the built-in plugins only. Returns the registry."""

    def make(source: str | None):
        if source is None:
            return use_registry()
        module = make_plugin(source, name="faulty", head=False)
        return use_registry(fake_dist("acme-faulty", {"faulty": module}))

    return make


def fused(x):
    """Pointwise ops and a reduction: every compile hook of the plugin is asked."""
    return torch.relu(x * 2.0) + x.sum(-1, keepdim=True)


def with_matmul(x):
    """A library call (sdk_extern is asked only for those) between pointwise ops."""
    return torch.relu(x @ x.t()) * 2.0


def with_fallback(x):
    """An op cpu_cpp has no lowering for (sdk_on_fallback is called for it)."""
    return torch.digamma(x) * 2.0 + 1.0


def _x() -> torch.Tensor:
    return torch.rand(8, 33) + 0.5  # > 0: digamma is finite


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (torch.compile wraps a backend's error)."""
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in out:
        out.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
    return out


def _strict_error(fn, backend, hook: str, x: torch.Tensor | None = None) -> BaseException:
    """The SDK error naming ``faulty`` and ``hook`` that compiling ``fn`` (on ``x``, default
    :func:`_x`) raises."""
    with pytest.raises(Exception) as info:  # the chain is checked below
        torch.compile(fn, backend=backend)(_x() if x is None else x)
    chain = _chain(info.value)
    named = [
        e
        for e in chain
        if isinstance(e, sdk.SDKError)
        and "faulty" in str(e)
        and f"{hook} raised" in str(e)
        and FAULT in str(e)
    ]
    assert named, f"no SDK error naming sdk:faulty and {hook}: {chain}"
    return named[0]


def _healthy(fn, baseline: sdk.ExplainReport | None = None) -> sdk.ExplainReport:
    """cpu_cpp compiles ``fn`` (the kernels of ``baseline``, if given) and equals eager."""
    x = _x()
    torch.testing.assert_close(torch.compile(fn, backend="sdk:cpu_cpp")(x), fn(x))
    report = sdk.explain(fn, _x(), backend="sdk:cpu_cpp")
    assert [g.plugin for g in report.graphs] == ["cpu_cpp"], str(report)
    assert report.kernels, str(report)
    if baseline is not None:
        assert [k.ops for k in report.kernels] == [k.ops for k in baseline.kernels], (
            f"cpu_cpp's kernels changed:\n{report}\nwithout the faulty plugin:\n{baseline}"
        )
        assert [f.op for f in report.fallbacks] == [f.op for f in baseline.fallbacks]
    return report


def _status(name: str) -> str:
    return {r["name"]: r for r in sdk.list_plugins()}[name]["status"]


# -- the contracts ----------------------------------------------------------------------


def identity_fault(install, hook: str) -> None:
    """The plugin is unavailable, says which hook raised, and asking for it raises."""
    reg = install(faulty_source(hook))
    assert f"{hook} raised" in reg.status("faulty") and FAULT in reg.status("faulty")
    assert _status("faulty").startswith("unavailable: ")
    with pytest.raises(sdk.PluginUnavailableError, match=f"'faulty'.*{hook}"):
        sdk.backend("faulty")
    _healthy(fused)


def compile_fault(install, hook: str, fn=fused) -> None:
    """The faulty plugin's graph runs through ATen, a PluginFallbackWarning and the reason
    name plugin and hook, and ``fallback=False`` raises an SDKError that names them."""
    install(faulty_source(hook))
    x = _x()
    with pytest.warns(sdk.PluginFallbackWarning, match=f"'faulty'.*in ATen instead.*{hook}"):
        torch.testing.assert_close(torch.compile(fn, backend=sdk.backend("faulty"))(x), fn(x))
    report = sdk.explain(fn, _x(), backend=sdk.backend("faulty"))
    assert not report.kernels and report.fallbacks, str(report)
    assert all(
        f"sdk:faulty {hook} raised" in f.reason and FAULT in f.reason for f in report.fallbacks
    ), str(report)
    _strict_error(fn, sdk.backend("faulty", fallback=False), hook)
    _healthy(fn)
    assert _status("faulty") == "ok"  # its compile fell back; nothing to list


def extern_fault(install, hook: str) -> None:
    """sdk_extern is asked for library calls only: a graph with a matrix product."""
    compile_fault(install, hook, with_matmul)


def cache_key_fault(install, hook: str, monkeypatch, tmp_path) -> None:
    """sdk_cache_key is asked only with the whole-graph cache on."""
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    compile_fault(install, hook)


def kernel_choices_fault(install, hook: str) -> None:
    """sdk_kernel_choices is asked for kernels that move a MiB or more, under a budget: its
    fault is the plugin's, in the report and warned about; the kernels stay as rendered and
    equal eager; strict mode raises PluginHookError naming plugin and hook."""
    install(faulty_source(hook))
    big = torch.rand(512, 1024) + 0.5
    backend = sdk.backend("faulty", tune_budget_s=5.0)
    with pytest.warns(sdk.PluginHookWarning, match=f"'faulty'.*{hook}.*SDK_PLUGINS_DENY"):
        report = sdk.explain(fused, big, backend=backend)
    assert report.kernels and not report.fallbacks, str(report)
    assert not any(g.choices for g in report.graphs), str(report)
    _check_faults(report, hook)
    torch.testing.assert_close(torch.compile(fused, backend=backend)(big), fused(big))
    strict = sdk.backend("faulty", tune_budget_s=5.0, fallback=False)
    assert isinstance(_strict_error(fused, strict, hook, big), sdk.PluginHookError)
    _healthy(fused)


def wrapper_fault(install, hook: str) -> None:
    """A wrapper whose hook raises leaves the graph unwrapped, with the fault in its report."""
    install(faulty_source(hook, kind="WRAPPER"))
    backend = sdk.backend("cpu_cpp", wrappers=("faulty",))
    with pytest.warns(sdk.PluginHookWarning, match=f"'faulty'.*{hook}.*SDK_PLUGINS_DENY"):
        report = sdk.explain(fused, _x(), backend=backend)
    assert report.kernels and not report.fallbacks, str(report)
    assert [g.wrappers for g in report.graphs] == [()], str(report)
    _check_faults(report, hook)
    x = _x()
    torch.testing.assert_close(torch.compile(fused, backend=backend)(x), fused(x))
    _strict_error(fused, sdk.backend("cpu_cpp", wrappers=("faulty",), fallback=False), hook)
    _healthy(fused)


def observer_fault(install, hook: str) -> None:
    """cpu_cpp's compile is untouched; the fault is in the report, warned once, listed."""
    fn = with_fallback if hook == "sdk_on_fallback" else fused
    install(None)
    baseline = sdk.explain(fn, _x(), backend="sdk:cpu_cpp")
    assert baseline.kernels, str(baseline)
    if hook == "sdk_on_fallback":
        assert baseline.fallbacks, f"pick an op cpu_cpp falls back on:\n{baseline}"
    install(faulty_source(hook))
    with pytest.warns(sdk.PluginHookWarning, match=f"'faulty'.*{hook}.*SDK_PLUGINS_DENY"):
        report = sdk.explain(fn, _x(), backend="sdk:cpu_cpp")
    _check_faults(report, hook)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _healthy(fn, baseline)  # compiles again: the warning is not repeated
    assert not [w for w in seen if issubclass(w.category, sdk.PluginHookWarning)]
    status = _status("faulty")
    assert status.startswith("faulty: ") and hook in status and FAULT in status, status
    # debug: an op still falls back (fallback=False would refuse it before any observer)
    strict = sdk.backend(
        "cpu_cpp", **({"debug": True} if hook == "sdk_on_fallback" else {"fallback": False})
    )
    error = _strict_error(fn, strict, hook)
    assert isinstance(error, sdk.PluginHookError), error


def graph_fault(install, hook: str, monkeypatch, tmp_path) -> None:
    """A graph-level plugin's hook raises; cpu_cpp is the next plugin of the chain.

    * sdk_claim_nodes: it claims nothing, every op goes to cpu_cpp, a hook fault is reported;
    * sdk_compile_subgraph: each of its partitions goes to cpu_cpp, the note names the fault;
    * sdk_load_subgraph: a cached artifact is a miss, compiled afresh and stored again.
    Results equal eager; strict mode raises naming plugin and hook (a load failure is a
    miss by contract, not an error)."""
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    install(faulty_source(hook, kind="GRAPH"))
    backend = sdk.backend("faulty", chain=["cpu_cpp"])
    if hook == "sdk_load_subgraph":
        sdk.explain(fused, _x(), backend=backend)  # stores the artifacts
        torch._dynamo.reset()  # (else explain reports that compile): the next one loads them
    if hook == "sdk_claim_nodes":
        with pytest.warns(sdk.PluginHookWarning, match=f"'faulty'.*{hook}.*SDK_PLUGINS_DENY"):
            report = sdk.explain(fused, _x(), backend=backend)
    elif hook == "sdk_compile_subgraph":  # its partitions fall back: one warning says so
        with pytest.warns(
            sdk.PluginFallbackWarning, match=f"'faulty'.*sdk:cpu_cpp instead.*{hook}"
        ):
            report = sdk.explain(fused, _x(), backend=backend)
    else:
        report = sdk.explain(fused, _x(), backend=backend)
    x = _x()
    torch.testing.assert_close(torch.compile(fused, backend=backend)(x), fused(x))
    parts = [p for g in report.graphs for p in g.partitions]
    assert parts, str(report)
    if hook == "sdk_claim_nodes":
        _check_faults(report, hook)
        assert {p.compiled_by for p in parts} == {"cpu_cpp"}, str(report)
        refused = [r for g in report.graphs for pl in g.placements for r in pl.refusals]
        assert refused and all(f"its {hook} raised InjectedFault" in r for _, r in refused)
    elif hook == "sdk_compile_subgraph":
        assert all(p.plugin == "faulty" and p.compiled_by == "cpu_cpp" for p in parts), str(report)
        assert all(FAULT in p.note and hook in p.note for p in parts), str(report)
    else:
        assert all(p.compiled_by == "faulty" for p in parts), str(report)
        assert all(f"{hook} raised" in p.cache and FAULT in p.cache for p in parts), str(report)
    if hook != "sdk_load_subgraph":
        _strict_error(fused, sdk.backend("faulty", chain=["cpu_cpp"], fallback=False), hook)
    _healthy(fused)


def _check_faults(report: sdk.ExplainReport, hook: str) -> None:
    assert report.hook_faults, str(report)
    for f in report.hook_faults:
        assert (f.plugin, f.hook) == ("faulty", hook) and "InjectedFault" in f.error, f
        assert FAULT in f.error
    assert f"hook fault: sdk:faulty {hook} raised InjectedFault" in str(report), str(report)


IDENTITY = ("sdk_plugin_info", "sdk_plugin_status", "sdk_preferences")
COMPILE = (
    "sdk_decompositions",
    "sdk_keep_ops",
    "sdk_op_support",
    "sdk_lower_op",
    "sdk_can_fuse",
    "sdk_kernel_limits",
    "sdk_render_kernel",
    "sdk_compile_kernels",
    "sdk_graph_passes",
)
OBSERVERS = ("sdk_on_graph_compiled", "sdk_on_kernel_compiled", "sdk_on_fallback")
GRAPH_HOOKS = ("sdk_claim_nodes", "sdk_compile_subgraph", "sdk_load_subgraph")
#: hook -> the check of its contract
CASES: dict[str, Callable[..., None]] = {
    **dict.fromkeys(IDENTITY, identity_fault),
    **dict.fromkeys(COMPILE, compile_fault),
    "sdk_cache_key": cache_key_fault,
    "sdk_extern": extern_fault,
    "sdk_kernel_choices": kernel_choices_fault,
    "sdk_wrap_compiled": wrapper_fault,
    **dict.fromkeys(GRAPH_HOOKS, graph_fault),
    **dict.fromkeys(OBSERVERS, observer_fault),
}


@pytest.mark.parametrize("hook", HOOKS)
def test_fault_in_hook(hook, install, monkeypatch, tmp_path, seeded):
    assert hook in CASES, (
        f"{hook} is in sdk/hookspecs.py but has no fault case: add its "
        "contract to CASES in tests/reliability/test_plugin_faults.py"
    )
    check = CASES[hook]
    extra = {"monkeypatch": monkeypatch, "tmp_path": tmp_path}
    wanted = inspect.signature(check).parameters
    check(install, hook, **{k: v for k, v in extra.items() if k in wanted})


def _fallback_warnings(fn: Callable[[], object]) -> list[str]:
    """The PluginFallbackWarnings ``fn()`` gives (every one, repeats included)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in seen if issubclass(w.category, sdk.PluginFallbackWarning)]


def _train_step(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list]:
    model.zero_grad()
    out = model(x)
    out.sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("chain", [(), ("cpu_cpp",)])
def test_a_kernel_level_plugin_that_fails_whole_graphs_warns_once(install, chain, seeded):
    """A kernel-level plugin whose codegen raises for every graph of a training step (forward
    and backward, the same reason): one PluginFallbackWarning naming the plugin, the graph,
    where it runs instead, the reason and the fix; a second compile warns no more; outputs
    and gradients equal eager's. With ``chain``, the next plugin compiles the graphs and the
    warning says so."""
    install(faulty_source("sdk_compile_kernels"))
    model = torch.nn.Sequential(torch.nn.Linear(33, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    backend = sdk.backend("faulty", chain=chain)
    compiled = torch.compile(model, backend=backend)
    x = _x()
    got: list = []
    told = _fallback_warnings(lambda: got.append(_train_step(compiled, x)))
    assert len(told) == 1, told
    (message,) = told
    went_to = "sdk:cpu_cpp" if chain else "ATen"
    for part in (
        "SDK plugin 'faulty'",
        "could not compile graph ",
        f"runs in {went_to} instead",
        f"InjectedFault: {FAULT} sdk:faulty sdk_compile_kernels",
        "fallback=False and debug=True",
        "sdk.explain",
    ):
        assert part in message, (part, message)
    out, grads = got[0]
    ref_out, ref_grads = _train_step(ref, x)
    torch.testing.assert_close(out, ref_out)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r)
    torch._dynamo.reset()  # the same fault again: already said
    assert _fallback_warnings(lambda: _train_step(torch.compile(model, backend=backend), x)) == []
    report = sdk.explain(fused, _x(), backend=backend)
    assert [g.plugin for g in report.graphs] == [chain[0] if chain else "faulty"], str(report)
    assert all(FAULT in f for g in report.graphs for f in g.chain_failures), str(report)


# -- outside the hooks: import and run time -------------------------------------------


def test_fault_at_import(install, seeded):
    reg = install(f"raise RuntimeError('{FAULT} the import of sdk:faulty')\n")
    assert "import failed" in reg.status("faulty") and FAULT in reg.status("faulty")
    assert _status("faulty").startswith("unavailable: import failed")
    with pytest.raises(sdk.PluginUnavailableError, match=r"'faulty'.*import failed"):
        sdk.backend("faulty")
    _healthy(fused)


def _raising_kernels(which: str, kernels: str) -> str:
    """The faulty plugin's ``sdk_compile_kernels``: cpu_cpp's kernels (``built``), with
    ``kernels`` (an expression of ``built`` and ``run``) the ones it returns, where ``run``
    raises a fault that names ``which``."""
    return f"""
@sdk.hookimpl
def sdk_compile_kernels(ctx, sources):
    built = cpu_cpp.sdk_compile_kernels(ctx=ctx, sources=sources)

    def run(*buffers):
        raise InjectedFault("fault injected into {which} of sdk:faulty, run")

    return {kernels}
"""


#: The faulty plugin's kernels build, and raise when run.
RUN_TIME = _raising_kernels("a kernel", "[run for _ in built]")


def test_fault_at_run_time(install, seeded):
    """The graph gives way to ATen on its first call and says so; fallback=False raises the
    kernel's error."""
    install(
        faulty_source(None).replace("sdk_compile_kernels = cpu_cpp.sdk_compile_kernels\n", "")
        + RUN_TIME
    )
    x = _x()
    torch.testing.assert_close(torch.compile(fused, backend=sdk.backend("faulty"))(x), fused(x))
    report = sdk.explain(fused, _x(), backend=sdk.backend("faulty"))
    assert report.fallbacks and all(
        "raised when run" in f.reason and FAULT in f.reason for f in report.fallbacks
    ), str(report)
    with pytest.raises(RuntimeError, match=f"{FAULT} a kernel of sdk:faulty"):
        torch.compile(fused, backend=sdk.backend("faulty", fallback=False))(_x())
    _healthy(fused)


#: The faulty plugin's kernels run, except the program's last, which raises.
LAST_KERNEL_FAILS = _raising_kernels("the last kernel", "built[:-1] + [run]")


@pytest.mark.parametrize("runner", ["native", "python"])
def test_fault_after_the_program_wrote_its_inputs(install, seeded, runner):
    """A program that fails after a kernel wrote BatchNorm's running statistics is not run
    again through ATen (that would update them twice): the call raises and names the inputs
    it changed, the statistics are updated once, and later calls run through ATen."""
    install(
        faulty_source(None).replace("sdk_compile_kernels = cpu_cpp.sdk_compile_kernels\n", "")
        + LAST_KERNEL_FAILS
    )
    torch.manual_seed(0)
    # (a library call between: the kernel after it, the last, cannot fuse with the one that
    # writes the statistics, which now also normalizes)
    model = torch.nn.Sequential(
        torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 4), torch.nn.Tanh()
    )
    ref = copy.deepcopy(model)
    step = torch.compile(model, backend=sdk.backend("faulty", runner=runner))
    xs = [torch.randn(5, 6) for _ in range(2)]
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=f"{FAULT} the last kernel") as info:
            step(xs[0])
        [note] = [n for n in info.value.__notes__ if "not run again through ATen" in n]
        # the batch count and the running mean and variance (6 floats each), named
        assert re.search(
            r"written graph inputs #\d+ \(\w+ \(\) int64\)(, #\d+ \(\w+ \(6,\) float32\)){2} in place",
            note,
        ), note
        ref(xs[0])
        torch.testing.assert_close(model[0].running_mean, ref[0].running_mean)
        torch.testing.assert_close(model[0].running_var, ref[0].running_var)
        torch.testing.assert_close(step(xs[1]), ref(xs[1]))
    for a, b in zip(model.buffers(), ref.buffers()):
        torch.testing.assert_close(a, b)
    _healthy(fused)


def test_observer_fault_during_run_time_fallback_leaves_the_call_alone(
    make_plugin, fake_dist, use_registry, seeded
):
    """sdk_on_fallback is also called when a graph gives way to ATen during the user's
    call: a raising observer there must not make that call raise."""
    running = make_plugin(
        faulty_source(None).replace("sdk_compile_kernels = cpu_cpp.sdk_compile_kernels\n", "")
        + RUN_TIME,
        name="faulty",
        head=False,
    )
    observer = make_plugin(
        """
        @sdk.hookimpl
        def sdk_on_fallback(ctx, op, reason):
            raise RuntimeError("fault injected into sdk:observer sdk_on_fallback")
    """,
        name="observer",
    )
    use_registry(fake_dist("acme-faulty", {"faulty": running, "observer": observer}))
    x = _x()
    with pytest.warns(sdk.PluginHookWarning, match="'observer'.*sdk_on_fallback"):
        out = torch.compile(fused, backend=sdk.backend("faulty"))(x)
    torch.testing.assert_close(out, fused(x))


def test_observers_of_unavailable_plugins_are_not_called(
    make_plugin, fake_dist, use_registry, seeded
):
    """A plugin whose status says it cannot run here is not called at all, observers
    included."""
    module = make_plugin(
        """
        SEEN = []

        @sdk.hookimpl
        def sdk_plugin_status():
            return "needs the acme driver; install it"

        @sdk.hookimpl
        def sdk_on_graph_compiled(ctx, report):
            SEEN.append(report.name)

        @sdk.hookimpl
        def sdk_on_kernel_compiled(ctx, source):
            SEEN.append(source.name)
    """,
        name="absent",
    )
    reg = use_registry(fake_dist("acme-absent", {"absent": module}))
    assert reg.status("absent") == "needs the acme driver; install it"
    _healthy(fused)
    assert sys.modules[module].SEEN == []


def test_one_faulty_observer_leaves_the_others_called(make_plugin, fake_dist, use_registry, seeded):
    """pluggy stops a 1:N call at the first raising hookimpl; each plugin is called alone."""
    watcher = make_plugin(
        """
        SEEN = []

        @sdk.hookimpl
        def sdk_on_graph_compiled(ctx, report):
            SEEN.append(report.kind)
    """,
        name="watcher",
    )
    # registered after the watcher, so pluggy (last in, first called) calls it first
    broken = make_plugin(faulty_source("sdk_on_graph_compiled"), name="faulty", head=False)
    use_registry(
        fake_dist("acme-watcher", {"watcher": watcher}),
        fake_dist("acme-faulty", {"faulty": broken}),
    )
    with pytest.warns(sdk.PluginHookWarning):
        _healthy(fused)
    assert sys.modules[watcher].SEEN == ["inference"]  # (explain reports that compile)


# -- exceptions that cannot print themselves, and those that must not be caught -------------

#: A vendor's exception whose ``__str__`` and ``__repr__`` raise.
UNPRINTABLE = '''

class Unprintable(RuntimeError):
    """A vendor's error whose message cannot be made."""

    def __str__(self):
        raise ValueError("the __str__ of a vendor's exception raised")

    __repr__ = __str__
'''


def _unprintable_source(hook: str, kind: str = "CODEGEN", raised: str = "Unprintable") -> str:
    """The faulty plugin with ``hook`` raising ``raised`` (see :data:`UNPRINTABLE`)."""
    return faulty_source(hook, kind).replace("raise InjectedFault(", f"raise {raised}(") + (
        UNPRINTABLE
    )


#: hook -> (the backend's plugin, its options, the plugin's kind)
UNPRINTABLE_CASES = {
    "sdk_render_kernel": ("faulty", {}, "CODEGEN"),
    "sdk_op_support": ("faulty", {}, "CODEGEN"),
    "sdk_on_graph_compiled": ("cpu_cpp", {}, "CODEGEN"),
    "sdk_wrap_compiled": ("cpu_cpp", {"wrappers": ("faulty",)}, "WRAPPER"),
    "sdk_compile_subgraph": ("faulty", {"chain": ["cpu_cpp"]}, "GRAPH"),
    "sdk_plugin_status": ("cpu_cpp", {}, "CODEGEN"),
}


@pytest.mark.parametrize("hook", sorted(UNPRINTABLE_CASES))
def test_hook_raising_an_unprintable_exception_is_that_plugins_fault(hook, install, seeded):
    """An exception whose ``__str__`` raises is recorded as the plugin's fault like any other
    (a fallback, a chain note, a hook fault, an unavailable plugin): the compile goes on and
    equals eager, and what the SDK says names the plugin and the exception's type."""
    plugin, options, kind = UNPRINTABLE_CASES[hook]
    reg = install(_unprintable_source(hook, kind))
    backend = sdk.backend(plugin, **options)
    x = _x()
    with warnings.catch_warnings():  # a wrapper's or observer's fault warns, once
        warnings.simplefilter("ignore", sdk.PluginHookWarning)
        warnings.simplefilter("ignore", sdk.PluginFallbackWarning)  # (a partition's: once)
        torch.testing.assert_close(torch.compile(fused, backend=backend)(x), fused(x))
        report = sdk.explain(fused, _x(), backend=backend)
    if hook == "sdk_plugin_status":
        assert reg.status("faulty").startswith("sdk_plugin_status raised: Unprintable: <unprint")
        return
    text = str(report)
    assert "faulty" in text and f"{hook} raised Unprintable" in text, text
    if kind == "CODEGEN" and plugin == "faulty":
        assert not report.kernels and report.fallbacks, text
    error = _strict_error_of(fused, sdk.backend(plugin, fallback=False, **options))
    assert "faulty" in str(error) and "Unprintable" in str(error), error


def _strict_error_of(fn, backend) -> BaseException:
    with pytest.raises(Exception) as info:
        torch.compile(fn, backend=backend)(_x())
    named = [e for e in _chain(info.value) if isinstance(e, sdk.SDKError)]
    assert named, f"no SDK error: {_chain(info.value)}"
    return named[0]


def test_kernel_raising_an_unprintable_exception_gives_way_to_aten(install, seeded):
    install(
        faulty_source(None).replace("sdk_compile_kernels = cpu_cpp.sdk_compile_kernels\n", "")
        + RUN_TIME.replace("raise InjectedFault(", "raise Unprintable(")
        + UNPRINTABLE
    )
    x = _x()
    torch.testing.assert_close(torch.compile(fused, backend=sdk.backend("faulty"))(x), fused(x))
    report = sdk.explain(fused, _x(), backend=sdk.backend("faulty"))
    assert report.fallbacks and all(
        "raised when run: Unprintable: <unprintable Unprintable>" in f.reason
        for f in report.fallbacks
    ), str(report)


@pytest.mark.parametrize(
    "hook", ["sdk_render_kernel", "sdk_op_support", "sdk_on_graph_compiled", "sdk_wrap_compiled"]
)
def test_hook_raising_keyboard_interrupt_is_not_swallowed(hook, install, seeded):
    """A hook's KeyboardInterrupt (or any BaseException that is not an Exception) is the
    user's, not a plugin fault: it stops the compile."""
    kind = "WRAPPER" if hook == "sdk_wrap_compiled" else "CODEGEN"
    install(_unprintable_source(hook, kind, raised="KeyboardInterrupt"))
    plugin = "faulty" if hook in ("sdk_render_kernel", "sdk_op_support") else "cpu_cpp"
    options = {"wrappers": ("faulty",)} if kind == "WRAPPER" else {}
    with pytest.raises(KeyboardInterrupt):
        torch.compile(fused, backend=sdk.backend(plugin, **options))(_x())


def test_a_one_line_reason_keeps_the_cause_of_an_advice_first_message():
    """A plugin's exception raised from its cause, whose message opens with advice (as
    torch.onnx's ConversionError does): the one-line reason (fallback warnings, explain,
    conformance failures) gives both whole on one line, one cause deep."""
    from sdk.errors import describe

    def raised() -> BaseException:
        try:
            try:
                try:
                    raise KeyError("deepest")
                except KeyError as e:
                    raise ValueError("No ONNX function found for prims.prod.default") from e
            except ValueError as e:
                raise RuntimeError("Failed to convert.\nPlease report a bug.") from e
        except RuntimeError as e:
            return e
        raise AssertionError("unreachable")

    got = describe(raised(), one_line=True)
    assert got == (
        "RuntimeError: Failed to convert. Please report a bug. "
        "(from ValueError: No ONNX function found for prims.prod.default)"
    ), got
    assert describe(raised()).startswith("RuntimeError: Failed to convert.\nPlease report")
    assert describe(ValueError("plain"), one_line=True) == "ValueError: plain"
    try:  # a wrapper that quotes its cause (the SDK's HookFailed does): the cause once
        raise RuntimeError("hook raised ValueError: bad") from ValueError("bad")
    except RuntimeError as e:
        assert describe(e, one_line=True) == "RuntimeError: hook raised ValueError: bad"


def test_a_one_line_reason_keeps_every_line_of_the_vendor_message():
    """A vendor runtime's first line says only where it failed; the why follows. The one-line
    reason keeps every line, whitespace collapsed, and is capped (with an ellipsis)."""
    from sdk.errors import ONE_LINE_LIMIT, describe

    vendor = RuntimeError(
        "Check 'false' failed at src/frontend/op_table.cpp:151:\n"
        "    FrontEnd API failed with OpConversionFailure:\n\tno conversion rule for aten::foo\n"
    )
    assert describe(vendor, one_line=True) == (
        "RuntimeError: Check 'false' failed at src/frontend/op_table.cpp:151: FrontEnd API "
        "failed with OpConversionFailure: no conversion rule for aten::foo"
    )
    long = describe(ValueError("x" * 5000 + "\ny"), one_line=True)
    assert len(long) <= len("ValueError: ") + ONE_LINE_LIMIT and long.endswith("..."), long
    assert "\n" not in long


def test_explain_gives_the_whole_vendor_message_of_a_failed_partition(install):
    """A graph-level plugin's compile raises a message of several lines: the partition's
    reason in sdk.explain and the fallback warning quote all of them, on one line."""
    install(
        faulty_source(None, kind="GRAPH")
        + "\n\n@sdk.hookimpl\ndef sdk_compile_subgraph(ctx, gm, example_inputs):\n"
        "    raise RuntimeError(\"Check 'false' failed at src/plugin.cpp:151:\\n"
        '  unsupported layout for aten::relu\\n")\n'
    )
    with pytest.warns(sdk.PluginFallbackWarning, match="unsupported layout for aten::relu"):
        report = sdk.explain(fused, _x(), backend=sdk.backend("faulty"))
    parts = [p for g in report.graphs for p in g.partitions]
    assert parts and all(p.compiled_by == "aten" for p in parts), str(report)
    for p in parts:
        assert "src/plugin.cpp:151: unsupported layout for aten::relu" in p.note, p.note
