"""``torch.compile(backend="sdk:cpu_cpp")`` end to end: results, graph breaks, recompiles,
guards, options, and what ``sdk.explain`` reports.

What each op lowers to, and what fuses, is tested op by op in test_ops.py;
here whole functions and modules are checked against eager, and what
``sdk.explain`` and the hooks report about them.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import sdk
import sdk.ir
from sdk.core.guards import TensorSpec
from tests import models

ROOT = Path(__file__).resolve().parents[2]
BACKEND = "sdk:cpu_cpp"


def close(actual, expected, **kw):
    """assert_close with the fp32 tolerances of tests/opcheck.py (fused math may round
    differently from eager's op-by-op math)."""
    torch.testing.assert_close(actual, expected, **{"rtol": 1.3e-5, "atol": 1e-5, **kw})


def pointwise(x, y):
    return (torch.sin(x) * y + torch.cos(y)).relu() - x / (1 + y * y)


def reduce_rows(x):
    return torch.softmax(x, dim=-1).sum(-1) + x.mean()


# ---------------------------------------------------------------------------
# results: functions and modules, inference and training
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fn, shapes", [(pointwise, [(6, 9), (6, 9)]), (reduce_rows, [(5, 33)])])
def test_function_inference_matches_eager(seeded, fn, shapes):
    compiled = torch.compile(fn, backend=BACKEND)
    for _ in range(3):  # fresh inputs each call: the compiled graph must not bake values in
        args = [torch.randn(s) for s in shapes]
        close(compiled(*args), fn(*args))


def test_module_inference_matches_eager(seeded):
    model = models.mlp(16, 32, 4, layernorm=True).eval()
    compiled = torch.compile(model, backend=BACKEND)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(8, 16)
            close(compiled(x), model(x))


def test_function_training_gradients_match_eager(seeded):
    compiled = torch.compile(pointwise, backend=BACKEND)
    for _ in range(3):
        x = torch.randn(7, 5, requires_grad=True)
        y = torch.randn(7, 5, requires_grad=True)
        grad_out = torch.randn(7, 5)
        x_ref = x.detach().clone().requires_grad_()
        y_ref = y.detach().clone().requires_grad_()
        out = compiled(x, y)
        ref = pointwise(x_ref, y_ref)
        close(out, ref)
        out.backward(grad_out)
        ref.backward(grad_out)
        close(x.grad, x_ref.grad)
        close(y.grad, y_ref.grad)


def test_module_training_matches_eager(seeded):
    model = models.mlp(16, 32, 4, layernorm=True)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend=BACKEND)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        x, target = torch.randn(8, 16), torch.randn(8, 4)
        loss = nn.functional.mse_loss(compiled(x), target)
        loss_ref = nn.functional.mse_loss(reference(x), target)
        close(loss, loss_ref)
        loss.backward()
        loss_ref.backward()
        for (name, p), p_ref in zip(model.named_parameters(), reference.parameters(), strict=True):
            close(p.grad, p_ref.grad, msg=lambda m, name=name: f"grad of {name}: {m}")
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()


# ---------------------------------------------------------------------------
# graph breaks and recompiles
# ---------------------------------------------------------------------------


def with_print(x):
    y = torch.cos(x) + 1
    print("between the graphs")
    return torch.sin(y) * 2


def data_dependent_branch(x):
    y = x * 2
    if y.sum().item() > 0:  # a Python branch on a tensor value: Dynamo must break here
        return torch.sin(y)
    return torch.cos(y) - 1


def test_graph_break_on_print(seeded, capsys):
    x = torch.randn(10)
    report = sdk.explain(with_print, x)
    assert report.graph_breaks >= 1
    assert len(report.graphs) == 2
    assert {g.kind for g in report.graphs} == {"inference"}
    torch.compiler.reset()
    close(torch.compile(with_print, backend=BACKEND)(x), with_print(x))
    assert "between the graphs" in capsys.readouterr().out


