"""The native runner (core/runner.cpp) against the step interpreter (core/interp.py, the
Python executor of the same steps), bit for bit.

Each graph is compiled twice, ``options={"runner": "python"}`` (the interpreter, the
reference) and ``"native"`` (the default), and run on the same fresh random inputs: outputs,
gradients and buffers written in place must be equal bit for bit, and ``sdk.explain`` must
say which ran. (tests/core/test_interp.py runs more graphs with ``runner="check"``.)
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import sdk
import sdk.clike
from sdk.core import native
from sdk.core import steps as st
from sdk.errors import OptionError
from tests import fresh, models

pytestmark = pytest.mark.skipif(
    native.module() is None, reason=f"the native runner does not build here: {native.why_not()}"
)


def _run(fn, args, runner, **options):
    """``fn(*args)`` compiled with ``runner``: its result and the graphs' reports."""
    torch._dynamo.reset()
    backend = sdk.backend("cpu_cpp", runner=runner, cache=False, **options)
    out = torch.compile(fn, backend=backend)(*args)
    report = sdk.explain(fn, *args, backend=backend)
    return out, report


def _same(a, b) -> None:
    flat_a, flat_b = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    assert len(flat_a) == len(flat_b)
    for x, y in zip(flat_a, flat_b, strict=True):
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride()
            assert torch.equal(x, y) or (
                (x.isnan() == y.isnan()).all() and torch.equal(x.nan_to_num(), y.nan_to_num())
            ), (x, y)
        else:
            assert x == y


def _train_case(model: torch.nn.Module, make_input):
    """A training step of a copy of ``model`` per runner: loss, gradients and buffers."""

    def results(runner: str):
        torch.manual_seed(0)
        m = copy.deepcopy(model)
        x = make_input()

        def step(x):
            loss = m(x).float().pow(2).mean()
            loss.backward()
            return loss.detach()

        loss, report = _run(step, (x,), runner)
        grads = [p.grad for p in m.parameters()]
        return [loss, *grads, *m.buffers()], report

    return results


def _gpt2():
    model = models.gpt2(seed=0, n_positions=1024, use_cache=False).train()
    ids = torch.randint(0, 512, (2, 32))

    def results(runner: str):
        m = copy.deepcopy(model)

        def step(ids):
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            return loss.detach()

        loss, report = _run(step, (ids,), runner)
        return [loss, *(p.grad for p in m.parameters())], report

    return results


def _convnet():
    model = models.convnet(
        3, 8, 16, padding=(1, 0), act=(nn.ReLU, nn.GELU), maxpool_after=(0,), seed=0
    ).train()
    return _train_case(model, lambda: torch.randn(4, 3, 16, 16))


def _mlp():
    model = models.mlp(32, 64, 8, layernorm=True, seed=0)
    return _train_case(model, lambda: torch.randn(16, 32, requires_grad=True))


def _kernel_suite_cases():
    from sdk.tools.bench_kernels import _cpu_suite

    return sorted(_cpu_suite().items())


@pytest.mark.parametrize("name,build", _kernel_suite_cases(), ids=lambda v: str(v)[:20])
def test_kernel_suite_graphs_bit_for_bit(name, build):
    """Every graph of the kernel suite (`python -m sdk bench`), through both runners."""
    got = {}
    for runner in ("python", "native"):
        torch.manual_seed(0)
        case = build(torch.device("cpu"))
        torch._dynamo.reset()
        compiled = torch.compile(case.target, backend=sdk.backend("cpu_cpp", runner=runner))
        got[runner] = [t for _, t in case.outputs(case.step(compiled))]
    _same(got["python"], got["native"])
    torch.manual_seed(0)
    case = build(torch.device("cpu"))
    want = [t for _, t in case.outputs(case.step(case.target))]
    torch.testing.assert_close(got["python"], want, rtol=1e-4, atol=1e-4)  # and eager's


