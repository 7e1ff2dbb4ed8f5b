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
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import sdk
from sdk.core import native
from sdk.core import steps as st
from sdk.errors import OptionError
from tests import models

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
    as the Python program draws it: under one manual_seed both runners give equal bits."""

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


def test_steps_the_runner_cannot_take_stay_python_and_say_why():
    torch._dynamo.reset()
    backend = sdk.backend("cpu_cpp", runner="native", cache=False)
    f = torch.compile(lambda x: (x * 2).sum(0), backend=backend, dynamic=True)
    torch.testing.assert_close(f(torch.ones(3, 4)), torch.full((4,), 6.0))
    report = sdk.explain(lambda x: (x * 2).sum(0), torch.ones(3, 4), backend=backend)
    assert report.graphs


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
        print("MESSAGE", str(runner[0].message) if runner else "")
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
    env = {
        **os.environ,
        "SDK_RUNNER_DIR": str(tmp_path / "runner"),
        "SDK_CACHE_DIR": str(tmp_path / "cache"),
        "CXX": str(cxx),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
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
