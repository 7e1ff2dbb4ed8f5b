"""The step interpreter (core/interp.py): the Python executor of the native runner's steps.

Hand-written programs run through both executors, bit for bit; compiled graphs of every
kind run with ``options={"runner": "check"}`` (core/crosscheck.py), which runs each call
through the runner and the interpreter on copies of the inputs and raises on any
difference, and the results are compared with eager.
"""

from __future__ import annotations

import copy

import pytest
import torch

import sdk
from sdk.core import crosscheck, interp, isa, native
from sdk.core import steps as st
from sdk.core.wrapper import Wrapper, _mark_writes, _vendor_result, inputs_written
from tests import models

aten = torch.ops.aten
needs_runner = pytest.mark.skipif(
    native.module() is None, reason=f"the native runner does not build here: {native.why_not()}"
)


def _both(steps, n_slots, constants=None, n_regs=0, named=None):
    """The interpreter's and the runner's programs of ``steps`` (the wrapper's form)."""
    w = Wrapper(
        steps, n_slots, n_regs, named or {}, constants or {}, "cpu", frozenset(), frozenset()
    )
    mine = interp.program(
        steps,
        n_slots,
        w.constants,
        torch.device("cpu"),
        _mark_writes,
        n_regs=n_regs,
        named=w.named,
        check_result=_vendor_result,
    )
    return mine, w._native()


def _scaled(t, k=1):
    """A plugin's own library function (a CALL_PY's)."""
    return t * k


def _bits(a, b):
    assert type(a) is type(b)
    if not isinstance(a, torch.Tensor):
        assert a == b
        return
    assert (a.dtype, a.shape, a.stride(), a.storage_offset()) == (
        b.dtype,
        b.shape,
        b.stride(),
        b.storage_offset(),
    )
    assert torch.equal(crosscheck._bits(a), crosscheck._bits(b))


# every opcode and argument kind the wrapper writes, by hand: slots 0, 1 inputs (x (4, 6)
# float, i (3,) int64), 2 a constant; input 2 an int (5); registers r0 = x.size(1) (6),
# r1 = 5, r2 = (r0 * r1) % 7 (2)
_PROGRAM = [
    (st.INPUT, 0, 0),
    (st.INPUT, 1, 1),
    (st.CONST, 2, "c", False),
    (st.INPUT_SIZE, 0, 0, 0, 1),
    (st.INPUT_INT, 1, 2),
    (
        st.EXPR,
        2,
        [(st.TERM_REG, 0), (st.TERM_REG, 1), (st.TERM_MUL,), (st.TERM_LIT, 7), (st.TERM_MOD,)],
    ),
    (st.EMPTY, 17, [(0,)], [1], torch.float32, "cpu"),  # r0 elements
    (st.CALL, aten.fill_.Scalar, [(st.SLOT, 17), (st.VALUE, 1.5)], [], False),
    (st.VIEW, 18, 17, [(2,)], [(1,)], 0),  # sizes and strides from registers
    (
        st.CALL,
        aten.narrow.default,
        [(st.SLOT, 0), (st.VALUE, 1), (st.REG, 2), (st.VALUE, 3)],
        [19],
        False,
    ),
    (st.CALL, aten.view.default, [(st.SLOT, 17), (st.INTS, [(2,), 3])], [20], False),
    (
        st.CALL_PY,
        "_x0",
        [(st.SLOT, 17), (st.REG, 1)],
        ["k"],
        [21],
        False,
        [(st.SPEC_TENSOR, [(0,)], [1], torch.float32, "cpu")],
        "the test's _scaled",
    ),
    (st.EMPTY, 3, [8], [1], torch.float32, "cpu"),
    (st.VIEW, 4, 3, [2, 3], [3, 1], 2),  # storage reinterpreted at +2, no view record
    (st.CALL, aten.fill_.Scalar, [(st.SLOT, 3), (st.VALUE, 0.5)], [], False),
    (st.AS_STRIDED, 5, 0, [3, 2], [1, 6], 1, True),  # relative to x's offset
    (st.AS_STRIDED, 6, 0, [2], [7], 0, False),  # absolute: the diagonal
    (st.CALL, aten.add.Tensor, [(st.SLOT, 5), (st.NUMBER, 2), (st.DEFAULT,)], [7], False),
    (st.CALL, aten.add.Tensor, [(st.SLOT, 1), (st.NUMBER, 2.5), (st.VALUE, 3)], [8], False),
    (st.CALL, aten.split.Tensor, [(st.SLOT, 0), (st.VALUE, 2), (st.VALUE, 1)], [9, -1, 10], True),
    (st.CALL, aten.max.dim, [(st.SLOT, 0), (st.VALUE, 1), (st.DEFAULT,)], [11, 12], True),
    (st.CALL, aten.cat.default, [(st.TENSORS, [9, 10]), (st.VALUE, 1)], [13], False),
    (
        st.CALL,
        aten.index.Tensor,
        [(st.SLOT, 0), (st.OPTIONAL_TENSORS, [-1, 1])],
        [14],
        False,
    ),
    (st.RESTRIDE, 13, [0, 1], [1, 4]),  # (4, 4) row-major into column-major
    (st.ALIAS, 15, 13),
    (st.FREE, 13),
    (st.CALL, aten.mul.Tensor, [(st.SLOT, 2), (st.SLOT, 15)], [16], False),
    (st.WRITES, [0]),
    (st.CALL, aten.mul_.Scalar, [(st.SLOT, 0), (st.VALUE, 3)], [], False),
    (
        st.RETURN,
        [(0, 4), (0, 6), (0, 7), (0, 8), (0, 11), (0, 12), (0, 14), (0, 15), (0, 16), (1, 7)]
        + [(0, 18), (0, 19), (0, 20), (0, 21), (st.ITEM_REG, 2)],
    ),
]