@pytest.mark.parametrize("case", [_mlp, _convnet, _gpt2], ids=["mlp", "convnet", "gpt2"])
def test_training_steps_bit_for_bit_and_explain_says_native(case):
    results = case()
    ref, ref_report = results("python")
    out, report = results("native")
    _same(ref, out)
    assert report.graphs and all(g.runner == "native" for g in report.graphs), [
        (g.name, g.runner) for g in report.graphs
    ]
    # (every graph has steps: the interpreter ran them, not a source)
    assert all(g.runner == "python: runner=python" for g in ref_report.graphs)
    assert "native runner" in str(report)
    assert " = input 0" in report.graphs[0].program  # the program as data


def test_kernels_without_a_c_entry_run_native_and_explain_names_them(monkeypatch):
    """A plugin's launcher without a C entry point (``sdk.NativeEntry``) is launched
    through Python by the runner: the graph still runs natively with the same bits, and
    ``explain`` names those kernels (each launch takes the GIL and a Python call)."""
    torch.manual_seed(0)
    x, w = torch.randn(64, 33), torch.randn(33)

    def f(x, w):
        return (x * w).relu().sum(1) + 1, x.sin() * 2

    ref, plain = _run(f, (x, w), "native")
    assert [g.python_launches for g in plain.graphs] == [()]
    assert "launched through Python" not in str(plain)
    made = sdk.clike.launchers

    def without_entries(lib, sources):
        return [lambda *a, fn=fn: fn(*a) for fn in made(lib, sources)]

    monkeypatch.setattr(sdk.clike, "launchers", without_entries)
    out, report = _run(f, (x, w), "native")
    _same(ref, out)
    (graph,) = report.graphs
    assert graph.runner == "native"
    assert graph.python_launches == tuple(k.name for k in graph.kernels) and graph.kernels
    text = " ".join(str(report).split())  # (lines folded at 160 characters)
    assert f"1 kernel launched through Python, no C entry: {graph.kernels[0].name}" in text


def test_in_place_writes_and_views_of_inputs():
    def f(buf, idx, x):
        buf.add_(1)  # a write into a graph input
        y = x.t()[1:] * 2  # a view of an input at an offset
        buf[idx] = y.sum(1)[: idx.numel()]  # index_put_ into the input
        return y, buf.view(2, -1)

    def args():
        torch.manual_seed(1)
        return torch.randn(8), torch.tensor([0, 3, 5]), torch.randn(6, 5)

    a, b = args(), args()
    ref, _ = _run(f, a, "python")
    out, report = _run(f, b, "native")
    _same(ref, out)
    _same(a, b)
    assert all(g.runner == "native" for g in report.graphs)


def test_an_index_out_of_range_raises_as_in_the_python_program():
    def f(x, i):
        return torch.gather(x, 0, i) * 2

    x, i = torch.randn(4, 3), torch.tensor([[0, 1, 9]])
    messages = {}
    for runner in ("python", "native"):
        torch._dynamo.reset()
        g = torch.compile(f, backend=sdk.backend("cpu_cpp", runner=runner, cache=False))
        with pytest.raises(Exception) as info:
            g(x, i)
        messages[runner] = (type(info.value), str(info.value))
    assert messages["python"] == messages["native"]


_LIB = torch.library.Library("sdk_runner_test", "DEF")
_LIB.define("scaled_and_count(Tensor x) -> (Tensor, SymInt)")
_LIB.impl("scaled_and_count", lambda x: (x * 2, x.shape[0]), "CPU")
torch.library.register_fake(
    "sdk_runner_test::scaled_and_count", lambda x: (torch.empty_like(x), x.shape[0]), lib=_LIB
)


def test_a_library_call_that_also_returns_a_number_runs_native():
    # cuDNN's attention returns two sizes beside its tensors; the graphs of every HF model
    # on an H100 ran in the Python program for it
    def f(x):
        y, _ = torch.ops.sdk_runner_test.scaled_and_count(x)
        return y.relu() + 1

    x = torch.randn(8, 4)
    ref, _ = _run(f, (x,), "python")
    out, report = _run(f, (x,), "native")
    _same(ref, out)
    assert [g.runner for g in report.graphs] == ["native"]