def test_graph_break_on_item_branch():
    pos, neg = torch.rand(12) + 0.1, -torch.rand(12) - 0.1
    report = sdk.explain(data_dependent_branch, pos)
    assert report.graph_breaks >= 1
    assert len(report.graphs) >= 2
    compiled = torch.compile(data_dependent_branch, backend=BACKEND)
    for x in (pos, neg, pos * 3, neg * 3):
        close(compiled(x), data_dependent_branch(x))


def test_recompiles_on_new_shape_and_dtype(graph_reports):
    def fn(x):
        return torch.tanh(x) * x + 1

    compiled = torch.compile(fn, backend=BACKEND)
    seen = []
    for shape, dtype in [
        ((8,), torch.float32),
        ((8,), torch.float32),
        ((16,), torch.float32),
        ((16,), torch.float64),
        ((16,), torch.float64),
    ]:
        x = torch.randn(shape, dtype=dtype)
        out = compiled(x)
        assert out.dtype == dtype
        close(out, fn(x))
        seen.append(len(graph_reports))
    # a new graph for the new shape and for the new dtype; none for a repeated call
    assert seen == [1, 1, 2, 3, 3]
    assert all(g.kind == "inference" and g.plugin == "cpu_cpp" for g in graph_reports)


# ---------------------------------------------------------------------------
# guards: layouts Dynamo does not guard are re-specialized by the program
# ---------------------------------------------------------------------------


def scale_shift(x):
    return torch.exp(x) * 0.5 + x


def test_storage_offset_compiles_a_second_variant(specializations, graph_reports):
    compiled = torch.compile(scale_shift, backend=BACKEND)
    x = torch.randn(4, 6)
    close(compiled(x), scale_shift(x))
    base = torch.randn(4 * 6 + 1)
    sliced = base[1:].view(4, 6)  # same sizes and strides, storage offset 1, misaligned
    assert sliced.stride() == x.stride() and sliced.storage_offset() == 1
    close(compiled(sliced), scale_shift(sliced))
    close(compiled(x), scale_shift(x))  # and back: the first variant is reused

    assert len(graph_reports) == 1, "Dynamo does not guard storage offsets; no new graph"
    [program] = specializations
    variants = [s[0] for s in program.variants]
    assert len(variants) == 2
    assert {(v.offset, v.aligned) for v in variants} == {(0, True), (1, False)}


def sliced_products(x, w):
    z = torch.relu(x.t() @ w)
    return torch.mm(x[2:, 1:].t(), w[2:, 5:]), z[3:10, :7].t() @ z[4:11, 1:]


def test_library_calls_read_offset_views_of_inputs_and_buffers():
    """The wrapper passes library calls views at offsets: of an input (relative to the
    input's own storage offset, which differs between calls) and of a buffer a kernel wrote."""
    compiled = torch.compile(sliced_products, backend=BACKEND)
    for offset in (0, 3, 0):
        base = torch.randn(64 * 32 + offset)
        x = base[offset:].view(64, 32).requires_grad_()
        w = torch.randn(64, 48, requires_grad=True)
        got, want = compiled(x, w), sliced_products(x, w)
        for g, e in zip(got, want):
            close(g, e)
        gx, gw = torch.autograd.grad(sum(t.sum() for t in got), (x, w))
        ex, ew = torch.autograd.grad(sum(t.sum() for t in want), (x, w))
        close(gx, ex)
        close(gw, ew)


def _tensor_specs(specializations) -> list[TensorSpec]:
    return [
        s
        for program in specializations
        for key in program.variants
        for s in key
        if isinstance(s, TensorSpec)
    ]


def test_transposed_input_gets_its_own_specialization(specializations):
    compiled = torch.compile(scale_shift, backend=BACKEND)
    x = torch.randn(6, 6)
    close(compiled(x), scale_shift(x))
    xt = torch.randn(6, 6).t()  # same shape, strides (1, 6)
    assert xt.shape == x.shape and not xt.is_contiguous()
    close(compiled(xt), scale_shift(xt))
    close(compiled(x), scale_shift(x))
    # Dynamo guards strides and recompiles (with a symbolic stride the second time: one
    # program for every column stride), or the program re-specializes: either way a
    # variant built for the transposed layout ran it
    strides = {
        tuple(st if sdk.ir.is_static(st) else "sym" for st in s.strides)
        for s in _tensor_specs(specializations)
    }
    assert (6, 1) in strides and ((1, 6) in strides or (1, "sym") in strides)