@needs_runner
def test_every_opcode_as_the_runner_runs_it_bit_for_bit():
    const = {"c": torch.randn(4, 4)}
    mine, theirs = _both(_PROGRAM, 22, const, n_regs=3, named={"_x0": _scaled})

    def args():
        torch.manual_seed(0)
        return [torch.randn(4, 6), torch.tensor([0, 3, 1]), 5]

    a, b = args(), args()
    got, want = mine(a), theirs(b)
    assert len(got) == len(want) == 15
    for x, y in zip(got, want, strict=True):
        _bits(x, y)
    for x, y in zip(a, b, strict=True):
        _bits(x, y)
    assert got[0]._base is None  # VIEW: no view record
    assert got[1]._base is a[0]  # AS_STRIDED: a real view
    assert got[3].dtype == torch.float32  # an int tensor + 2.5: a wrapped number (as eager)
    assert got[7].stride() == (1, 4)  # restrided
    torch.testing.assert_close(got[2], a[0].as_strided((3, 2), (1, 6), 1) / 3 + 2)
    assert got[10].shape == (2,) and got[10].stride() == (5,)  # VIEW: registers r2, r1
    assert got[11].shape == (4, 3) and got[12].shape == (2, 3)  # REG and INTS arguments
    torch.testing.assert_close(got[13], torch.full((6,), 7.5))  # CALL_PY, k=5 by keyword
    assert got[14] == 2  # a register returned, an int