def test_a_graph_that_draws_random_numbers_runs_native_with_the_same_bits():
    """The per-call seed is drawn by a library call (randint from the device's generator),
    as the step interpreter draws it: under one manual_seed both runners give equal bits."""

    def with_dropout(x, w):
        return (torch.nn.functional.dropout(x @ w, 0.5, training=True) + 1).relu()

    def args():
        torch.manual_seed(3)
        return torch.randn(16, 32), torch.randn(32, 32)

    outs = {}
    for runner in ("python", "native"):
        torch.manual_seed(7)
        out, report = _run(with_dropout, args(), runner)
        outs[runner] = (out, torch.rand(4))  # the generator's state after the call, too
    _same(outs["python"], outs["native"])
    assert [g.runner for g in report.graphs] == ["native"]
    assert (outs["native"][0] == 0).any()  # dropout dropped something


def test_steps_the_runner_cannot_take_run_in_the_interpreter_and_say_why():
    """A kernel of more arguments than the runner's direct calls take (MAX_LAUNCH_ARGS):
    the program is still steps (a LAUNCH of them all), the step interpreter runs them, and
    sdk.explain says why."""

    def f(*xs):
        return torch.stack(xs).sum(0)

    xs = [torch.randn(4) for _ in range(st.MAX_LAUNCH_ARGS + 4)]
    torch._dynamo.reset()
    backend = sdk.backend("cpu_cpp", runner="native", cache=False)
    torch.testing.assert_close(torch.compile(f, backend=backend)(*xs), f(*xs))
    report = sdk.explain(f, *xs, backend=backend)
    runners = [g.runner for g in report.graphs]
    why = rf"python: kernel k_\w+: \d+ arguments, over the runner's {st.MAX_LAUNCH_ARGS}"
    assert any(re.fullmatch(why, r) for r in runners), runners
    assert f"over the runner's {st.MAX_LAUNCH_ARGS})" in str(report)  # which program and why
    big = next(g for g in report.graphs if g.runner.startswith("python"))
    launch = next(ln for ln in big.program.splitlines() if "launch k_" in ln)
    assert launch.count("%") > st.MAX_LAUNCH_ARGS, launch


def test_a_warm_program_from_the_graph_cache_runs_native(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(1)

    x, w = torch.randn(8, 16), torch.randn(16, 4)
    reports = []
    for _ in range(2):
        torch._dynamo.reset()
        reports.append(sdk.explain(f, x, w, backend=sdk.backend("cpu_cpp", runner="native")))
    assert reports[1].graphs[0].cache == "hit"
    assert reports[1].graphs[0].runner == "native"
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, backend="sdk:cpu_cpp")(x, w), f(x, w))


def test_runner_option_is_checked():
    with pytest.raises(OptionError, match="'native', 'python' or 'check'"):
        sdk.backend("cpu_cpp", runner="fast")


def test_check_refuses_a_slot_read_before_it_is_written():
    with pytest.raises(ValueError, match="reads slot 1 unwritten"):
        st.check([(st.INPUT, 0, 0), (st.ALIAS, 2, 1), (st.RETURN, [(0, 2)])], 3)
    with pytest.raises(ValueError, match="does not end with a return"):
        st.check([(st.INPUT, 0, 0)], 1)
    st.check([(st.INPUT, 0, 0), (st.FREE, 0), (st.INPUT, 0, 0), (st.RETURN, [(0, 0)])], 1)


