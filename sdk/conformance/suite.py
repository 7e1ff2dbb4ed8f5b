"""The conformance checks, as pytest tests (run them with ``pytest --sdk-plugin=NAME``).

Every check takes the plugin's name (``sdk_plugin``) and device (``sdk_device``) from
:mod:`sdk.conformance.pytest_plugin`, compares with eager on fresh random inputs and reads
what happened from ``sdk.explain``. A check that does not apply to the plugin (fusion checks
of a plugin that renders no kernels, fault injection into a plugin without
``sdk_compile_kernels``) is skipped with the reason, which the summary shows.

A graph-level plugin (``PluginKind.GRAPH``) compiles partitions, not kernels: its fusion checks
ask for one partition of its own where a kernel-level plugin's ask for one kernel, its faults
are injected into ``sdk_compile_subgraph`` and the subgraphs it returns, and its cache entries
are the partition artifacts of the whole-graph cache.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

import sdk
from sdk import conformance as C

#: the whole-graph cache is on only in the cache checks (see the pytest plugin)


def _rand(
    *shape: int, device: str, grad: bool = False, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=dtype).requires_grad_(grad)


def _check(plugin: str, fn, *args, grad: bool = False, **options) -> None:
    seed = C.seed_of(plugin, fn.__name__)
    C.reset()
    compiled = torch.compile(fn, backend=sdk.backend(plugin, **options))
    actual, expected = C.run_both(fn, list(args), compiled, grad, seed)
    C.assert_close(actual, expected, "output or gradient")


def _needs_kernels(report: sdk.ExplainReport, plugin: str) -> None:
    if C.graph_level(plugin):
        _needs_partitions(report, plugin)
        return
    if not report.kernels:
        reasons = sorted({f"{f.op}: {f.reason}" for f in report.fallbacks})
        pytest.skip(
            f"sdk:{plugin} generated no kernel here (every op fell back: {'; '.join(reasons)})"
        )


def _partitions(report: sdk.ExplainReport) -> list[sdk.PartitionReport]:
    """Every partition of the report's graphs (graphs a chain split)."""
    return [p for g in report.graphs for p in g.partitions]


def _own(report: sdk.ExplainReport, plugin: str) -> list[sdk.PartitionReport]:
    """The partitions graph-level ``plugin`` compiled itself."""
    return [p for p in _partitions(report) if p.compiled_by == plugin]


def _needs_partitions(report: sdk.ExplainReport, plugin: str) -> None:
    if not _own(report, plugin):
        missed = C.not_compiled(plugin, report.graphs)
        pytest.skip(f"sdk:{plugin} compiled no partition here: {'; '.join(missed)}")


# -- opinfo ------------------------------------------------------------------------------


def test_opinfo(
    sdk_plugin: str,
    sdk_device: str,
    opinfo_case: tuple[str, str, str],
    sdk_samples: int,
    record_property,
) -> None:
    """The OpInfo's first ``--sdk-samples`` samples against eager, forward (fw) or
    forward+backward (fwbw)."""
    made = C.run_opinfo_case(sdk_plugin, sdk_device, *opinfo_case, samples=sdk_samples)
    record_property("sdk_kernels", made)


# -- fusion --------------------------------------------------------------------------


def chain(x, y):
    return torch.relu(x * y + 1.0) * 2.0


def test_fusion_pointwise_chain_is_one_kernel(sdk_plugin: str, sdk_device: str) -> None:
    x, y = _rand(16, 33, device=sdk_device), _rand(16, 33, device=sdk_device)
    report = C.explain(sdk_plugin, chain, x, y)
    _needs_kernels(report, sdk_plugin)
    if report.fallbacks:
        pytest.skip(f"sdk:{sdk_plugin} refuses part of the chain: {report.fallbacks[0].reason}")
    if C.graph_level(sdk_plugin):
        _one_partition(report, sdk_plugin, "a pointwise chain")
        _check(sdk_plugin, chain, x, y)
        return
    assert len(report.kernels) == 1, f"a pointwise chain should be one kernel:\n{report}"
    assert sorted(report.kernels[0].ops) == sorted(
        ["aten.mul.Tensor", "aten.add.Tensor", "aten.relu.default", "aten.mul.Tensor"]
    ), report
    _check(sdk_plugin, chain, x, y)