@needs_runner
def test_a_size_where_the_schema_takes_a_tensor_is_a_wrapped_number_in_both():
    """``x + x.size(1)`` run by ATen (BEiT's relative positions on the host under torch 2.11,
    beside a GPU's kernels): ``aten.add.Tensor`` takes a Tensor, the program gives a
    register. As torch's Python binding does, both executors pass a wrapped number, which
    takes no part in type promotion: a float16 or int32 tensor plus a size keeps its dtype.
    The runner pushed the int itself ("Expected Tensor but got Int")."""
    program = [
        (st.INPUT, 0, 0),
        (st.INPUT, 1, 1),
        (st.INPUT_SIZE, 0, 0, 0, 1),
        (st.CALL, aten.add.Tensor, [(st.SLOT, 0), (st.REG, 0), (st.DEFAULT,)], [2], False),
        (st.CALL, aten.mul.Tensor, [(st.SLOT, 1), (st.REG, 0)], [3], False),
        (st.CALL, aten.add.Tensor, [(st.SLOT, 1), (st.REG, 0), (st.VALUE, 2)], [4], False),
        (st.RETURN, [(0, 2), (0, 3), (0, 4)]),
    ]
    mine, theirs = _both(program, 5, n_regs=1)
    for x, i in (
        (torch.randn(4, 6, dtype=torch.float16), torch.arange(3, dtype=torch.int32)),
        (torch.randn(2, 9), torch.arange(5)),
    ):
        want = [x + x.size(1), i * x.size(1), i + 2 * x.size(1)]
        for got in (mine([x, i]), theirs([x, i])):
            for g, w in zip(got, want, strict=True):
                _bits(g, w)


@needs_runner
def test_a_failure_after_a_write_marks_the_written_inputs_in_both():
    program = [
        (st.INPUT, 0, 0),
        (st.INPUT, 1, 1),
        (st.INPUT, 2, 2),
        (st.CALL, aten.add_.Scalar, [(st.SLOT, 0), (st.VALUE, 1), (st.DEFAULT,)], [], False),
        (st.WRITES, [0]),
        (
            st.CALL,
            aten.index_select.default,
            [(st.SLOT, 1), (st.VALUE, 0), (st.SLOT, 2)],
            [3],
            False,
        ),
        (st.RETURN, [(0, 3)]),
    ]
    for fn in _both(program, 4):
        state, table = torch.zeros(4), torch.randn(5, 3)
        inputs_written()
        fn([state, table, torch.tensor([0, 1])])
        assert inputs_written() == ()  # a call that returned marks nothing
        with pytest.raises(IndexError, match="out of range"):
            fn([state, table, torch.tensor([0, 7])])
        assert inputs_written() == (0,)
        torch.testing.assert_close(state, torch.full((4,), 2.0))


def test_steps_are_checked_before_any_runs():
    bad = [(st.INPUT, 0, 0), (st.RETURN, [(0, 5)])]
    with pytest.raises(ValueError, match=r"step 1 .*out of range"):
        interp.program(bad, 2, {}, torch.device("cpu"), _mark_writes)
    good = [(st.INPUT, 0, 0), (st.RETURN, [(0, 0)])]
    with pytest.raises(ValueError, match="written for ISA version"):
        interp.program(good, 1, {}, torch.device("cpu"), _mark_writes, isa.VERSION + 1)
    with pytest.raises(ValueError, match="constant 'nope'"):
        program = [(st.CONST, 0, "nope", False), (st.RETURN, [(0, 0)])]
        interp.program(program, 1, {}, torch.device("cpu"), _mark_writes)


def test_an_alias_is_dropped_only_where_neither_slot_changes_later():
    x = torch.randn(3)
    kept = [
        (st.INPUT, 0, 0),
        (st.ALIAS, 1, 0),
        (st.FREE, 0),  # the source slot freed: the alias must keep the tensor
        (st.RETURN, [(0, 1)]),
    ]
    assert [s[0] for _, s in interp._without_aliases(kept)].count(st.ALIAS) == 1
    assert interp.program(kept, 2, {}, torch.device("cpu"), _mark_writes)([x])[0] is x
    dropped = [(st.INPUT, 0, 0), (st.ALIAS, 1, 0), (st.RETURN, [(0, 1)])]
    assert [s for _, s in interp._without_aliases(dropped)][-1] == (st.RETURN, [(0, 0)])


# ---- compiled graphs under runner="check": runner and interpreter equal, both right ----