def test_sliced_transposed_input_gets_its_own_specialization(specializations):
    compiled = torch.compile(scale_shift, backend=BACKEND)
    x = torch.randn(6, 6)
    close(compiled(x), scale_shift(x))
    yt = torch.randn(6, 7)[:, 1:].t()  # same shape; strides (1, 7), storage offset 1
    assert yt.shape == x.shape and yt.stride() == (1, 7) and yt.storage_offset() == 1
    close(compiled(yt), scale_shift(yt))
    close(compiled(x), scale_shift(x))
    assert (1, 7, 1) in {(*s.strides, s.offset) for s in _tensor_specs(specializations)}


# ---------------------------------------------------------------------------
# options and modes
# ---------------------------------------------------------------------------


def test_unknown_option_lists_known_ones():
    with pytest.raises(sdk.OptionError) as info:
        sdk.backend("cpu_cpp", fusoin=False)
    message = str(info.value)
    assert "'fusoin'" in message
    for known in ("fusion", "fallback", "wrappers", "chain", "debug"):
        assert known in message


def test_unknown_option_through_torch_compile():
    compiled = torch.compile(torch.sin, backend=BACKEND, options={"fusoin": False})
    with pytest.raises(Exception, match=r"unknown option 'fusoin'.*known options"):
        compiled(torch.randn(3))


def test_option_of_wrong_type():
    with pytest.raises(sdk.OptionError, match=r"option 'fusion' .* must be bool, got str"):
        sdk.backend("cpu_cpp", fusion="no")


#: bad option values that must fail when the backend is made: option, value, what the
#: message says
BAD_OPTION_VALUES = [
    ("wrappers", ["no_such_wrapper"], r"'no_such_wrapper', which is not an installed plugin"),
    ("wrappers", ["cpu_cpp"], r"'cpu_cpp', a codegen plugin, not a wrapper plugin"),
    ("wrappers", [3], r"holds int 3"),
    ("min_partition_size", True, r"'min_partition_size' .* must be int, got bool True"),
]


@pytest.mark.parametrize(("option", "value", "message"), BAD_OPTION_VALUES)
def test_bad_option_value_fails_when_the_backend_is_made(option, value, message):
    """Not at the first call, or never: the option, the value and what is allowed."""
    with pytest.raises(sdk.OptionError, match=message) as info:
        sdk.backend("cpu_cpp", **{option: value})
    assert repr(option) in str(info.value)
    if option == "wrappers":
        assert "wrapper plugins installed: cudagraphs" in str(info.value)


@pytest.mark.parametrize(("option", "value", "message"), BAD_OPTION_VALUES)
def test_bad_option_value_through_torch_compile_fails_at_the_first_call(
    option, value, message, graph_reports
):
    """torch.compile hands options= to the backend only at the first call: it raises there,
    before anything is compiled."""
    compiled = torch.compile(torch.sin, backend=BACKEND, options={option: value})
    with pytest.raises(sdk.OptionError, match=message):
        compiled(torch.randn(3))
    assert graph_reports == []


def test_unknown_mode_lists_modes():
    compiled = torch.compile(torch.sin, backend=BACKEND, mode="ludicrous")
    with pytest.raises(Exception, match="unknown mode 'ludicrous'") as info:
        compiled(torch.randn(3))
    for mode in ("default", "reduce-overhead", "max-autotune"):
        assert mode in str(info.value)


def test_backend_with_options_compiles(graph_reports):
    backend = sdk.backend("sdk:cpu_cpp", fusion=False)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    close(torch.compile(pointwise, backend=backend)(x, y), pointwise(x, y))
    assert len(graph_reports) == 1


def test_reduce_overhead_on_cpu_skips_the_cuda_wrapper(graph_reports):
    compiled = torch.compile(pointwise, backend=BACKEND, mode="reduce-overhead")
    for _ in range(2):
        x, y = torch.randn(5), torch.randn(5)
        close(compiled(x, y), pointwise(x, y))
    assert [g.wrappers for g in graph_reports] == [()]