def test_no_compiler_one_warning_and_the_python_program(tmp_path):
    """A machine where the runner cannot be built: one warning naming the fix, right results."""
    script = textwrap.dedent(
        """
        import warnings, torch, sdk
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            f = torch.compile(lambda x: (x.sin() * 2).sum(), backend="sdk:cpu_cpp")
            x = torch.randn(32)
            torch.testing.assert_close(f(x), (x.sin() * 2).sum())
            g = torch.compile(lambda x: x.cos() + 1, backend="sdk:cpu_cpp")
            torch.testing.assert_close(g(x), x.cos() + 1)
        runner = [w for w in caught if "native runner" in str(w.message)]
        print("WARNINGS", len(runner))
        print("MESSAGE", str(runner[0].message) if runner else "", flush=True)
        # done: exit without the interpreter's last collections over all that torch made
        # (about 1 s of the process); exit handlers still run
        import gc
        gc.freeze()
        """
    )
    # a compiler that builds the plugin's kernels but fails on the runner, as where torch's
    # headers are missing
    cxx = tmp_path / "cxx"
    cxx.write_text(
        "#!/bin/sh\n"
        'case "$*" in */runner/*) echo "fatal error: torch/extension.h: No such file" >&2; '
        "exit 1;; esac\n"
        'exec g++ "$@"\n'
    )
    cxx.chmod(0o755)
    env = fresh.one_thread(
        SDK_RUNNER_DIR=str(tmp_path / "runner"),
        SDK_CACHE_DIR=str(tmp_path / "cache"),
        CXX=str(cxx),
    )
    proc = fresh.run([sys.executable, "-c", script], env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNINGS 1" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "Fix: install a C++ compiler" in proc.stdout


@pytest.fixture
def fresh_runner(monkeypatch):
    """``native.module()`` forgets the runner this process loaded (restored after), with
    ``SDK_RUNNER_DIR`` naming the cache it came from: loading it again is a cache hit."""
    saved = dict(native._state)
    monkeypatch.setenv("SDK_RUNNER_DIR", str(Path(saved["module"].__file__).parents[1]))
    native._state.clear()
    yield
    native._state.clear()
    native._state.update(saved)


def test_an_interrupted_runner_build_is_not_remembered(fresh_runner, monkeypatch):
    """Ctrl-C during the first build of the runner (about a minute) stops the build, and the
    next compile builds it again: the runner is not off for the rest of the process."""
    from sdk import toolchain

    built = toolchain.compile_library

    def interrupted(*args, namespace="clike", **kwargs):
        if namespace == "runner":
            raise KeyboardInterrupt
        return built(*args, namespace=namespace, **kwargs)

    monkeypatch.setattr(toolchain, "compile_library", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(lambda x: x.sin() * 2, (torch.randn(8),), "native")
    assert native.why_not() is None
    monkeypatch.setattr(toolchain, "compile_library", built)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = torch.randn(8)
        out, report = _run(lambda x: x.sin() * 2, (x,), "native")
    assert [g.runner for g in report.graphs] == ["native"], str(report)
    torch.testing.assert_close(out, x.sin() * 2)


def test_the_runner_dir_never_changes_the_environment(fresh_runner, monkeypatch, tmp_path):
    """``SDK_RUNNER_DIR`` reaches the build as an argument: the process environment (which
    other threads, a lazy backward compile, and child processes read) keeps the cache root."""
    from sdk import toolchain

    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    before = dict(os.environ)
    seen = []
    built = toolchain.compile_library

    def observed(*args, **kwargs):
        seen.append(dict(os.environ))
        return built(*args, **kwargs)

    monkeypatch.setattr(toolchain, "compile_library", observed)
    mod = native.module()
    assert mod is not None, native.why_not()
    assert seen == [before]
    assert Path(mod.__file__).parents[1] == Path(os.environ["SDK_RUNNER_DIR"])
    assert not (tmp_path / "cache").exists()  # nothing of the runner's in the cache root


def test_native_entry_is_what_the_toolchain_launcher_carries():
    import ctypes

    from sdk import toolchain

    libc = ctypes.CDLL(None)
    launch = toolchain.launcher(toolchain.get_function(libc, "abs", 0), nargs=0)
    assert isinstance(launch.native, sdk.NativeEntry)
    assert launch.native.address == ctypes.cast(libc["abs"], ctypes.c_void_p).value
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native.module() is not None


def test_the_runner_checks_a_backward_graphs_inputs_and_respecializes(specializations):
    """A backward graph's inputs are not Dynamo-guarded: the runner checks each input's
    sizes, strides, offset, device and alignment itself (no Python per input), and a
    gradient that arrives misaligned gets a variant of its own."""

    def f(x, w):
        return (x @ w).relu() * 2 + x.sum(1, keepdim=True)

    torch.manual_seed(0)
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 12, requires_grad=True)
    g = torch.compile(f, backend=sdk.backend("cpu_cpp", runner="native", cache=False))
    for grad in (
        torch.randn(8, 12),
        torch.randn(12, 8).t(),  # transposed (AOTAutograd hands it on contiguous)
        torch.randn(8 * 12 + 1)[1:].view(8, 12),  # 4 bytes into its storage
        torch.randn(8, 12),  # the first variant again
    ):
        got = torch.autograd.grad(g(x, w), (x, w), grad)
        want = torch.autograd.grad(f(x, w), (x, w), grad)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)
    backward = [p for p in specializations if len(p.variants) > 1]
    assert len(backward) == 1 and len(backward[0].variants) == 2, [
        len(p.variants) for p in specializations
    ]
    assert all(type(fn).__name__ == "Program" for fn in backward[0].variants.values())