def _checked(fn, *args, explained=None, **options):
    """``fn(*args)`` compiled with runner="check"; ``sdk.explain`` runs ``explained`` (a
    copy of ``fn`` with state of its own), else ``fn`` on copies of the args."""
    torch._dynamo.reset()
    backend = sdk.backend("cpu_cpp", runner="check", cache=False, **options)
    report = sdk.explain(explained or fn, *copy.deepcopy(args), backend=backend)
    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend)(*args)
    assert report.graphs and all(g.runner.startswith("check") for g in report.graphs), [
        g.runner for g in report.graphs
    ]
    return out


def _training(model, x):
    def step(x):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss.detach()

    return step


@needs_runner
@pytest.mark.parametrize(
    "build",
    [
        lambda: (models.mlp(32, 64, 8, layernorm=True, seed=0), torch.randn(16, 32)),
        lambda: (
            models.convnet(3, 8, 16, padding=(1, 0), maxpool_after=(0,), seed=0).train(),
            torch.randn(4, 3, 16, 16),
        ),
    ],
    ids=["mlp", "convnet"],
)
def test_training_steps_cross_checked(build):
    model, x = build()
    ref, other = copy.deepcopy(model), copy.deepcopy(model)
    loss = _checked(_training(model, x), x, explained=_training(other, x))
    want = _training(ref, x)(x)
    torch.testing.assert_close(loss, want)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    for b, c in zip(model.buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(b, c)  # BatchNorm's running statistics: written in place


@needs_runner
def test_in_place_inputs_views_and_multi_output_calls_cross_checked():
    def f(buf, idx, x):
        buf.add_(1)
        y = x.t()[1:] * 2  # a view of an input at an offset
        buf[idx] = y.sum(1)[: idx.numel()]  # index_put_ into the input
        a, b = torch.topk(x, 2, dim=1)  # a library call of two outputs
        parts = torch.split(x @ x.t(), 2)  # a list of views of one result
        return y, buf.view(2, -1), a, b, parts[1], x[1:3]

    def args():
        torch.manual_seed(1)
        return torch.randn(8), torch.tensor([0, 3, 5]), torch.randn(6, 5)

    a, b = args(), args()
    got = _checked(f, *a)
    want = f(*b)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a, b)


@needs_runner
def test_dropout_cross_checked_same_seed_same_bits():
    def f(x, w):
        return (torch.nn.functional.dropout(x @ w, 0.5, training=True) + 1).relu()

    x, w = torch.randn(16, 32), torch.randn(32, 32)
    torch.manual_seed(7)
    first = _checked(f, x, w)
    after = torch.rand(4)
    torch.manual_seed(7)
    second = _checked(f, x, w)
    assert torch.equal(first, second) and torch.equal(after, torch.rand(4))
    assert (first == 0).any()


@needs_runner
def test_an_op_chain_unfused_and_a_warm_start_cross_checked(tmp_path, monkeypatch):
    """A chain of pointwise ops, one kernel each (the memory plan reuses buffers: ALIAS
    steps, which the interpreter drops), and a program from the whole-graph cache."""

    def f(x):
        h = torch.nn.functional.gelu(x @ x.t())
        for k in range(4):
            h = (h * 1.5 + k).sin().relu() * h
        return h.softmax(-1).sum(0), h.amax(1)

    # (small values: sin's argument stays near 0, where a vectorized sin and libm's agree to
    # fp32's default tolerance; an unseeded draw failed it now and then)
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(0)) / 4
    torch.testing.assert_close(_checked(f, x, fusion=False), f(x))
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    backend = sdk.backend("cpu_cpp", runner="check")
    for cache in ("stored", "hit"):
        torch._dynamo.reset()
        report = sdk.explain(f, x, backend=backend)
        assert [g.cache for g in report.graphs] == [cache]
        assert report.graphs[0].runner.startswith("check")
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(f, backend=backend)(x), f(x))