#: A CPU wrapper plugin that declares graph capture, as cudagraphs does for CUDA; the wrapped
#: program counts its calls in ``CALLS``.
CAPTURING_WRAPPER = """
import sdk

CALLS = []

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(name={name!r}, version="0.0.1", hook_api=1, device_types=("cpu",),
                          kind=sdk.PluginKind.WRAPPER,
                          capabilities=frozenset({{sdk.Capability.{capability}}}))

@sdk.hookimpl(wrapper=True)
def sdk_wrap_compiled(compiled):
    inner = yield

    def replay(*args):
        CALLS.append(1)
        return inner(*args)
    return replay
"""


def test_reduce_overhead_applies_the_wrappers_that_declare_graph_capture(
    use_registry, make_plugin, fake_dist, graph_reports
):
    """The mode asks for a capability, not for the cudagraphs plugin by name: any wrapper
    plugin that declares ``Capability.GRAPH_CAPTURE`` for the graph's device is applied."""
    import importlib

    capture = make_plugin(
        CAPTURING_WRAPPER.format(name="replay_cpu", capability="GRAPH_CAPTURE"),
        head=False,
        name="replay_cpu",
    )
    other = make_plugin(
        CAPTURING_WRAPPER.format(name="other_cpu", capability="SYMBOLIC_SIZES"),
        head=False,
        name="other_cpu",
    )
    use_registry(fake_dist("acme-wrap", {"replay_cpu": capture, "other_cpu": other}))
    compiled = torch.compile(pointwise, backend=BACKEND, mode="reduce-overhead")
    x, y = torch.randn(5), torch.randn(5)
    close(compiled(x, y), pointwise(x, y))
    assert [g.wrappers for g in graph_reports] == [("replay_cpu",)]
    assert importlib.import_module(capture).CALLS == [1]
    assert importlib.import_module(other).CALLS == []


def test_explicit_cuda_wrapper_on_cpu_is_an_error():
    compiled = torch.compile(pointwise, backend=BACKEND, options={"wrappers": ["cudagraphs"]})
    with pytest.raises(Exception, match="wrapper 'cudagraphs' cannot wrap a cpu graph") as info:
        compiled(torch.randn(5), torch.randn(5))
    assert "drop it from options['wrappers']" in str(info.value)


# ---------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------


def test_explain_training_step_has_forward_and_backward(seeded):
    model = models.mlp(16, 32, 4, layernorm=True)
    report = sdk.explain(model, torch.randn(8, 16))
    assert sorted(g.kind for g in report.graphs) == ["backward", "forward"]
    assert report.graph_breaks == 0
    assert all(g.plugin == "cpu_cpp" and g.aten_ops > 0 for g in report.graphs)
    # explain runs the backward through autograd.grad: no .grad is touched
    assert all(p.grad is None for p in model.parameters())
    text = str(report)
    assert "[forward]" in text and "[backward]" in text


def test_explain_inference_has_one_inference_graph(seeded):
    model = models.mlp(16, 32, 4, layernorm=True)
    with torch.no_grad():
        report = sdk.explain(model, torch.randn(8, 16))
    assert [g.kind for g in report.graphs] == ["inference"]


def test_explain_report_shape(seeded):
    report = sdk.explain(pointwise, torch.randn(4), torch.randn(4))
    [graph] = report.graphs
    assert graph.name and graph.kind == "inference" and graph.plugin == "cpu_cpp"
    assert graph.aten_ops > 0 and 0.0 <= graph.generated_fraction <= 1.0
    assert all(f.op and f.reason for f in graph.fallbacks)
    assert str(graph) in str(report)


# ---------------------------------------------------------------------------
# hooks reach only the compile's plugin; a vendor plugin in process
# ---------------------------------------------------------------------------