def _one_partition(report: sdk.ExplainReport, plugin: str, what: str) -> None:
    """Each graph of ``report`` is one partition that ``plugin`` compiled, holding every op."""
    for g in report.graphs:
        assert not C.not_compiled(plugin, [g]), f"{what}: {C.not_compiled(plugin, [g])}\n{g}"
        assert len(g.partitions) == 1, f"{what} should be one partition:\n{g}"


def reduce_with_neighbours(x):
    return torch.softmax(x * 0.5, dim=-1) + 1.0


def test_fusion_reduction_with_its_neighbours(sdk_plugin: str, sdk_device: str) -> None:
    """softmax with a pointwise op before and after: fewer kernels than ops (one partition of
    a graph-level plugin)."""
    if C.graph_level(sdk_plugin):
        x = _rand(8, 40, device=sdk_device)
        report = C.explain(sdk_plugin, reduce_with_neighbours, x)
        _needs_kernels(report, sdk_plugin)
        _one_partition(report, sdk_plugin, "a reduction with its neighbours")
        _check(sdk_plugin, reduce_with_neighbours, x)
        return
    if not C.require(sdk_plugin).capabilities & {sdk.Capability.REDUCTIONS}:
        pytest.skip(f"sdk:{sdk_plugin} does not declare Capability.REDUCTIONS")
    x = _rand(8, 40, device=sdk_device)
    report = C.explain(sdk_plugin, reduce_with_neighbours, x)
    _needs_kernels(report, sdk_plugin)
    ops = C.generated_ops(report)
    assert len(report.kernels) < len(ops), f"nothing fused around the reduction:\n{report}"
    _check(sdk_plugin, reduce_with_neighbours, x)


def train_step(x, w):
    return (torch.tanh(x) * w).sum(-1)


def test_fusion_training_graphs(sdk_plugin: str, sdk_device: str) -> None:
    """Forward and backward graphs both get fused kernels, and the gradients match."""
    x, w = _rand(12, 20, device=sdk_device, grad=True), _rand(20, device=sdk_device, grad=True)
    report = C.explain(sdk_plugin, train_step, x, w)
    kinds = [g.kind for g in report.graphs]
    assert kinds == ["forward", "backward"], f"expected a forward and a backward graph:\n{report}"
    _needs_kernels(report, sdk_plugin)
    if C.graph_level(sdk_plugin):
        _one_partition(report, sdk_plugin, "a training graph")
        _check(sdk_plugin, train_step, x, w, grad=True)
        return
    for g in report.graphs:
        fused = [k for k in g.kernels if len(k.ops) > 1]
        inside = sum(len(k.ops) for k in g.kernels)
        assert inside < 2 or fused, f"no kernel of the {g.kind} graph fuses two ops:\n{g}"
    _check(sdk_plugin, train_step, x, w, grad=True)


# -- options -------------------------------------------------------------------------


def test_option_unknown_is_an_error_that_lists_the_known(sdk_plugin: str) -> None:
    with pytest.raises(sdk.OptionError) as exc:
        sdk.backend(sdk_plugin, no_such_option_x=1)
    msg = str(exc.value)
    assert "no_such_option_x" in msg and "known options" in msg and "fusion" in msg, msg
    for name in C.require(sdk_plugin).options:
        assert name in msg, f"the error does not list the plugin's option {name!r}: {msg}"


def test_option_wrong_type_is_an_error(sdk_plugin: str) -> None:
    specs = {"fusion": sdk.OptionSpec(True, "", bool), **C.require(sdk_plugin).options}
    checked = 0
    for name, spec in specs.items():
        if spec.type is object:
            continue
        bad = next((v for v in ("a string", 1.5, object()) if not isinstance(v, spec.type)), None)
        if bad is None:
            continue
        with pytest.raises(sdk.OptionError, match=name):
            sdk.backend(sdk_plugin, **{name: bad})
        checked += 1
    assert checked, "no typed option to check"