@needs_runner
def test_the_check_raises_on_a_difference(monkeypatch):
    """An interpreter that drifted (its first output one ulp off) is caught, by name, and
    not hidden by the fallback to ATen."""
    real = interp.program

    def drifted(*args, **kwargs):
        call = real(*args, **kwargs)

        def off(inputs):
            out = call(inputs)
            return (torch.nextafter(out[0], out[0] + 1), *out[1:])

        return off

    monkeypatch.setattr(interp, "program", drifted)
    torch._dynamo.reset()
    f = torch.compile(
        lambda x: x.sin() * 2, backend=sdk.backend("cpu_cpp", runner="check", cache=False)
    )
    with pytest.raises(crosscheck.RunnerMismatch, match="output 0: the bits differ"):
        f(torch.randn(8))


# ---- SDK_RUNNER=check: every compile of a process under the check ----


def test_sdk_runner_sets_the_runner_default_and_an_option_wins(monkeypatch):
    from sdk.core.options import resolve
    from sdk.errors import OptionError

    info = sdk.PluginInfo(name="p", version="1", hook_api=4, device_types=("cpu",))
    monkeypatch.setenv("SDK_RUNNER", "check")
    assert resolve(info, None, {}).core.runner == "check"
    assert resolve(info, None, {"runner": "native"}).core.runner == "native"
    monkeypatch.setenv("SDK_RUNNER", "both")
    with pytest.raises(OptionError, match=r"SDK_RUNNER.*'native', 'python' or 'check'.*'both'"):
        resolve(info, None, {})
    monkeypatch.delenv("SDK_RUNNER")
    assert resolve(info, None, {}).core.runner == "native"


def _mutating(buf, idx, x):
    buf.add_(1)
    buf[idx] = (x * 2).sum(1)[: idx.numel()]
    return buf.view(2, -1) * x.mean()


def _chain_f(x):
    return torch.nn.functional.gelu(x @ x.t()).softmax(-1)


def _tanh_f(x):  # split by the chain: picky refuses tanh, cpu_cpp takes it
    return (torch.tanh(x @ x.t()) * 2 + 1).sin().sum(1)


#: cpu_cpp's codegen that refuses tanh (tests/core/test_chain.py's)
_PICKY = """
    from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

    @sdk.hookimpl
    def sdk_op_support(ctx, op, node):
        return sdk.Support.no("picky takes no tanh") if "tanh" in str(op) else None
"""


#: the suite's kinds of graph: (name, fn, args, backend options, torch.compile's dynamic)
_KINDS = [
    ("training", None, (torch.randn(16, 32),), {}, None),
    ("dynamic", _chain_f, (torch.randn(6, 5),), {}, True),
    ("mutation", _mutating, (torch.randn(8), torch.tensor([0, 3]), torch.randn(4, 5)), {}, None),
    ("chain", _tanh_f, (torch.randn(6, 5),), {"chain": ["cpu_cpp"]}, None),
    ("warm start", _chain_f, (torch.randn(6, 5),), {"cache": True}, None),
]


def _fresh(fn):
    """``fn``, or (None) a training step of a fresh MLP of its own."""
    return fn or _training(models.mlp(32, 64, 8, layernorm=True, seed=0), None)


def _drift(monkeypatch):
    """The interpreter of every program materialized from now on one ulp off on its first
    float output: what the check must catch wherever it runs."""
    real = interp.program

    def drifted(*args, **kwargs):
        call = real(*args, **kwargs)

        def off(inputs):
            out = list(call(inputs))
            k = next(i for i, t in enumerate(out) if t is not None and t.is_floating_point())
            out[k] = torch.nextafter(out[k], out[k] + 1)
            return out

        return off

    monkeypatch.setattr(interp, "program", drifted)