SPY = """
CALLS = []

@sdk.hookimpl
def sdk_op_support(ctx, op, node):  # renders no kernels: every op runs through ATen
    return sdk.Support.no("this test plugin renders no kernels")

@sdk.hookimpl
def sdk_decompositions(ctx):
    CALLS.append(("decompositions", ctx.plugin, ctx.graph_kind))

@sdk.hookimpl
def sdk_keep_ops(ctx):
    CALLS.append(("keep_ops", ctx.plugin, ctx.graph_kind))

@sdk.hookimpl
def sdk_on_graph_compiled(ctx, report):
    CALLS.append(("observed", ctx.plugin, report.kind))
"""


def test_compile_hooks_reach_only_the_compiles_plugin(make_plugin, fake_dist, use_registry):
    module = make_plugin(SPY, name="spy")
    use_registry(fake_dist("acme-spy", {"spy": module}))
    calls = sys.modules[module].CALLS
    x = torch.randn(3)
    close(torch.compile(torch.sin, backend=BACKEND)(x), torch.sin(x))
    assert calls == [("observed", "cpu_cpp", "inference")]  # observers see every compile
    calls.clear()
    torch.compiler.reset()
    close(torch.compile(torch.sin, backend=sdk.backend("spy"))(x), torch.sin(x))
    assert ("decompositions", "spy", "inference") in calls
    assert ("keep_ops", "spy", "inference") in calls
    assert ("observed", "spy", "inference") in calls


@pytest.fixture
def acme(use_registry, monkeypatch):
    """The example vendor plugin, loaded from the source tree as if installed."""
    from importlib.metadata import EntryPoint

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "acme_vendor"))
    import acme_sdk_plugin

    acme_sdk_plugin.graphs_compiled.clear()
    acme_sdk_plugin.fallbacks.clear()
    use_registry(EntryPoint("acme", "acme_sdk_plugin", "sdk.plugins"))
    return acme_sdk_plugin


def acme_fn(x):
    return torch.sin(x) * 2 + torch.relu(x)


def test_acme_plugin_compiles_and_observes(acme, seeded):
    rows = {r["name"]: r for r in sdk.list_plugins()}
    assert rows["acme"]["status"] == "ok" and rows["acme"]["kind"] == "codegen"
    compiled = torch.compile(acme_fn, backend=sdk.backend("acme", unroll=4))
    for _ in range(2):
        x = torch.randn(9)
        close(compiled(x), acme_fn(x))
    assert acme.graphs_compiled == {"inference": 1}
    assert acme.fallbacks["aten.sin.default"] >= 1
    with pytest.raises(sdk.OptionError, match="option 'unroll' for sdk:acme must be int"):
        sdk.backend("acme", unroll="4")


def test_acme_refusal_reason_shows_in_explain(acme):
    report = sdk.explain(acme_fn, torch.randn(9), backend="sdk:acme")
    assert not report.kernels
    reasons = {f.op: f.reason for f in report.fallbacks}
    assert "Acme has no transcendental unit for sin" in reasons["aten.sin.default"]
    assert "Acme has no transcendental unit for sin" in str(report)


def test_explain_takes_a_backend_object_with_its_options():
    x = torch.randn(8, 16)
    report = sdk.explain(
        lambda t: (t * 2).relu().sum(-1), x, backend=sdk.backend("cpu_cpp", fusion=False)
    )
    assert len(report.kernels) >= 2  # fusion=False reached the compile: one kernel per op
    with pytest.raises(TypeError, match=r"sdk\.backend"):
        sdk.explain(lambda t: t * 2, x, backend=42)


