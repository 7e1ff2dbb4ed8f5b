"""An accumulation into a temporary that dies at the call (the zeros of an embedding backward)
runs ATen's in-place ``index_put_`` (``index_add_`` for a user's ``index_add``) over that
temporary: no copy of it first. Where the target is read again, is an output or a graph
input, the functional op (which copies) stays. A table of at most ``ONE_HOT_MAX_ROWS`` rows
accumulates through a product with the indices' one-hot matrix instead (deterministic, and
fast where many indices land on each row).

Each case is compared with eager on fresh random inputs; the program is read from
``sdk.explain``'s GraphReport.program (its steps).
"""

from __future__ import annotations

import importlib
import re
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F

import sdk
from sdk.core.lowering.movement import ONE_HOT_MAX_ROWS
from tests.plugins_under_test import PLUGINS, device_of

IN_PLACE = r"aten\.index_(?:put|add)_\.default"
ROWS = ONE_HOT_MAX_ROWS + 36  # a table accumulated by index_put


@contextmanager
def _deterministic(on: bool):
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)


def _wrappers(fn, *args, plugin):
    report = sdk.explain(fn, *args, backend=f"sdk:{plugin}", fallback=False)
    return report, "\n".join(g.program for g in report.graphs)


def _in_place_targets(program: str) -> list[str]:
    """The slots updated in place by index_add_ (a step ``_ = aten.index_add_(%N, ...)``: no
    output slot of its own), each checked to be a buffer the program allocated itself
    (``%N = empty``), never a graph input."""
    targets = re.findall(r"^\s*\d+\s+_ = " + IN_PLACE + r"\((%\d+), ", program, re.M)
    for t in targets:
        assert re.search(rf"^\s*\d+\s+{t} = empty ", program, re.M), program
    return targets


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("deterministic", [False, True])
def test_embedding_backward_accumulates_into_its_zeros(plugin, dtype, deterministic):
    dev = device_of(plugin)
    n, d = ROWS, 24
    idx = torch.randint(0, n, (6, 9), device=dev)
    idx[0, :4] = 3  # repeated indices: several rows add into one
    w = torch.randn(n, d, device=dev, dtype=dtype)
    up = torch.randn(6, 9, d, device=dev, dtype=dtype)

    def fn(i, weight, g):
        return (F.embedding(i, weight) * g).sum()

    with _deterministic(deterministic):
        wc = w.clone().requires_grad_()
        we = w.clone().requires_grad_()
        torch.compile(fn, backend=sdk.backend(plugin, fallback=False))(idx, wc, up).backward()
        fn(idx, we, up).backward()
        report, wrapper = _wrappers(fn, idx, w.clone().requires_grad_(), up, plugin=plugin)
    if dtype == torch.float32:
        torch.testing.assert_close(wc.grad, we.grad)
    else:
        # the sums run in fp32 and are rounded once (eager's may round more often): within
        # half a bf16 step of the fp64 sums, and within eager's rounding of eager
        wr = w.double().requires_grad_()
        fn(idx, wr, up.double()).backward()
        torch.testing.assert_close(wc.grad.double(), wr.grad, rtol=2**-8, atol=1e-6)
        torch.testing.assert_close(wc.grad, we.grad, rtol=2e-2, atol=1e-1)
    ops = {e.op for e in report.externs}
    # with or without deterministic algorithms, the call that adds each row in index order
    # on the device, in place (the report names what runs: the in-place form): index_put's
    # sorting kernel on CUDA (never index_add's atomics); index_add on the CPU, whose
    # index_put adds in a thread-dependent order (Preferences.ordered_index_add)
    module = importlib.import_module(f"sdk.plugins.{plugin}")
    if getattr(module, "sdk_preferences", sdk.Preferences)().ordered_index_add:
        assert "aten.index_add_.default" in ops and "aten.index_put_.default" not in ops, ops
    else:
        assert "aten.index_put_.default" in ops and "aten.index_add.default" not in ops, ops
    assert len(_in_place_targets(wrapper)) == 1, wrapper


def _check(fn, args, plugin, in_place: int):
    before = [a.clone() for a in args]
    got = torch.compile(fn, backend=sdk.backend(plugin, fallback=False))(*args)
    for a, b in zip(args, before):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # inputs never written
    torch.testing.assert_close(got, fn(*args))
    _, wrapper = _wrappers(fn, *args, plugin=plugin)
    assert len(_in_place_targets(wrapper)) == in_place, wrapper


def _acc(x, i, vals):
    return torch.index_put(x, (i,), vals, accumulate=True)


# a fresh temporary dying at the call: in place
def _zeros(a, i, v, v2):
    return _acc(torch.zeros_like(a), i, v * 2)


def _temporary(a, i, v, v2):
    return _acc(a * 2, i, v) + 1