@needs_runner
@pytest.mark.parametrize("kind", _KINDS, ids=[k[0] for k in _KINDS])
def test_sdk_runner_check_checks_every_kind_of_graph_or_says_why_not(
    kind, monkeypatch, tmp_path, request
):
    """Under SDK_RUNNER=check (no runner option given), each kind of the suite's graphs is
    either checked (its report says so, its result is eager's, and an interpreter one ulp
    off is caught) or its report says "not checked" and why: never a silent pass. Dynamic
    graphs have no steps yet (symbolic sizes): not checked until the steps take them."""
    name, fn, args, options, dynamic = kind
    monkeypatch.setenv("SDK_RUNNER", "check")
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1" if options.get("cache") else "0")
    plugin = "cpu_cpp"
    if name == "chain":  # (a graph split in two partitions, each a program of its own)
        make_plugin, fake_dist = (request.getfixturevalue(f) for f in ("make_plugin", "fake_dist"))
        picky = make_plugin(_PICKY, name="picky")
        request.getfixturevalue("use_registry")(fake_dist("acme-chain", {"picky": picky}))
        plugin = "picky"
    backend = sdk.backend(plugin, **options)
    for cache in ("stored", "hit") if options.get("cache") else ("",):
        torch._dynamo.reset()
        report = sdk.explain(_fresh(fn), *copy.deepcopy(args), backend=backend, dynamic=dynamic)
        assert [g.cache for g in report.graphs] == [cache] * len(report.graphs) or not cache
    runners = [r for g in report.graphs for r in _runners(g)]
    assert runners and all(runners), report
    assert name != "chain" or len(runners) >= 2, runners  # (its partitions)
    checked = all(r.startswith("check") for r in runners)
    if name == "dynamic":
        assert checked or all("not checked by runner='check': " in r for r in runners), runners
    else:
        assert checked, runners
    torch._dynamo.reset()
    got = torch.compile(_fresh(fn), backend=backend, dynamic=dynamic)(*copy.deepcopy(args))
    torch.testing.assert_close(got, _fresh(fn)(*copy.deepcopy(args)))
    _drift(monkeypatch)
    torch._dynamo.reset()
    compiled = torch.compile(_fresh(fn), backend=backend, dynamic=dynamic)
    if checked:
        with pytest.raises(crosscheck.RunnerMismatch, match="the bits differ"):
            compiled(*copy.deepcopy(args))
    else:
        compiled(*copy.deepcopy(args))  # (the interpreter alone ran: nothing to compare)


def _runners(graph):
    """What runs ``graph``'s programs: its own, or its chain partitions'."""
    return [graph.runner] if graph.runner else [p.runner for p in graph.partitions]


@needs_runner
def test_a_program_the_runner_cannot_take_is_reported_not_checked_by_name(monkeypatch):
    """Where torch traces linalg.inv's error check as an effectful op (``with_effects``, on
    torch 2.13; 2.11 traces no such op), that op has no CALL form: a Python call in the steps
    (stepwriter.Packed), which the interpreter runs alone, and the report names the op, not
    an object's address. Without it, the graph is checked."""
    monkeypatch.setenv("SDK_RUNNER", "check")

    def f(x):
        return torch.linalg.inv(x @ x.t() + 6 * torch.eye(6)).sin()

    x = torch.randn(6, 5)
    report = sdk.explain(f, x, backend=sdk.backend("cpu_cpp", cache=False))
    (graph,) = report.graphs
    if any("with_effects" in fb.op for fb in graph.fallbacks):
        why = "with_effects is not an ATen op"
        assert graph.runner == f"python: not checked by runner='check': {why}", graph.runner
        assert f"(not checked by runner='check': {why}" in report.text(verbose=True)
    else:
        assert graph.runner.startswith("check: "), graph.runner
    torch.testing.assert_close(torch.compile(f, backend="sdk:cpu_cpp")(x), f(x))


class _Unprintable(Exception):
    def __str__(self):
        raise ValueError("the __str__ of a vendor's exception raised")