# ---- symbolic sizes (dynamic=True): sizes in the runner's registers ----


def _symbolic(fn, calls, reports):
    """``fn`` compiled with ``dynamic=True`` per runner, called on each of ``calls`` (fresh
    inputs per call, the same for both runners), compared with eager and bit for bit
    between the runners: the reports of the graphs the native run compiled (``reports``:
    the graph_reports fixture's list)."""
    results = {}
    for runner in ("python", "native"):
        torch._dynamo.reset()
        start = len(reports)
        backend = sdk.backend("cpu_cpp", runner=runner, cache=False)
        compiled = torch.compile(fn, backend=backend, dynamic=True)
        results[runner] = [compiled(*make()) for make in calls]
    for make, got in zip(calls, results["native"], strict=True):
        torch.testing.assert_close(got, fn(*make()))
    _same(results["python"], results["native"])
    return reports[start:]


def _fresh(*shapes, seed=0):
    def make():
        torch.manual_seed(seed)
        return tuple(torch.randn(s) if isinstance(s, tuple) else s for s in shapes)

    return make


SYMBOLIC = {
    # a view of symbolic sizes (x's length in a register, n // 4 computed by EXPR)
    "view": (lambda x, y: (x.view(-1, 4) * y).sum(1), [_fresh((n, 8), (4,)) for n in (8, 12, 20)]),
    # a reduction over a symbolic length: the kernel takes its sizes as arguments
    "softmax": (
        lambda x: torch.softmax(x * 2, -1).sum(0),
        [_fresh((b, t)) for b, t in ((3, 7), (5, 9), (2, 33))],
    ),
    # a slice, a transpose and a copy: offsets and strides over the sizes
    "slice": (lambda x: x[1:].t().contiguous() + 1, [_fresh((n, 6)) for n in (5, 9)]),
    # a library call given a symbolic size (topk's k: a REG argument), a size returned
    "topk": (
        lambda x: (torch.topk(x, x.shape[1] // 2).values * 2, x.shape[0] * x.shape[1]),
        [_fresh((b, t)) for b, t in ((3, 8), (4, 10))],
    ),
}


def _one_program_on_the_runner(graphs) -> None:
    """Every graph compiled once for every size, and run by the native runner, its sizes
    read into registers (``r0 = input ...``)."""
    text = "\n".join(str(g) for g in graphs)
    assert graphs and all(g.runner == "native" for g in graphs), text
    assert all("sizes symbolic" in str(g) for g in graphs), text
    assert all(re.search(r"r\d+ = input \d", g.program) for g in graphs), text


@pytest.mark.parametrize("name", sorted(SYMBOLIC))
def test_symbolic_sizes_run_native_bit_for_bit(name, graph_reports):
    """Graphs compiled for symbolic sizes (``dynamic=True``) run on the runner: every
    length gives the step interpreter's bits and eager's values."""
    fn, calls = SYMBOLIC[name]
    _one_program_on_the_runner(_symbolic(fn, calls, graph_reports))


def test_an_int_input_runs_native(graph_reports):
    """An int graph input (which the SDK specializes on: a variant per value) no longer
    keeps the program off the runner."""
    fn = lambda x, n: x.reshape(n, -1).sum(1) * n  # noqa: E731
    graphs = _symbolic(fn, [_fresh((12, 3), n) for n in (4, 6)], graph_reports)
    assert graphs and all(g.runner == "native" for g in graphs), [g.runner for g in graphs]


def test_symbolic_training_returns_sizes_for_the_backward_natively(graph_reports):
    """A training step with ``dynamic=True``: the forward returns symbolic sizes that the
    backward takes as int inputs; both graphs run on the runner, gradients bit for bit."""
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16))
    got = {}
    for runner in ("python", "native"):
        torch._dynamo.reset()
        start = len(graph_reports)
        m = copy.deepcopy(model)
        h = torch.compile(
            m, backend=sdk.backend("cpu_cpp", runner=runner, cache=False), dynamic=True
        )
        got[runner] = []
        for n in (3, 5, 9):
            torch.manual_seed(n)
            x = torch.randn(n, 8, requires_grad=True)
            out = h(x)
            got[runner] += [out, *torch.autograd.grad(out.pow(2).sum(), [x, m[0].weight])]
    _same(got["python"], got["native"])
    torch.manual_seed(9)
    torch.testing.assert_close(got["native"][-3], model(torch.randn(9, 8)))
    graphs = graph_reports[start:]
    assert len(graphs) == 2, [g.name for g in graphs]  # the forward and the backward
    _one_program_on_the_runner(graphs)
    assert re.search(r"return .*r\d+", graphs[0].program), graphs[0].program  # a size out