def test_option_declared_defaults_compile(sdk_plugin: str, sdk_device: str) -> None:
    """Each option the plugin declares, passed explicitly at its default, compiles right."""
    x, y = _rand(4, 9, device=sdk_device), _rand(4, 9, device=sdk_device)
    info = C.require(sdk_plugin)
    for spec in info.options.values():
        assert spec.doc, f"sdk:{sdk_plugin} declares an option without a doc string"
    _check(sdk_plugin, chain, x, y, **{k: s.default for k, s in info.options.items()})


def test_option_declared_other_values_compile(sdk_plugin: str, sdk_device: str) -> None:
    """Each option the plugin declares, at each value other than its default that
    :func:`sdk.conformance.option_values` gives, compiles a pointwise chain, a reduction and
    a training step right."""
    info = C.require(sdk_plugin)
    tried, untried = 0, []
    for name, spec in info.options.items():
        values = C.option_values(spec)
        if not values:
            untried.append(name)
        for value in values:
            x, y = _rand(16, 33, device=sdk_device), _rand(16, 33, device=sdk_device)
            _check(sdk_plugin, chain, x, y, **{name: value})
            _check(sdk_plugin, reduce_with_neighbours, x, **{name: value})
            xg, w = _rand(12, 20, device=sdk_device, grad=True), _rand(20, device=sdk_device)
            _check(sdk_plugin, train_step, xg, w.requires_grad_(), grad=True, **{name: value})
            tried += 1
    if not tried:
        pytest.skip(
            f"sdk:{sdk_plugin} declares no option with a value to try"
            + (
                f" ({', '.join(untried)}: declare OptionSpec(examples=(...)) to have them checked)"
                if untried
                else ""
            )
        )


def test_option_fusion_off(sdk_plugin: str, sdk_device: str) -> None:
    if C.graph_level(sdk_plugin):
        pytest.skip(
            f"sdk:{sdk_plugin} is graph-level: the SDK renders no kernels for it, so fusion=False "
            "has nothing to split (its own compiler fuses inside a partition)"
        )
    x, y = _rand(16, 33, device=sdk_device), _rand(16, 33, device=sdk_device)
    report = C.explain(sdk_plugin, chain, x, y, fusion=False)
    _needs_kernels(report, sdk_plugin)
    assert all(len(k.ops) == 1 for k in report.kernels), f"fusion=False fused:\n{report}"
    _check(sdk_plugin, chain, x, y, fusion=False)


def refused_probe(x):
    return torch.sin(x) * 2.0 + torch.cumsum(x, -1)


def test_option_fallback_off_raises_on_a_refused_op(sdk_plugin: str, sdk_device: str) -> None:
    x = _rand(6, 10, device=sdk_device)
    report = C.explain(sdk_plugin, refused_probe, x)
    if not report.fallbacks:
        pytest.skip(f"sdk:{sdk_plugin} refuses none of sin, mul, add, cumsum")
    for f in report.fallbacks:
        assert f.reason.strip(), f"a fallback of {f.op} without a reason:\n{report}"
    chain = _error_of(refused_probe, x, backend=sdk.backend(sdk_plugin, fallback=False))
    refused = ", ".join(sorted({f.op for f in report.fallbacks}))
    _expect_error(
        chain,
        lambda e: isinstance(e, sdk.LoweringError),
        f"fallback=False with ops sdk:{sdk_plugin} refuses ({refused}) should raise "
        "sdk.LoweringError naming them",
    )


def test_option_identity_hooks(sdk_plugin: str) -> None:
    """``python -m sdk list`` shows the plugin usable, its info is complete, its status cheap."""
    import time

    rows = {r["name"]: r for r in sdk.list_plugins()}
    assert rows[sdk_plugin]["status"] == "ok", rows[sdk_plugin]
    info = C.require(sdk_plugin)
    assert info.version and info.device_types and info.description, (
        f"fill in version, device_types and description of PluginInfo: {info}"
    )
    rec = C.registry().record(sdk_plugin)
    status = getattr(rec.plugin, "sdk_plugin_status", None)
    if status is not None:
        start = time.perf_counter()
        assert status() is None
        assert time.perf_counter() - start < 1.0, "sdk_plugin_status must be cheap (< 1 s)"


# -- symbolic sizes ------------------------------------------------------------------


def rows(x, w):
    return torch.softmax(x * w, dim=-1).sum(-1) + x[:, 0]