def test_the_check_compares_errors_whose_message_cannot_be_printed():
    """Both executors raising an exception whose ``str()`` raises: the runner's own error
    goes on (the wrap stage names it), not a ValueError from the comparison."""
    raised = _Unprintable()

    def fail(args):
        raise raised

    call = crosscheck.cross_checked(fail, lambda args: fail(args), torch.device("cpu"), "g")
    with pytest.raises(_Unprintable) as info:
        call([torch.ones(2)])
    assert info.value is raised
    other = crosscheck.cross_checked(fail, lambda args: [args[0] * 2], torch.device("cpu"), "g")
    with pytest.raises(crosscheck.RunnerMismatch, match="raised _Unprintable: <unprintable"):
        other([torch.ones(2)])


def test_the_check_compares_meta_tensors_by_layout():
    """Tensors on meta hold no bytes: their layouts are compared (a graph that moves a value
    to meta gave way to ATen under the check: torch.equal has no meta kernel)."""

    def make(shape):
        return lambda args: [args[0].to("meta").expand(*shape)]

    x = torch.randn(1, 4).to("meta")
    same = crosscheck.cross_checked(make((3, 4)), make((3, 4)), torch.device("cpu"), "g")
    (out,) = same([x])
    assert out.is_meta and out.shape == (3, 4)
    other = crosscheck.cross_checked(make((3, 4)), make((2, 4)), torch.device("cpu"), "g")
    with pytest.raises(crosscheck.RunnerMismatch, match=r"output 0: .*native.*interpreter"):
        other([x])


def _sum_into(*bufs):
    """A kernel of any arity: the last buffer := the sum of the others."""
    bufs[-1].copy_(torch.stack(bufs[:-1]).sum(0))


def _joined(pair, opts):
    """A library function whose arguments no CALL step passes (a tuple of tensors inside a
    list, a dict), returning a tensor and a number."""
    return torch.cat(pair, dim=opts["dim"]) * opts["k"], len(pair)


def test_a_program_the_runner_cannot_take_is_still_steps_the_interpreter_runs():
    """A program is always steps: a LAUNCH over the runner's argument cap and a Python call
    with nested arguments (stepwriter.Packed: a CALL_PY of the leaves) run in the
    interpreter (the runner not tried: ``native_why`` says why), with the same results as
    the Python calls themselves."""
    from sdk.core.stepwriter import Packed, _flatten

    n = isa.MAX_LAUNCH_ARGS + 4
    leaves: list = []
    shape = _flatten(([("a", "b")], {"opts": {"dim": "d", "k": 2.0}}), leaves)
    assert leaves == ["a", "b", "d", 2.0]
    steps = [(st.INPUT, k, k) for k in range(n)]
    steps += [
        (st.EMPTY, n, [3], [1], torch.float32, "cpu"),
        (st.LAUNCH, _sum_into, list(range(n + 1)), [], "k_sum"),
        (
            st.CALL_PY,
            "_c0",
            [(st.SLOT, n), (st.SLOT, 0), (st.VALUE, 0), (st.VALUE, 2.0)],
            [],
            [n + 1, n + 2],
            True,
            [(st.SPEC_ANY,), (st.SPEC_ANY,)],
            "the test's _joined",
        ),
        (st.RETURN, [(st.ITEM_SLOT, n + 1), (st.ITEM_SLOT, n + 2)]),
    ]
    why = f"kernel k_sum: {n} arguments, over the runner's {isa.MAX_LAUNCH_ARGS}"
    w = Wrapper(
        steps,
        n + 3,
        0,
        {"_c0": Packed(_joined, shape)},
        {},
        "cpu",
        frozenset(),
        frozenset(),
        native_why=why,
    )
    call = w.materialize("g", runner="native")
    assert getattr(call, "interpreted", False) and w.native_why == why
    xs = [torch.randn(3) for _ in range(n)]
    out, count = call(xs)
    total = torch.stack(xs).sum(0)
    torch.testing.assert_close(out, torch.cat((total, xs[0])) * 2.0)
    assert count == 2  # a number result, as the function returned it
    st.check(steps, n + 3, form="written")  # (the interpreter has no cap)
