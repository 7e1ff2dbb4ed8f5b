"""The graph-level contract through ``examples/torchscript_vendor``: a plugin written from the
docs alone, as a vendor would, for a second real runtime (TorchScript's interpreter running
each partition ``torch.jit.trace`` recorded).

Each test is one point a vendor met (issue 41): hooks that build artifacts run outside the
compile's fake mode, a partition that fails to compile warns, ``fallback=False`` raises
``sdk.LoweringError``, a plugin without ``Capability.SYMBOLIC_SIZES`` gets concrete sizes, a
chain naming the backend again is an error, and ``ctx.threads`` is the thread count the
plugin's runtime uses.
"""

from __future__ import annotations

import importlib
import shutil
import warnings
from pathlib import Path

import pytest
import torch

import sdk
from tests import fresh
from tests.conftest import ROOT, builtin_entry_points

from .test_conformance import installed_as_wheel, run_suite, summary

EXAMPLE = ROOT / "examples" / "torchscript_vendor"
NAME = "torchscript_cpu"


@pytest.fixture
def ts(monkeypatch, fake_dist, use_registry):
    """The example plugin registered as its wheel would be (the installed one, if any, left
    out): returns its module."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    module = importlib.import_module("torchscript_sdk_plugin")
    eps = fake_dist("torchscript-sdk-plugin", {NAME: "torchscript_sdk_plugin"})
    use_registry([e for e in builtin_entry_points() if e.name != NAME], eps, builtins=False)
    return module


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )


def partitions(reports) -> list[sdk.PartitionReport]:
    return [p for g in reports for p in g.partitions]


def test_inference_and_training_run_in_torchscript(ts, graph_reports):
    """Every partition compiled by the plugin (its hooks trace real tensors: before, inside
    the compile's fake mode, every trace failed and ATen ran the graphs, silently)."""
    model, x = mlp(), torch.randn(8, 16)
    with torch.no_grad():
        compiled = torch.compile(model, backend=sdk.backend(NAME))
        torch.testing.assert_close(compiled(x), model(x))
    compiled = torch.compile(model, backend=sdk.backend(NAME))
    compiled(x).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for a, b in zip(got, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(a, b)
    parts = partitions(graph_reports)
    assert {g.kind for g in graph_reports} == {"inference", "forward", "backward"}
    assert parts and all(p.compiled_by == NAME for p in parts), parts
    # its sdk_keep_ops: GELU reaches it whole, and its backward op with it
    ops = {n.split(": ")[1] for p in parts for n in p.nodes}
    assert {"aten.gelu.default", "aten.gelu_backward.default"} <= ops, ops


def test_artifact_hooks_run_outside_the_fake_mode(ts, graph_reports, monkeypatch, tmp_path):
    """``sdk_compile_subgraph`` and, on a whole-graph cache hit, ``sdk_load_subgraph`` see
    real tensors from torch's factories (the plugin's ``_runner`` is called by both)."""
    seen: list[tuple[str, type]] = []
    real_runner = ts._runner

    def runner(module, where, threads):
        seen.append((type(torch.ones(1)).__name__, torch.ones(1).sum().item()))
        return real_runner(module, where, threads)

    monkeypatch.setattr(ts, "_runner", runner)
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    model, x = mlp(), torch.randn(8, 16)
    from sdk.core.adapters.torch_private import reset_dynamo

    with torch.no_grad():
        for _ in range(2):  # compiled, then loaded from the cache
            reset_dynamo()
            out = torch.compile(model, backend=sdk.backend(NAME))(x)
            torch.testing.assert_close(out, model(x))
    caches = [p.cache for p in partitions(graph_reports)]
    assert caches == ["stored", "hit"], caches
    assert seen == [("Tensor", 1.0), ("Tensor", 1.0)], seen


def test_a_partition_that_fails_warns_once_per_plugin_and_reason(ts, graph_reports, monkeypatch):
    """Its ops run in ATen, right, with one ``sdk.PluginFallbackWarning`` naming plugin,
    reason and ops; ``fallback=False`` raises ``sdk.LoweringError``."""

    def broken(gm, example_inputs):
        raise RuntimeError("the runtime is out of order")

    monkeypatch.setattr(ts, "compile_partition", broken)
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for fn in (lambda a: (a * 2).sin(), lambda a: a.cos() + 1):  # two graphs, one reason
            torch.testing.assert_close(torch.compile(fn, backend=sdk.backend(NAME))(x), fn(x))
    told = [str(w.message) for w in seen if w.category is sdk.PluginFallbackWarning]
    assert len(told) == 1, [str(w.message) for w in seen]
    assert "'torchscript_cpu'" in told[0] and "the runtime is out of order" in told[0]
    assert "aten.mul.Tensor, aten.sin.default" in told[0] and "in ATen" in told[0]
    assert "fallback=False and debug=True" in told[0]
    assert all(p.compiled_by == "aten" for p in partitions(graph_reports))
    with pytest.raises(Exception) as err:  # torch.compile wraps the backend's error
        torch.compile(lambda a: a.tan(), backend=sdk.backend(NAME, fallback=False))(x)
    assert _caused_by(err.value, sdk.LoweringError), err.value


def test_fallback_off_raises_lowering_error_for_a_refused_op(ts):
    """The plugin refuses random ops (a trace would freeze their values): with
    ``fallback=False`` that is ``sdk.LoweringError``, as a kernel-level plugin's refusal is."""
    x = torch.randn(4, 8)
    with pytest.raises(Exception) as err:
        torch.compile(
            lambda a: a.sin() + torch.rand_like(a), backend=sdk.backend(NAME, fallback=False)
        )(x)
    assert _caused_by(err.value, sdk.LoweringError), err.value
    assert "rand_like" in str(_caused_by(err.value, sdk.LoweringError))


def _caused_by(exc: BaseException, kind: type) -> BaseException | None:
    seen = []
    while exc is not None and exc not in seen:
        if isinstance(exc, kind):
            return exc
        seen.append(exc)
        exc = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
    return None


def test_without_symbolic_sizes_the_plugin_gets_concrete_ones(ts, graph_reports, monkeypatch):
    """A plugin that does not declare ``Capability.SYMBOLIC_SIZES`` is compiled per shape,
    as a kernel-level one is: it never sees a ``SymInt``, and no refusal is noted."""
    seen = []
    real = ts.compile_partition

    def recording(gm, example_inputs):
        seen.append(tuple(type(s).__name__ for e in example_inputs for s in _sizes(e)))
        return real(gm, example_inputs)

    monkeypatch.setattr(ts, "compile_partition", recording)
    fn = torch.compile(lambda a: (a * 2).relu() + 1, backend=sdk.backend(NAME), dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(n, 4)
        torch.testing.assert_close(fn(x), (x * 2).relu() + 1)
    assert len(seen) == 3 and all(set(s) <= {"int"} for s in seen), seen
    parts = partitions(graph_reports)
    assert parts and all(p.cache == "per shape" and not p.note for p in parts), parts


def _sizes(example) -> tuple:
    if isinstance(example, torch.Tensor):
        return (*example.shape, *example.stride())
    return (example,)


@pytest.mark.parametrize("chain", [[NAME, "cpu_cpp"], ["cpu_cpp", "cpu_cpp"]])
def test_a_chain_naming_a_plugin_again_is_an_error(ts, chain):
    with pytest.raises(Exception) as err:
        torch.compile(lambda a: a + 1, backend=sdk.backend(NAME, chain=chain))(torch.ones(2))
    error = _caused_by(err.value, sdk.OptionError)
    assert error is not None, err.value
    assert "use chain=['cpu_cpp']" in str(error), error


def test_the_runtime_uses_the_thread_count_of_the_compile(ts, monkeypatch):
    """``ctx.threads`` is ``torch.get_num_threads()`` when the compile began; the plugin runs
    its partitions with that many threads (Dynamo itself recompiles when the count changes,
    in torch 2.13: then the new compile's count)."""
    counts: list[tuple[int, int]] = []  # (ctx.threads of the compile, threads it ran with)
    real = ts._runner

    def runner(module, where, threads):
        def counting(*args):
            counts.append((threads, torch.get_num_threads()))
            return module(*args)

        return real(counting, where, threads)

    monkeypatch.setattr(ts, "_runner", runner)
    before = torch.get_num_threads()
    x = torch.randn(4, 8)
    try:
        torch.set_num_threads(1)
        fn = torch.compile(lambda a: a.sin() * 2, backend=sdk.backend(NAME))
        fn(x)
        torch.set_num_threads(2)
        torch.testing.assert_close(fn(x), x.sin() * 2)
        assert torch.get_num_threads() == 2  # restored after the call
    finally:
        torch.set_num_threads(before)
    assert counts[0] == (1, 1) and all(a == b for a, b in counts), counts


# -- the conformance suite on it --------------------------------------------------------


def torchscript_env(tmp_path: Path, refuse: set[str], known: dict[str, str]) -> dict[str, str]:
    """The example installed as a wheel, with ``refuse`` added to the ops it refuses and
    ``known`` as its KNOWN_FAILURES."""
    import os

    site = tmp_path / "site"
    package = site / "torchscript_sdk_plugin"
    shutil.copytree(EXAMPLE / "torchscript_sdk_plugin", package)
    init = package / "__init__.py"
    text = init.read_text()
    marker = "REFUSED = frozenset({"
    assert marker in text
    init.write_text(text.replace(marker, marker + "".join(f"{r!r}, " for r in sorted(refuse))))
    (package / "known_failures.py").write_text(f"KNOWN_FAILURES = {known!r}\n")
    installed_as_wheel(
        site, "torchscript-sdk-plugin", "0.1.0", f"[sdk.plugins]\n{NAME} = torchscript_sdk_plugin\n"
    )
    path = [str(site), os.environ.get("PYTHONPATH", "")]
    return {
        **fresh.one_thread(),
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "SDK_CACHE_DIR": str(tmp_path / "cache"),
    }


def test_conformance_of_the_torchscript_plugin(tmp_path):
    """Refusing cumsum, the plugin passes the fallback=False check (``sdk.LoweringError``);
    its compile faults warn; a known failure declared for a check other than an OpInfo
    case is a strict xfail (this one passes, so it is reported)."""
    env = torchscript_env(tmp_path, {"cumsum"}, {"option_identity_hooks": "declared, but passes"})
    proc = run_suite(
        tmp_path, env, f"--sdk-plugin={NAME}", "--sdk-opinfo=add", "--sdk-samples=1",
        "-k", "opinfo and float32 or option_fallback_off or option_identity "
        "or test_fault and not run_time",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "sdk conformance summary" in out, out[-3000:]
    cells = summary(out)
    assert cells[("opinfo fw float32", NAME)] == "1/1", out[-3000:]
    assert cells[("faults", NAME)].startswith("2/2"), out[-3000:]  # build, chain
    assert cells[("options", NAME)] == "1/2", out[-3000:]  # fallback off; identity: XPASS
    assert f"FAILED {NAME}: test_option_identity_hooks[{NAME}]" in out, out[-3000:]
    assert f"FAILED {NAME}: test_option_fallback_off" not in out, out[-3000:]


def test_a_conformance_failure_says_what_was_expected_in_full():
    from sdk.conformance import suite

    long = "x" * 3000
    with pytest.raises(pytest.fail.Exception) as failed:
        suite._expect_error(
            [sdk.SDKError(long)], lambda e: isinstance(e, sdk.LoweringError), "a LoweringError"
        )
    text = str(failed.value)
    assert "expected: a LoweringError" in text and long in text
    assert "sdk.errors.SDKError" in text


# -- what the docs say ------------------------------------------------------------------


def test_the_docs_say_which_hooks_see_fake_tensors():
    """sdk/hookspecs.py's "Fake tensors and real ones" names exactly the hooks the core calls
    outside the fake mode, and the guide's graph-level section says it too."""
    import re

    import sdk.hookspecs
    from sdk.core.hooks import REAL_MODE_HOOKS

    doc = sdk.hookspecs.__doc__.split("Fake tensors and real ones", 1)[1]
    outside = doc.split("are called *outside* that mode", 1)[0]
    assert set(re.findall(r"``(sdk_\w+)``", outside)) == set(REAL_MODE_HOOKS), outside
    guide = (ROOT / "docs" / "vendor-guide.md").read_text()
    graph = guide.split("## Graph-level plugins", 1)[1].split("\n## ", 1)[0]
    for heading in (
        "### What the hooks see",
        "### Decompositions and kept ops",
        "### Symbolic sizes",
        "### The output contract",
        "### Bring-up checklist",
    ):
        assert heading in graph, heading
    for name in ("sdk.PluginFallbackWarning", "sdk.LoweringError", "ctx.threads", "OptionError"):
        assert name in graph, name