# ---- the plugin's own library functions (sdk_extern): CALL_PY ----

VENDOR = """
import torch

import sdk
import sdk.cache
from sdk.plugins import cpu_cpp
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

CALLS = []
MODE = {"answer": "right"}


@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name="vmm", version="0.1", hook_api=4, device_types=("cpu",),
        capabilities=frozenset({
            sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE, sdk.Capability.STORE_THEN_LOAD,
            sdk.Capability.SYMBOLIC_SIZES,
        }),
        description="cpu_cpp's kernels, its own matrix product",
    )


@sdk.hookimpl
def sdk_cache_key(ctx):
    return cpu_cpp.sdk_cache_key(ctx) + sdk.cache.source_digest(__name__)


def mm(a, b):
    CALLS.append(tuple(a.shape))
    return (a.double() @ b.double()).float()


def mm_transposed(a, b):
    return (a @ b).t().contiguous()


@sdk.hookimpl
def sdk_extern(ctx, op, node):
    if op == torch.ops.aten.mm.default:
        return mm if MODE["answer"] == "right" else mm_transposed
    return None
"""


@pytest.fixture
def vmm(make_plugin, fake_dist, use_registry):
    module = make_plugin(VENDOR, head=False)
    use_registry(fake_dist("vmm-sdk-plugin", {"vmm": module}))
    return __import__(module)


def _product(x, w):
    return torch.nn.functional.gelu(x @ w).sum(1)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
def test_a_plugins_own_library_function_runs_on_the_runner(vmm, graph_reports, dynamic):
    """A library call through the plugin's function (``sdk_extern``) is a CALL_PY step:
    the runner calls the function (the GIL taken) and checks its result as the Python
    program does; with symbolic sizes the checked layout is read from registers."""
    results = {}
    for runner in ("python", "native"):
        torch._dynamo.reset()
        start = len(graph_reports)
        backend = sdk.backend("vmm", runner=runner, cache=False)
        compiled = torch.compile(_product, backend=backend, dynamic=dynamic)
        results[runner] = []
        for n in (6, 10):
            torch.manual_seed(n)
            x, w = torch.randn(n, 8), torch.randn(8, 4)
            results[runner].append(compiled(x, w))
            torch.testing.assert_close(results[runner][-1], _product(x, w))
    _same(results["python"], results["native"])
    graphs = graph_reports[start:]
    assert graphs and all(g.runner == "native" for g in graphs), [g.runner for g in graphs]
    assert any("(Python)" in g.program for g in graphs), graphs[0].program
    assert (6, 8) in vmm.CALLS and (10, 8) in vmm.CALLS