def test_externs_call_the_public_function_of_the_same_overload():
    """The wrapper calls ``torch.convolution``/``torch.mm``/... instead of the OpOverload
    (less host work per call); each must compute exactly what the overload computes."""
    from sdk.core.program import _PUBLIC_FUNCTIONS

    aten = torch.ops.aten
    a, b, c = torch.randn(4, 5), torch.randn(5, 6), torch.randn(4, 6)
    ba, bb, bc = torch.randn(2, 4, 5), torch.randn(2, 5, 6), torch.randn(2, 4, 6)
    x, w = torch.randn(2, 4, 9, 9), torch.randn(8, 2, 3, 3)
    cases = {
        "aten.convolution.default": (
            (x, w, torch.randn(8), [2, 1], [1, 0], [1, 2], False, [0, 0], 2),
            {},
        ),
        "aten.mm.default": ((a, b), {}),
        "aten.bmm.default": ((ba, bb), {}),
        "aten.addmm.default": ((c, a, b), {"beta": 0.5, "alpha": 2.0}),
        "aten.baddbmm.default": ((bc, ba, bb), {"beta": 2.0, "alpha": -1.0}),
        "aten._addmm_activation.default": ((c[0], a, b), {"beta": 0.5, "alpha": 2.0}),
    }
    assert set(cases) == set(_PUBLIC_FUNCTIONS)
    for name, (args, kwargs) in cases.items():
        packet, overload = name.split(".")[1:]
        op = getattr(getattr(aten, packet), overload)
        fn = getattr(torch, _PUBLIC_FUNCTIONS[name][0])
        assert torch.equal(fn(*args, **kwargs), op(*args, **kwargs)), name


# ---------------------------------------------------------------------------
# threads
# ---------------------------------------------------------------------------

#: 8 threads whose first torch.compile names sdk:cpu_cpp at once, in a fresh process (so the
#: backend's lookup in Dynamo's registry is really the first), each checked against eager.
#: argv[1] "import": sdk imported before (else the lookup imports it).
FIRST_COMPILE_IN_THREADS = """
import sys, threading, traceback
import torch
if sys.argv[1] == "import":
    import sdk
errors = []
barrier = threading.Barrier(8)

def work(i):
    try:
        barrier.wait()
        fn = torch.compile(lambda a: (a * 2 + i).relu().sum(), backend="sdk:cpu_cpp")
        x = torch.randn(16)
        torch.testing.assert_close(fn(x), (x * 2 + i).relu().sum())
    except BaseException:
        errors.append(traceback.format_exc())

threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("".join(errors) or "ok", flush=True)
# done: exit without the interpreter's last collections over all that torch made (about 1 s
# of the process); exit handlers still run
import gc
gc.freeze()
"""

#: Threads compiling different models at once (a code object of each's own, so Dynamo
#: compiles each), forward and backward, for several rounds of new sizes.
MODELS_IN_THREADS = """
import threading, traceback
import torch
import sdk

def fresh(body):
    ns = {}
    exec("def f(x):\\n    return body(x)\\n", {"body": body}, ns)
    return ns["f"]

def models(k):
    nn = torch.nn
    return [
        nn.Sequential(nn.Linear(8, 16 + k), nn.GELU(), nn.LayerNorm(16 + k)),
        nn.Sequential(nn.Linear(8, 8 + k), nn.ReLU(), nn.Softmax(-1)),
        nn.Sequential(nn.LayerNorm(8), nn.Sigmoid(), nn.Linear(8, 3 + k)),
        nn.Sequential(nn.Linear(8, 4 + k), nn.Tanh()),
    ]

errors = []
for k in range(3):
    ms = models(k)
    barrier = threading.Barrier(len(ms))

    def work(m, i):
        try:
            barrier.wait()
            x = torch.randn(4, 8) + i
            step = torch.compile(fresh(m), backend=sdk.backend("cpu_cpp"))
            out = step(x)
            torch.testing.assert_close(out, m(x))
            out.sum().backward()
        except BaseException:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=work, args=(m, i)) for i, m in enumerate(ms)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print("".join(errors) or "ok", flush=True)
# done: exit without the interpreter's last collections over all that torch made (about 1 s
# of the process); exit handlers still run
import gc
gc.freeze()
"""


def _run_threads(code: str, *args: str) -> None:
    """Run ``code`` in a fresh process; a hang fails the test at the timeout."""
    import subprocess

    run = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=400
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr[-3000:]


@pytest.mark.parametrize("imported", ["import", "no-import"])
def test_first_compiles_in_threads_at_once(imported):
    """Every thread's lookup of sdk:cpu_cpp succeeds (they failed with Dynamo's
    ``AssertionError: duplicate name: sdk:cpu_cpp``) and computes what eager does."""
    _run_threads(FIRST_COMPILE_IN_THREADS, imported)


def test_threads_compile_different_models_at_once():
    _run_threads(MODELS_IN_THREADS)