def test_sizes_dynamic(sdk_plugin: str, sdk_device: str) -> None:
    """``dynamic=True`` over three sizes of a dimension, forward and backward, is right; a
    plugin declaring ``Capability.SYMBOLIC_SIZES`` compiles one program for all of them
    (``GraphReport.sizes`` "symbolic: ...", not "per shape: why")."""
    symbolic = sdk.Capability.SYMBOLIC_SIZES in C.require(sdk_plugin).capabilities
    C.reset()
    compiled = torch.compile(rows, backend=sdk.backend(sdk_plugin), dynamic=True)
    graphs: list[sdk.GraphReport] = []
    w = _rand(24, device=sdk_device, grad=True)
    for n in (5, 9, 13):
        x = _rand(n, 24, device=sdk_device, grad=True)
        with sdk.collect_reports() as compiled_now:
            actual, expected = C.run_both(rows, [x, w], compiled, True, C.seed_of(n))
        graphs += compiled_now.graphs
        C.assert_close(actual, expected, f"output or gradient (size {n})")
    if not symbolic or C.graph_level(sdk_plugin):
        pytest.skip(
            f"results right; sdk:{sdk_plugin} does not declare Capability.SYMBOLIC_SIZES"
            if not symbolic
            else "results right; a graph-level plugin compiles per partition"
        )
    kinds = {g.kind: g for g in graphs}
    assert set(kinds) == {"forward", "backward"}, [str(g) for g in graphs]
    for g in graphs:
        assert g.sizes.startswith("symbolic"), f"one program for every size expected:\n{g}"


# -- faults --------------------------------------------------------------------------


def _fault_input(plugin: str, device: str) -> torch.Tensor:
    x = _rand(16, 33, device=device)
    hook = "sdk_compile_subgraph" if C.graph_level(plugin) else "sdk_compile_kernels"
    if not C.implements(plugin, hook):
        pytest.skip(f"sdk:{plugin} compiles nothing here (no {hook})")
    _needs_kernels(C.explain(plugin, pointwise, x), plugin)
    return x


def pointwise(x):
    return torch.relu(x * 2.0) + 1.0