def test_a_plugins_function_that_returns_a_wrong_shape_is_named_by_the_runner(vmm):
    """The runner checks what the plugin's function returned as the step interpreter does:
    an SDKError naming the function, what it returned and what the op gives."""
    x, w = torch.randn(4, 6), torch.randn(6, 3)
    torch._dynamo.reset()
    backend = sdk.backend("vmm", fallback=False, cache=False)
    assert sdk.explain(lambda x, w: x @ w, x, w, backend=backend).graphs[0].runner == "native"
    vmm.MODE["answer"] = "wrong"
    torch._dynamo.reset()
    with pytest.raises(sdk.SDKError) as exc:
        torch.compile(lambda x, w: x @ w, backend=backend)(x, w)
    msg = str(exc.value)
    assert "sdk:vmm's sdk_extern function for aten.mm.default (node mm)" in msg, msg
    assert "shape (3, 4)" in msg and "shape (4, 3)" in msg, msg


def test_a_host_constants_device_copy_is_made_once_and_kept_by_the_runner():
    """A constant on another device than the graph's (a CPU scalar of a GPU graph) is copied
    once and kept: the runner's program holds the copy (CONST of the copy, made when the
    program is loaded), the same tensor the step interpreter hands out. (On a CPU-only machine the graph's device is the CPU: the
    copy is the constant itself; the GPU suite has real copies.)"""
    from sdk.core.wrapper import Wrapper

    const = torch.arange(4.0)
    steps = [(st.CONST, 0, "const0", False), (st.CONST, 1, "const0", True), (st.RETURN, [(0, 1)])]
    wrapper = Wrapper(steps, 2, 0, {}, {"const0": const}, "cpu", frozenset(), frozenset())
    native_call = wrapper.materialize("g", runner="native")
    python_call = wrapper.materialize("g", runner="python")
    assert hasattr(native_call, "steps") and not hasattr(python_call, "steps")
    (first,), (again,) = native_call([]), native_call([])
    assert first is again and torch.equal(first, python_call([])[0])
    assert "constant const0, device copy True" in st.describe(steps)


def test_loading_the_built_runner_imports_no_build_tooling():
    """The runner's build flags name torch's headers and libraries where
    ``torch.utils.cpp_extension`` finds them, and a process that loads the built runner does
    not import that module (it imports setuptools: about a second of a warm start)."""
    from torch.utils import cpp_extension

    flags = native._flags()
    assert all(f"-I{p}" in flags for p in cpp_extension.include_paths()), flags
    assert f"-L{cpp_extension.library_paths()[0]}" in flags, flags
    assert native.module() is not None  # built here (or found) before the child loads it
    code = (
        "import sys\n"
        "from sdk.core import native\n"
        "assert native.module() is not None\n"
        "print(sorted(m for m in sys.modules if m.startswith(('torch.utils.cpp_extension', "
        "'setuptools'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_runner_s_build_is_not_counted_as_a_graph_s_compile(monkeypatch):
    """A cache hit says what the cold compile took: the runner's build (once per machine,
    about a minute) that fell inside it is not part of it."""
    monkeypatch.setitem(native._state, "built", (10.0, 40.0))
    assert native.build_seconds_since(0.0) == 30.0
    assert native.build_seconds_since(25.0) == 15.0
    assert native.build_seconds_since(50.0) == 0.0
    monkeypatch.delitem(native._state, "built")
    assert native.build_seconds_since(0.0) == 0.0