def _index_add_alpha(a, i, v, v2):
    return (a * 2).index_add(0, i % a.shape[0], v, alpha=3)


# read again, returned, or the caller's: the functional op, which copies
def _input(a, i, v, v2):
    return _acc(a, i, v)


def _output(a, i, v, v2):
    b = a * 2
    return _acc(b, i, v), b


def _view_output(a, i, v, v2):
    b = a * 2
    return _acc(b, i, v), b[2:]


def _read_after(a, i, v, v2):
    b = a * 2
    return _acc(b, i, v) * b


# one target, two accumulations: the first copies, the last may run in place
def _two_accumulations(a, i, v, v2):
    b = a * 2
    return _acc(b, i, v), _acc(b, (i + 3) % a.shape[0], v2)


CASES = {
    _zeros: 1,
    _temporary: 1,
    _index_add_alpha: 1,
    _input: 0,
    _output: 0,
    _view_output: 0,
    _read_after: 0,
    _two_accumulations: 1,
}


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("fn", list(CASES), ids=lambda f: f.__name__.lstrip("_"))
def test_accumulation_target(plugin, fn):
    dev = device_of(plugin)
    a = torch.randn(ROWS, 7, device=dev)
    i = torch.randint(-ROWS, ROWS, (12,), device=dev)
    i[:3] = 4  # repeated indices
    v, v2 = torch.randn(12, 7, device=dev), torch.randn(12, 7, device=dev)
    _check(fn, (a, i, v, v2), plugin, CASES[fn])


def test_the_in_place_program_round_trips_through_the_graph_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    args = (torch.randn(ROWS, 7), torch.randint(-ROWS, ROWS, (12,)), torch.randn(12, 7), None)
    caches = []
    for _ in range(2):
        torch._dynamo.reset()
        report = sdk.explain(_zeros, *args, backend="sdk:cpu_cpp")
        caches += [g.cache for g in report.graphs]
        assert len(_in_place_targets(report.graphs[0].program)) == 1
    assert caches == ["stored", "hit"]
    torch._dynamo.reset()
    compiled = torch.compile(_zeros, backend="sdk:cpu_cpp")
    for _ in range(2):
        args = (torch.randn(ROWS, 7), torch.randint(-ROWS, ROWS, (12,)), torch.randn(12, 7), None)
        torch.testing.assert_close(compiled(*args), _zeros(*args))


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_small_table_sums_through_a_one_hot_product(plugin, dtype):
    """T5's relative-position bias: 32 rows under 64x64 indices (128 per row on average),
    negative indices among them. The sums are exact before their one rounding: within half
    a step of the fp64 sums; the same bits twice; an index out of range raises as in eager."""
    dev = device_of(plugin)
    n = 32
    x = torch.randn(n, 12, device=dev, dtype=dtype)
    i = torch.randint(-n, n, (64, 64), device=dev)
    v = torch.randn(64, 64, 12, device=dev, dtype=dtype)
    compiled = torch.compile(_acc, backend=sdk.backend(plugin, fallback=False))
    got = compiled(x, i, v)
    ref = _acc(x.double(), i, v.double())
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got.double(), ref, rtol=eps, atol=1e-6)
    assert torch.equal(compiled(x, i, v), got)
    report = sdk.explain(_acc, x, i, v, backend=sdk.backend(plugin, fallback=False))
    ops = {e.op for e in report.externs}
    assert ops == {"aten.mm.default"}, ops
    bad = i.clone()
    bad[3, 5] = n
    if plugin == "cpu_cpp":  # (Triton's checks assert on the device, or in its interpreter)
        with pytest.raises(IndexError, match="out of bounds"):
            compiled(x, bad, v)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_an_embedding_gradient_has_the_same_bits_in_every_run(plugin):
    """Thousands of indices into hundreds of rows, ten compiled steps: one result. (On the
    2-core CPU, ATen's index_put gave 8 results in 10 runs here: it splits the indices
    over threads; index_add adds them in order.)"""
    dev = device_of(plugin)
    if dev == "cpu" and plugin == "cuda_triton":
        pytest.skip("cuda_triton's accumulation is CUDA's: on CPU tensors it is the CPU's ATen")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 500, (64, 64), generator=g).to(dev)
    w0, up = torch.randn(500, 64, generator=g).to(dev), torch.randn(64, 64, 64, generator=g).to(dev)

    def fn(i, w, u):
        return (F.embedding(i, w) * u).sum()

    compiled = torch.compile(fn, backend=sdk.backend(plugin, fallback=False))
    grads = []
    for _ in range(10):
        w = w0.clone().requires_grad_()
        compiled(ids, w, up).backward()
        grads.append(w.grad)
    assert all(torch.equal(grads[0], other) for other in grads[1:])
    we = w0.clone().requires_grad_()
    fn(ids, we, up).backward()
    torch.testing.assert_close(grads[0], we.grad)