@pytest.mark.parametrize("where", ["render", "build"])
def test_fault_falls_back_and_strict_raises(sdk_plugin: str, sdk_device: str, where: str) -> None:
    """A kernel that fails to render or build: the graph runs through ATen, with the reason
    in explain and an ``sdk.PluginFallbackWarning`` naming it; ``debug=True`` raises the
    plugin's error, ``fallback=False`` an SDKError. A graph-level plugin's partition that
    fails to compile (``build``) runs in ATen."""
    x = _fault_input(sdk_plugin, sdk_device)
    if C.graph_level(sdk_plugin) and where == "render":
        pytest.skip(
            f"sdk:{sdk_plugin} is graph-level: it renders no kernels (its compile faults are "
            "the build case: sdk_compile_subgraph raises)"
        )
    with C.registry_with(sdk_plugin, C.faulty(sdk_plugin, where)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            report = C.explain(sdk_plugin, pointwise, x)
        _assert_fell_back(report, sdk_plugin)
        told = [w for w in seen if issubclass(w.category, sdk.PluginFallbackWarning)]
        if not any("fault injected" in str(w.message) for w in told):
            what = "a partition" if C.graph_level(sdk_plugin) else "a graph"
            pytest.fail(
                f"{what} sdk:{sdk_plugin} failed to compile fell back without an "
                "sdk.PluginFallbackWarning naming the reason; warnings given: "
                f"{[str(w.message) for w in seen] or 'none'}",
                pytrace=False,
            )
        _check(sdk_plugin, pointwise, x)
        # torch.compile wraps a backend's error (BackendCompilerFailed): read the chain
        strict = _error_of(pointwise, x, backend=sdk.backend(sdk_plugin, debug=True))
        _expect_error(
            strict,
            lambda e: isinstance(e, C.InjectedFault),
            "debug=True should raise the plugin's own error (the injected fault)",
        )
        nofallback = _error_of(pointwise, x, backend=sdk.backend(sdk_plugin, fallback=False))
        _expect_error(
            nofallback,
            lambda e: isinstance(e, sdk.SDKError) and "fault injected" in str(e),
            "fallback=False should raise an sdk.SDKError (sdk.LoweringError for a graph-level "
            "plugin's partition) whose message carries the plugin's error ('fault injected')",
        )


def _expect_error(chain: list[BaseException], wanted, expected: str) -> None:
    """Fail, saying what was expected and every error of ``chain`` in full, unless one of
    ``chain`` is ``wanted`` (not an assert: pytest would cut the message short)."""
    if any(wanted(e) for e in chain):
        return
    got = "\n".join(f"  {type(e).__module__}.{type(e).__qualname__}: {e}" for e in chain)
    got = got or "  no error: the compiled function ran"
    pytest.fail(f"expected: {expected}\ngot (the error and its causes):\n{got}", pytrace=False)


def _assert_fell_back(report: sdk.ExplainReport, plugin: str) -> None:
    """Nothing of ``report`` ran in ``plugin``'s code, and the injected fault is the reason."""
    if C.graph_level(plugin):
        parts = _partitions(report)
        assert parts and all(p.compiled_by == "aten" for p in parts), str(report)
        assert all("fault injected" in p.note for p in parts), str(report)
        return
    assert not report.kernels and report.fallbacks, str(report)
    assert any("fault injected" in f.reason for f in report.fallbacks), str(report)


def _error_of(fn, *args, backend) -> list[BaseException]:
    """The exception compiling and running ``fn`` raises, and its causes (none: it ran)."""
    C.reset()
    try:
        torch.compile(fn, backend=backend)(*args)
    except Exception as exc:  # noqa: BLE001 - what is raised is what the test checks
        chain: list[BaseException] = []
        e: BaseException | None = exc
        while e is not None and e not in chain:
            chain.append(e)
            e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
        return chain
    return []


def test_fault_chain_takes_over(sdk_plugin: str, sdk_device: str) -> None:
    """With ``chain``, the next codegen plugin compiles the graph (a graph-level plugin: the
    partition) this one failed."""
    x = _fault_input(sdk_plugin, sdk_device)
    others = [
        n
        for n in C.registry().usable_names((sdk.PluginKind.CODEGEN,))
        if n != sdk_plugin
        and C.implements(n, "sdk_compile_kernels")
        and C.device_for(n) == sdk_device
    ]
    if not others:
        pytest.skip(f"no other codegen plugin for {sdk_device} to chain to")
    with C.registry_with(sdk_plugin, C.faulty(sdk_plugin, "build")), warnings.catch_warnings():
        warnings.simplefilter("ignore", sdk.PluginFallbackWarning)  # (the fault's own)
        report = C.explain(sdk_plugin, pointwise, x, chain=(others[0],))
        if C.graph_level(sdk_plugin):
            parts = _partitions(report)
            assert parts and {p.compiled_by for p in parts} == {others[0]}, str(report)
        else:
            assert [g.plugin for g in report.graphs] == [others[0]], str(report)
        _check(sdk_plugin, pointwise, x, chain=(others[0],))


def test_fault_at_run_time_falls_back(sdk_plugin: str, sdk_device: str) -> None:
    """A kernel (a graph-level plugin's subgraph) that raises when run: the graph runs
    through ATen instead, says so in its report, and strict mode (``fallback=False``) raises
    the kernel's error."""
    x = _fault_input(sdk_plugin, sdk_device)
    with C.registry_with(sdk_plugin, C.faulty(sdk_plugin, "run")):
        _check(sdk_plugin, pointwise, x)
        report = C.explain(sdk_plugin, pointwise, x)
        assert report.fallbacks and any("raised when run" in f.reason for f in report.fallbacks), (
            f"the run-time fallback is not in the report:\n{report}"
        )
        C.reset()
        with pytest.raises(C.InjectedFault):
            torch.compile(pointwise, backend=sdk.backend(sdk_plugin, fallback=False))(x)


# -- cache ---------------------------------------------------------------------------


def _damage(path: Path, how: str, other: Path | None) -> None:
    """Replace ``path`` (a new file: a library loaded from it keeps its old pages)."""
    data = path.read_bytes()
    if how == "flip" and data:
        i = len(data) // 2
        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
    elif how == "truncate":
        data = data[: len(data) // 2]
    elif how == "foreign" and other is not None:
        data = other.read_bytes()
    mode = os.stat(path).st_mode & 0o777
    if how == "unsafe":  # intact, but writable by others: anyone could have planted it
        mode |= 0o022
    tmp = path.with_name(path.name + ".conformance")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def cached_a(x, y):
    return (x * torch.sigmoid(y)).sum(-1).relu()


def cached_b(x, y):
    return (x - y).abs() * 3.0


@pytest.mark.parametrize("how", ["flip", "truncate", "foreign", "unsafe"])
def test_cache_damaged_entries_are_misses(
    sdk_plugin: str, sdk_device: str, tmp_path: Path, how: str
) -> None:
    """Every file of the per-user cache (whole-graph programs and the plugin's own
    namespaces) damaged between two compiles (a flipped byte, cut in half, another entry's
    content, or made writable by others): the second compile is right, and stores again.
    A graph-level plugin's entries are its partition artifacts: one its ``sdk_load_subgraph``
    cannot rebuild is a miss too."""
    x, y = _rand(4, 7, device=sdk_device), _rand(4, 7, device=sdk_device)
    root = tmp_path / "cache"
    with C.environ(SDK_CACHE_DIR=str(root), SDK_GRAPH_CACHE="1"):
        first = C.explain(sdk_plugin, cached_a, x, y)
        C.explain(sdk_plugin, cached_b, x, y)
        files = sorted(p for p in root.rglob("*") if p.is_file())
        if not files:
            pytest.skip(
                f"sdk:{sdk_plugin} keeps nothing in the per-user cache "
                f"(whole-graph cache: {_cache_states(first, sdk_plugin)[0]})"
            )
        for i, p in enumerate(files):
            _damage(p, how, files[(i + 1) % len(files)] if len(files) > 1 else None)
        _check(sdk_plugin, cached_a, x, y)
        _check(sdk_plugin, cached_b, x, y)
        again = C.explain(sdk_plugin, cached_a, x, y)
        if _cache_states(first, sdk_plugin)[0] == "stored":
            assert set(_cache_states(again, sdk_plugin)) == {"hit"}, (
                f"after a damaged entry was rebuilt the next compile should hit:\n{again}"
            )


def _cache_states(report: sdk.ExplainReport, plugin: str) -> list[str]:
    """The whole-graph cache's answer for each graph (a graph-level plugin: each partition)."""
    if C.graph_level(plugin):
        return [p.cache for p in _own(report, plugin)] or ["no partition"]
    return [g.cache for g in report.graphs]


# -- outputs (graph-level plugins) ---------------------------------------------------


def transposed(x):
    return torch.sin(x.t()) * 2.0


def reduced(x):
    return (x.exp() * 0.5).sum(-1)


def test_outputs_keep_the_contract(sdk_plugin: str, sdk_device: str) -> None:
    """A graph-level plugin's partitions, in inference and training: each output has the
    sizes, dtype and strides of the output node's ``meta["val"]`` (a transposed result keeps
    its transposed strides), shares no input's storage unless ATen's run of the partition does
    or the plugin declared it (``CompiledSubgraph.aliases``), and no input is written but an
    output buffer the core passed (:func:`sdk.conformance.checking_outputs`)."""
    if not C.graph_level(sdk_plugin):
        pytest.skip("the output contract of partitions is for graph-level plugins")
    if not C.implements(sdk_plugin, "sdk_compile_subgraph"):
        pytest.skip(f"sdk:{sdk_plugin} compiles nothing here (no sdk_compile_subgraph)")
    module, violations = C.checking_outputs(sdk_plugin)
    with C.registry_with(sdk_plugin, module):
        for fn, grad in (
            (pointwise, False),
            (transposed, False),
            (reduced, False),
            (pointwise, True),
        ):
            _check(sdk_plugin, fn, _rand(8, 5, device=sdk_device, grad=grad), grad=grad)
    assert not violations, (
        f"sdk:{sdk_plugin}'s partitions broke the output contract "
        f"({len(violations)} time(s)):\n" + "\n".join(sorted(set(violations))[:20])
    )
