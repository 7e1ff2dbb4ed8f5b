"""Symbolic sizes: one program for every value of a dynamic dimension.

With ``dynamic=True`` (or once Dynamo has seen a size change) a graph's sizes are
symbolic. A plugin that declares ``Capability.SYMBOLIC_SIZES`` gets kernels whose sizes
are expressions over size symbols, passed as arguments at each call, so a serving loop
over many sizes compiles once. Everything is compared with eager on fresh inputs at
every size; what was compiled is checked through ``GraphReport.sizes`` and a count of
program builds.
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch

import sdk
import sdk.ir
from tests import models
from tests.plugins_under_test import PLUGINS, device_of, skip_model_under_interpreter

pytestmark = pytest.mark.parametrize("plugin", PLUGINS)


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A transformer-ish block: pointwise, a row softmax and a row sum."""
    h = torch.nn.functional.gelu(x * w + 1.0)
    return torch.softmax(h, -1) * h.sum(-1, keepdim=True)


def test_twenty_batch_sizes_compile_at_most_two_programs(plugin, builds, graph_reports):
    dev = device_of(plugin)
    f = torch.compile(block, backend=sdk.backend(plugin), dynamic=True)
    w = torch.randn(64, device=dev)
    sizes = [1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 33, 64, 65, 100, 127, 128, 200, 255, 257]
    for n in sizes:
        x = torch.randn(n, 64, device=dev)
        torch.testing.assert_close(f(x, w), block(x, w))
    assert len(builds) <= 2, builds  # Dynamo's own graph for size 1, and one for the rest
    symbolic = [g for g in graph_reports if g.sizes.startswith("symbolic")]
    assert symbolic, [g.sizes for g in graph_reports]
    assert not [fb for g in graph_reports for fb in g.fallbacks]


def test_training_forward_and_backward_are_symbolic(plugin, builds, graph_reports):
    dev = device_of(plugin)
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    ).to(dev)
    h = torch.compile(m, backend=sdk.backend(plugin), dynamic=True)
    for n in (3, 6, 11, 40):
        x = torch.randn(n, 8, device=dev, requires_grad=True)
        got = h(x)
        grads = torch.autograd.grad(got.square().sum(), [x, *m.parameters()])
        want = m(x)
        ref = torch.autograd.grad(want.square().sum(), [x, *m.parameters()])
        torch.testing.assert_close(got, want)
        for g, r in zip(grads, ref):
            torch.testing.assert_close(g, r)
    kinds = {g.kind: g.sizes for g in graph_reports}
    assert kinds["forward"].startswith("symbolic"), kinds
    assert kinds["backward"].startswith("symbolic"), kinds
    assert len(builds) == 2, builds  # one forward, one backward, for every size


def test_bf16_rows_of_every_length(plugin, graph_reports):
    dev = device_of(plugin)

    def fn(x):
        return torch.nn.functional.layer_norm(x.float(), x.shape[-1:]).to(torch.bfloat16) * x

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for rows, cols in ((4, 24), (9, 40), (3, 130)):
        x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
        torch.testing.assert_close(f(x), fn(x), atol=1e-2, rtol=1.6e-2)
    assert any(g.sizes.startswith("symbolic") for g in graph_reports)


def test_views_over_symbolic_sizes(plugin, graph_reports):
    dev = device_of(plugin)

    def fn(x, y):
        return (x.view(-1, 4) * y).sum(1) + x.t().reshape(-1)[: x.shape[0] * 2].sum()

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (8, 12, 20, 36):
        x, y = torch.randn(n, 8, device=dev), torch.randn(4, device=dev)
        torch.testing.assert_close(f(x, y), fn(x, y))


def test_inputs_a_symbolic_program_does_not_fit_get_their_own_variant(plugin, specializations):
    dev = device_of(plugin)
    f = torch.compile(lambda x: torch.relu(x) * 2, backend=sdk.backend(plugin), dynamic=True)
    for n in (4, 9):
        x = torch.randn(n, 6, device=dev)
        torch.testing.assert_close(f(x), torch.relu(x) * 2)
    # a transposed input: the symbolic program's strides are (s1, 1); this one's are not
    xt = torch.randn(6, 9, device=dev).t()
    torch.testing.assert_close(f(xt), torch.relu(xt) * 2)
    x = torch.randn(5, 6, device=dev)
    torch.testing.assert_close(f(x), torch.relu(x) * 2)


def test_what_cannot_be_symbolic_compiles_per_shape_and_says_why(plugin, graph_reports):
    dev = device_of(plugin)

    def fn(x):  # a gather over a symbolic extent (the index's range is symbolic)
        return torch.gather(
            x, 0, torch.zeros(3, x.shape[1], dtype=torch.int64, device=x.device) + 1
        )

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (4, 7, 10):
        x = torch.randn(n, 5, device=dev)
        torch.testing.assert_close(f(x), fn(x))
    sizes = [g.sizes for g in graph_reports]
    assert all(s.startswith(("symbolic", "per shape: ")) for s in sizes), sizes
    per_shape = [s for s in sizes if s.startswith("per shape")]
    for s in per_shape:
        assert len(s) > len("per shape: ")  # a reason


def test_a_plugin_without_the_capability_compiles_per_shape(plugin, graph_reports, monkeypatch):
    from sdk.core import pipeline

    dev = device_of(plugin)
    real = pipeline.Session.__init__

    def without(self, *args, **kwargs):
        real(self, *args, **kwargs)
        caps = self.info.capabilities - {sdk.Capability.SYMBOLIC_SIZES}
        self.info = dataclasses.replace(self.info, capabilities=caps)

    monkeypatch.setattr(pipeline.Session, "__init__", without)
    f = torch.compile(lambda x: x.sin() + 1, backend=sdk.backend(plugin), dynamic=True)
    for n in (3, 8):
        x = torch.randn(n, device=dev)
        torch.testing.assert_close(f(x), x.sin() + 1)
    assert graph_reports and all(
        g.sizes.startswith("per shape: ") and "SYMBOLIC_SIZES" in g.sizes for g in graph_reports
    )


def test_explain_reports_symbolic_sizes(plugin):
    dev = device_of(plugin)
    rep = sdk.explain(
        lambda x: torch.softmax(x, -1),
        torch.randn(6, 10, device=dev),
        backend=f"sdk:{plugin}",
        dynamic=True,
    )
    assert [g.sizes.startswith("symbolic") for g in rep.graphs] == [True]
    assert "sizes symbolic" in str(rep)


def test_misaligned_inputs_of_other_sizes_never_reuse_a_concrete_variant(plugin):
    dev = device_of(plugin)
    f = torch.compile(lambda x: x * 2 + 1, backend=sdk.backend(plugin), dynamic=True)
    for n in (6, 9):
        x = torch.randn(n, 5, device=dev)
        torch.testing.assert_close(f(x), x * 2 + 1)
    for n in (6, 7, 11, 7):
        # a view one element into its storage: not 16-byte aligned, so not the symbolic
        # program's; each size must get a program that fits it
        x = torch.randn(n * 5 + 1, device=dev)[1:].view(n, 5)
        torch.testing.assert_close(f(x), x * 2 + 1)
        y = torch.randn(n + 2, 5, device=dev)
        torch.testing.assert_close(f(y), y * 2 + 1)


def test_gpt2_over_sequence_lengths_compiles_once(plugin, builds, graph_reports):
    """A serving loop: HF GPT-2 at several sequence lengths, one program (causal-mask
    slices, position embeddings and padding over a symbolic length)."""
    skip_model_under_interpreter(plugin, 15)
    pytest.importorskip("transformers")
    dev = device_of(plugin)
    # GPT2Config's default dropout (0.1), off in eval mode
    m = models.gpt2(seed=0, dropout=0.1, vocab_size=300, n_positions=128).to(dev).eval()
    f = torch.compile(m, backend=sdk.backend(plugin), dynamic=True)
    with torch.no_grad():
        for n in (5, 12, 33):
            ids = torch.randint(0, 300, (2, n), device=dev)
            torch.testing.assert_close(f(ids).logits, m(ids).logits, rtol=1e-4, atol=1e-4)
    assert len(builds) == 1, builds
    assert graph_reports[0].sizes.startswith("symbolic"), graph_reports[0].sizes


def test_padding_to_a_multiple_and_slicing_back(plugin, graph_reports):
    """What attention kernels do to a mask: pad the last dim up to a multiple of 8, slice
    back to its length (the padded size is s - s % 8 + 8, the slice provably inside it)."""
    dev = device_of(plugin)

    def fn(x):
        n = x.shape[-1]
        p = torch.nn.functional.pad(x, (0, 8 - n % 8))
        return p[..., :n] * 2 + p.sum(-1, keepdim=True)

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (5, 11, 13, 19):
        x = torch.randn(3, n, device=dev)
        torch.testing.assert_close(f(x), fn(x))
    assert any(g.sizes.startswith("symbolic") for g in graph_reports), [
        g.sizes for g in graph_reports
    ]


@pytest.mark.parametrize(
    "case",
    [
        "slice",
        "slice_step",
        "select",
        "permute",
        "unsqueeze",
        "squeeze",
        "expand",
        "reshape",
        "reshape_split_strided",
        "reshape_merge_strided",
    ],
)
def test_symbolic_view_layouts_are_the_meta_kernels_at_every_size(plugin, case):
    """A view of a symbolic layout (computed by the lowering) equals what the op's meta
    kernel gives for the concrete layout, at several values of the size symbols."""
    del plugin  # the layout arithmetic is the core's: one run is enough
    import sympy

    from sdk.core import lowering
    from sdk.core.ir.graph import contiguous_strides
    from sdk.core.ir.kernel import Layout

    aten = torch.ops.aten
    s, t = sdk.ir.size_var("s0"), sdk.ir.size_var("s1")
    sizes = (s, 3, t)
    base = Layout(sizes, contiguous_strides(sizes), 5, torch.float32, "cpu")
    if case.endswith("_strided"):  # q of a fused qkv projection: [s, t, 3 * 12][..., :12]
        base = Layout((s, t, 12), (36 * t, 36, 1), 5, torch.float32, "cpu")
    op, args = {
        "slice": (aten.slice.Tensor, (2, 1, t, 1)),
        "slice_step": (aten.slice.Tensor, (0, 0, s, 2)),
        "select": (aten.select.int, (1, 2)),
        "permute": (aten.permute.default, ([2, 0, 1],)),
        "unsqueeze": (aten.unsqueeze.default, (1,)),
        "squeeze": (aten.squeeze.dims, ([],)),
        "expand": (aten.expand.default, ((4, s, 3, t),)),
        "reshape": (aten.reshape.default, ((s * 3, t),)),
        "reshape_split_strided": (aten.reshape.default, ((s, t, 3, 4),)),  # heads
        "reshape_merge_strided": (aten.reshape.default, ((s * t, 12),)),
    }[case]
    sym = lowering._meta_view(base, op, args)
    assert sym is not None
    for sv, tv in ((2, 2), (5, 7), (16, 3)):
        env = {s: sv, t: tv}

        def at(x, env=env):
            return int(sympy.sympify(x).xreplace(env))

        def conc(xs, at=at):
            return (
                type(xs)(conc(x, at) for x in xs)
                if isinstance(xs, (list, tuple))
                else (at(xs) if isinstance(xs, sympy.Expr) else xs)
            )

        concrete = Layout(conc(base.sizes), conc(base.strides), 5, torch.float32, "cpu")
        want = lowering._meta_view(concrete, op, conc(args))
        got = (conc(sym.sizes), conc(sym.strides), at(sym.offset))
        assert got == (want.sizes, want.strides, want.offset), (case, env, got, want)


def test_an_int_argument_that_is_not_a_size_is_specialized_and_checked(
    plugin, builds, graph_reports
):
    """An int argument Dynamo made dynamic (range unbounded: not a size) is specialized on
    its value; the program stays symbolic in the sizes, and a call with another value of
    the int gets a program of its own, never the first one's result."""
    dev = device_of(plugin)

    def fn(x, k):
        return (x * k).relu().sum(-1) + x[:, 1:].mean(-1)

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n, k in ((5, -3), (9, -3), (17, -3), (9, 4), (33, 4), (5, -3)):
        x = torch.randn(n, 7, device=dev)
        torch.testing.assert_close(f(x, k), fn(x, k))
    reports = [g for g in graph_reports if "specialized" in g.sizes]
    assert reports, [g.sizes for g in graph_reports]
    assert reports[0].sizes.startswith("symbolic"), reports[0].sizes
    assert len(builds) <= 3, builds  # -3 and 4 (sizes symbolic), Dynamo's own recompiles


def test_gpt2_training_over_sequence_lengths_is_symbolic(plugin, builds, graph_reports):
    """HF GPT-2 training at several sequence lengths: losses and gradients equal eager's,
    and every graph is symbolic. (The body's graph has ``logits_to_keep``, an int Dynamo
    makes dynamic with a range that is not a size's: it is specialized on its value, 0.)"""
    skip_model_under_interpreter(plugin, 140)
    transformers = pytest.importorskip("transformers")
    dev = device_of(plugin)
    torch.manual_seed(0)
    cfg = models.gpt2_config(vocab_size=300, n_positions=128)
    ref = transformers.GPT2LMHeadModel(cfg).to(dev)
    model = transformers.GPT2LMHeadModel(cfg).to(dev)
    model.load_state_dict(ref.state_dict())
    f = torch.compile(model, backend=sdk.backend(plugin), dynamic=True)
    for n in (5, 12, 33, 17):
        ids = torch.randint(0, 300, (2, n), device=dev)
        for m, run in ((ref, ref), (model, f)):
            m.zero_grad(set_to_none=True)
            run(ids, labels=ids).loss.backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(
                p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
            )
    per_shape = [g.sizes for g in graph_reports if not g.sizes.startswith("symbolic")]
    # Dynamo traces the first length statically; the graphs it makes dynamic after are
    # symbolic, the body's with logits_to_keep specialized
    assert any("specialized" in g.sizes for g in graph_reports), [g.sizes for g in graph_reports]
    # two Dynamo graphs (the body, the loss), forward and backward: one program each for
    # every length. (On a GPU the backward's attention takes a CPU RNG state that the meta
    # kernel gives as a GPU tensor; a check of its device rebuilt the backward per length.)
    assert len(builds) <= 4, (builds, per_shape)


def test_an_input_only_library_calls_take_is_checked_for_its_sizes_alone(plugin):
    """A symbolic program's check looks only at the sizes of an input that reaches library
    calls whole: GPU attention's backward takes its RNG state, a 0-dim int64 tensor, on the
    CPU where the meta kernel (what the trace saw) says GPU."""
    del plugin  # the check's logic: one run is enough
    import sympy

    from sdk.core import guards

    n = sympy.Symbol("s9", integer=True, positive=True)
    specs = (
        guards.TensorSpec((n, 4), (4, 1), 0, torch.float32, torch.device("cpu"), True),
        guards.TensorSpec((), (), 0, torch.int64, torch.device("cuda:0"), True),
    )
    args = (torch.randn(5, 4), torch.tensor(7))
    assert not guards.make_check(specs)(args)  # every input's layout and device
    check = guards.make_check(specs, layout_free=frozenset({1}))
    assert check(args)
    assert not check((torch.randn(5, 4), torch.tensor([7])))  # its sizes still count
    assert not check((torch.randn(5, 3), torch.tensor(7)))
    assert not check((torch.randn(1, 4), torch.tensor(7)))  # a size below MIN_SIZE


def test_a_size_rounded_up_to_a_multiple_is_a_floor_division(plugin):
    """GPU attention's log-sum-exp has ``ceil(n / 32) * 32`` rows, which Dynamo's meta
    kernels give as ``CeilToInt(IntTrueDiv(n, 32))``: the IR takes it as
    ``FloorDiv(n + 31, 32)``, equal at every n. (On the CPU no op gives such a size; the GPU
    suite's GPT-2 training test meets it.)"""
    del plugin  # the adapter's arithmetic: one run is enough
    import sympy
    from torch.utils._sympy import functions as tf

    from sdk.core.adapters import torch_private as tp

    n = sympy.Symbol("s70", integer=True, positive=True)
    got = tp._to_index_expr(tf.CeilToInt(tf.IntTrueDiv(n, 32)) * 32)
    assert got.has(sdk.ir.size_var("s70"))
    for v in (2, 31, 32, 33, 64, 65, 1000):
        assert got.subs({sdk.ir.size_var("s70"): v}) == -(-v // 32) * 32, v


def test_a_merged_symbolic_dimension_is_indexed_without_division(plugin):
    """A linear layer's bias gradient over ``[B, T, C]`` sums ``[B*T, C]`` by columns. With
    ``T`` symbolic, the merged row ``r`` reads ``C*T*(r // T) + C*(r % T)``, which is ``C*r``:
    folded, the load is affine (no division or remainder per element, and cuda_triton takes
    the column-sum tiling that static sizes get). The sums match eager at every length."""
    import re

    import sympy

    from sdk.ir import FloorDiv, Mod, size_var, var
    from sdk.ir.index import simplify_divmod

    t, r, x = size_var("s70"), var("r0"), var("x0")
    assert simplify_divmod(x + 512 * t * FloorDiv(r, t) + 512 * Mod(r, t)) == x + 512 * r
    kept = x + 512 * t * FloorDiv(r, t) + 256 * Mod(r, t)  # not a split dimension
    assert simplify_divmod(kept).has(Mod)
    assert Mod(t * t + x, t) == Mod(x, t) and FloorDiv(3 * t + x, t) == 3 + FloorDiv(x, t)
    for v in (2, 3, 7):  # the folds hold at every size
        for xv in range(0, 30):
            assert sympy.Integer(v * v + xv) % v == xv % v
            assert (3 * v + xv) // v == 3 + xv // v

    dev = device_of(plugin)
    w = torch.randn(24, device=dev)

    def fn(h: torch.Tensor) -> torch.Tensor:
        return (h * w).reshape(-1, 24).sum(0)

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (5, 9, 17):
        h = torch.randn(3, n, 24, device=dev)
        torch.testing.assert_close(f(h), fn(h), rtol=1e-5, atol=1e-5)
    report = sdk.explain(
        fn, torch.randn(3, 11, 24, device=dev), backend=f"sdk:{plugin}", dynamic=True
    )
    (kernel,) = [k for g in report.graphs for k in g.kernels if "aten.sum.dim_IntList" in k.ops]
    loads = [ln for ln in kernel.source.splitlines() if re.search(r"\[|tl\.load", ln) and "s" in ln]
    assert loads and not any(re.search(r"(//|%|\bs\d+\s*/)", ln) for ln in loads), kernel.source


@pytest.mark.parametrize("dims", [1, 2])
def test_batchnorm_training_over_batch_sizes_is_symbolic(plugin, builds, graph_reports, dims):
    # the running variance scales by n / (n - 1), n the count: a float of the sizes (a
    # SymFloat). It runs in the kernels, from the size arguments, at every size.
    dev = device_of(plugin)
    torch.manual_seed(0)
    make = torch.nn.BatchNorm1d if dims == 1 else torch.nn.BatchNorm2d
    bn, ref = make(6).to(dev), make(6).to(dev)
    ref.load_state_dict(bn.state_dict())
    f = torch.compile(bn, backend=sdk.backend(plugin), dynamic=True)
    for n in (2, 5, 9, 3):
        x = torch.randn(n, 6, *(4, 3)[: 2 * (dims - 1)], device=dev) * 3 + 1
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = f(xa), ref(xb)
        up = torch.randn_like(got)
        got.backward(up)
        want.backward(up)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xa.grad, xb.grad)
        torch.testing.assert_close(bn.weight.grad, ref.weight.grad)
        torch.testing.assert_close(bn.running_mean, ref.running_mean)
        torch.testing.assert_close(bn.running_var, ref.running_var)
        bn.zero_grad(), ref.zero_grad()
    assert all(g.sizes.startswith("symbolic") for g in graph_reports), [
        g.sizes for g in graph_reports
    ]
    assert not [fb for g in graph_reports for fb in g.fallbacks]
    assert len(builds) == 2, builds


def test_float_arithmetic_of_sizes_runs_in_the_kernels(plugin, graph_reports):
    dev = device_of(plugin)

    def fn(x):
        n = x.shape[0]
        scale = (x.numel() / (n + 1)) ** 0.5 - torch.sym_float(n) * 0.25
        return x * scale + n / 3

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (3, 8, 13):
        x = torch.randn(n, 5, device=dev)
        torch.testing.assert_close(f(x), fn(x))
    assert all(g.sizes.startswith("symbolic") for g in graph_reports), [
        g.sizes for g in graph_reports
    ]


def test_a_graph_returning_a_float_of_sizes_compiles_per_shape(plugin, graph_reports):
    dev = device_of(plugin)

    def fn(x):
        return x * 2, x.shape[0] / 4

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (3, 8, 13):
        x = torch.randn(n, 5, device=dev)
        got, want = f(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    # nothing computes in ATen on the kernels' device. (torch 2.11 returns the float as a
    # host scalar_tensor, which the graph hands back: ATen makes it on the host, where a
    # graph of device kernels makes no host tensors of its own)
    assert not [
        fb
        for g in graph_reports
        for fb in g.fallbacks
        if not (dev != "cpu" and fb.reason.startswith("computes on cpu"))
    ]


def _train_over_sizes(plugin, make, shapes):
    """``make()``'s module trained one step per shape, compiled with dynamic=True, against
    eager: outputs, input and parameter gradients, buffers (running statistics)."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    m, ref = make().to(dev), make().to(dev)
    ref.load_state_dict(m.state_dict())
    f = torch.compile(m, backend=sdk.backend(plugin), dynamic=True)
    for shape in shapes:
        x = torch.randn(*shape, device=dev) * 2 + 0.5
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = f(xa), ref(xb)
        up = torch.randn_like(got)
        got.backward(up)
        want.backward(up)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(xa.grad, xb.grad, atol=1e-4, rtol=1e-4)
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
        for b, c in zip(m.buffers(), ref.buffers()):
            torch.testing.assert_close(b, c)
        m.zero_grad(), ref.zero_grad()


def test_conv_batchnorm_training_over_sizes(plugin, graph_reports):
    # channels-last activations saved for the backward: AOTAutograd takes only concrete
    # strides for them, so symbolic graphs leave them in eager's (an int() of a symbolic
    # stride crashed the compile)
    def make():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 4, 3),
        )

    _train_over_sizes(plugin, make, [(2, 3, 10, 10), (3, 3, 12, 12), (5, 3, 9, 9)])
    assert not [fb for g in graph_reports for fb in g.fallbacks]


def test_groupnorm_training_over_sizes(plugin, graph_reports):
    # its gradient scales by 1 / (HxW * channels per group), a float of the sizes (on
    # torch 2.11, a CPU scalar_tensor beside the device's kernels)
    _train_over_sizes(
        plugin, lambda: torch.nn.GroupNorm(3, 12), [(4, 12, 5), (2, 12, 9), (3, 12, 7)]
    )
    assert not [fb for g in graph_reports for fb in g.fallbacks]


def test_host_scalars_computed_from_sizes(plugin, graph_reports):
    # a 0-dim host tensor made from numbers is a number: the kernels compute it; where the
    # graph returns it, it stays the host's
    dev = device_of(plugin)

    def fn(x):
        s = torch.scalar_tensor(x.shape[0]) / 4 + 1
        return x * s, s * 2

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (3, 8, 13):
        x = torch.randn(n, 5, device=dev)
        got, want = f(x), fn(x)
        for g, w in zip(got, want):
            assert g.device == w.device
            torch.testing.assert_close(g, w)


class _Positions(torch.nn.Module):
    """BERT's position embeddings: a buffer of 32 position ids, sliced to the length."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("position_ids", torch.arange(32).unsqueeze(0), persistent=False)
        self.pos = torch.nn.Embedding(32, 8)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x + self.pos(self.position_ids[:, : x.shape[1]]))


def test_a_slice_of_a_buffer_to_a_symbolic_length_is_symbolic(plugin, builds, graph_reports):
    # position_ids[:, :seq_len] over 32 positions: the sizes alone do not say seq_len <= 32;
    # the trace does (under Dynamo's guard), and the program requires it. Trained over four
    # lengths: one forward program and one backward, each symbolic, and eager's gradients
    dev = device_of(plugin)
    torch.manual_seed(0)
    m, ref = _Positions().to(dev), _Positions().to(dev)
    ref.load_state_dict(m.state_dict())
    f = torch.compile(m, backend=sdk.backend(plugin), dynamic=True)
    for length in (5, 12, 32, 7):
        x = torch.randn(2, length, 8, device=dev)
        got, want = f(x), ref(x)
        torch.testing.assert_close(got, want)
        up = torch.randn_like(got)
        got.backward(up)
        want.backward(up)
    for p, q in zip(m.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert len(builds) == 2, builds
    sizes = [g.sizes for g in graph_reports]
    assert all(s.startswith("symbolic") and "<= 0" in s for s in sizes), sizes


def test_a_slice_past_a_buffer_s_end_never_reads_beyond_it(plugin, graph_reports):
    # x.shape[0] <= 10 in the first trace, > 10 in Dynamo's recompile: the two graphs have
    # one text, and share a program; the program's requirement sends a call past the
    # buffer's end to a program of its own sizes, which clamps the slice as eager does
    dev = device_of(plugin)
    buf = torch.arange(10.0, device=dev)

    def fn(x):
        return x.sum() + buf[: x.shape[0]].sum() * 2

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (4, 6, 12, 3, 16, 10):
        x = torch.randn(n, 3, device=dev)
        torch.testing.assert_close(f(x), fn(x))
    assert any("requires" in g.sizes for g in graph_reports), [g.sizes for g in graph_reports]


def test_a_window_from_the_end_over_shorter_and_longer_sequences(plugin, graph_reports):
    # Mistral's sliding window, x[:, -6:]: all of a shorter sequence (the start clamps to 0,
    # which the trace says under its guard and the program requires), the last 6 of a
    # longer one; forward and the gradient (the slice's backward, a slice_scatter from -6)
    dev = device_of(plugin)

    def fn(x, w):
        return torch.tanh(x[:, -6:] * w).sum(1)

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for length in (3, 5, 4, 9, 2, 6):
        x = torch.randn(2, length, 4, device=dev)
        w = torch.randn(4, device=dev)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, want = f(xa, w), fn(xb, w)
        torch.testing.assert_close(got, want)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(xa.grad, xb.grad)
    first = [g.sizes for g in graph_reports[:2]]
    assert all(s.startswith("symbolic") and "requires" in s for s in first), first


class _TokenTypes(torch.nn.Module):
    """RoBERTa's token types: a buffer of zeros, expanded to the batch and gathered at the
    positions (the positions count the non-padding tokens)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("token_type_ids", torch.zeros(1, 16, dtype=torch.long))
        self.types = torch.nn.Embedding(2, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.cumsum(ids.ne(0).int(), dim=1).long() - 1
        kinds = self.token_type_ids.to(pos.device).expand(pos.shape[0], -1)
        kinds = torch.gather(kinds, dim=1, index=pos)
        return self.types(kinds) * ids.unsqueeze(-1)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_gather_from_an_expanded_buffer_runs_in_the_kernels(plugin, graph_reports, dynamic):
    dev = device_of(plugin)
    m = _TokenTypes().to(dev)
    f = torch.compile(m, backend=sdk.backend(plugin), dynamic=dynamic)
    for batch, length in ((2, 5), (3, 9), (4, 7)):
        ids = torch.randint(1, 6, (batch, length), device=dev)
        torch.testing.assert_close(f(ids), m(ids))
    assert not [fb for g in graph_reports for fb in g.fallbacks]


def test_a_slice_from_a_symbolic_negative_start(plugin, graph_reports):
    # x[:, k - 2n:]: a start below 0 counts from the end once (ATen's slice), then clamps
    # to 0. Traced at k - 2n <= -n (all of x), the start is not "0 wherever it is <= 0":
    # at k - 2n = -3 it is n - 3
    dev = device_of(plugin)

    def fn(x, y):
        return x[:, y.shape[0] - 2 * x.shape[1] :] * 2

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n, k in ((6, 3), (6, 9), (7, 12), (5, 2), (9, 20), (4, 8)):
        x, y = torch.randn(2, n, device=dev), torch.randn(k, device=dev)
        torch.testing.assert_close(f(x, y), fn(x, y))


class _PatchMerging(torch.nn.Module):
    """Swin's patch merging after a patch embedding: 4x4 patches flattened to tokens, viewed
    back as a grid, then its four interleaved halves (``[:, 1::2, 0::2]`` ...) concatenated."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4)
        self.reduce = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)  # (batch, h * w, 8)
        h, w = x.shape[2] // 4, x.shape[3] // 4
        g = t.view(x.shape[0], h, w, 8)
        parts = [g[:, i::2, j::2, :] for i, j in ((0, 0), (1, 0), (0, 1), (1, 1))]
        return self.reduce(torch.cat(parts, -1))


def test_swin_patch_merging_over_image_sizes_is_symbolic(plugin, graph_reports):
    # the halves' lengths over a grid of (size // 4) rows: (size // 4 - 1) // 2 + 1 from the
    # slice, and ((size // 4)**2 // (size // 4)) // 2 as torch traces the view: one size
    dev = device_of(plugin)
    torch.manual_seed(0)
    m, ref = _PatchMerging().to(dev), _PatchMerging().to(dev)
    ref.load_state_dict(m.state_dict())
    f = torch.compile(m, backend=sdk.backend(plugin), dynamic=True)
    for size in (32, 48, 64):
        x = torch.randn(2, 3, size, size, device=dev)
        got, want = f(x), ref(x)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        got.sum().backward()
        want.sum().backward()
    for p, q in zip(m.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    sizes = [g.sizes for g in graph_reports]
    assert sizes and all(s.startswith("symbolic") for s in sizes), sizes


def test_sizes_and_strides_of_max_are_symbolic_with_their_requirements(plugin, graph_reports):
    # a stride-4 convolution (Swin's patch embedding) and a contiguous copy of its every
    # other row: torch's sizes and strides hold Max(0, ...) and Max(1, ...) of sizes that
    # are 0 for small images; the program takes the side that held in the trace and
    # requires it of each call
    dev = device_of(plugin)
    w = torch.randn(8, 3, 4, 4, device=dev)

    def fn(x):
        y = torch.nn.functional.conv2d(x, w, stride=4)
        return y[:, :, ::2, ::2].contiguous().flatten(1) * 2

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for size in (16, 24, 40, 28):
        x = torch.randn(2, 3, size, size, device=dev)
        torch.testing.assert_close(f(x), fn(x), atol=1e-4, rtol=1e-4)
    sizes = [g.sizes for g in graph_reports]
    assert sizes and all(s.startswith("symbolic") for s in sizes), sizes
    assert all("requires" in s for s in sizes), sizes


def test_a_requirement_the_check_cannot_read_compiles_per_shape(plugin, graph_reports, monkeypatch):
    # a size requirement over a symbol that is no input's size: its check cannot be built,
    # so the graph compiles per shape and says why (not an error at the user's call)
    from sdk.core.lowering import views

    stray = sympy.Symbol("s999", integer=True, positive=True)
    real = views._clamps

    def with_stray(v, n):
        return [(bound, [*needs, stray - 1000]) for bound, needs in real(v, n)]

    monkeypatch.setattr(views, "_clamps", with_stray)
    dev = device_of(plugin)
    buf = torch.arange(10.0, device=dev)

    def fn(x):
        return x * 2 + buf[: x.shape[0]].sum()

    f = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
    for n in (4, 6, 3):
        x = torch.randn(n, 3, device=dev)
        torch.testing.assert_close(f(x), fn(x))
    sizes = [g.sizes for g in graph_reports]
    assert sizes and all(s.startswith("per shape") and "s999" in s for s in sizes), sizes


def test_a_cat_after_a_part_whose_length_is_a_polynomial_of_sizes(plugin, graph_reports):
    """BEiT's relative-position table at another resolution: ``(2*w - 1) * (2*h - 1)``
    interpolated rows, then the old table's last 3 (``cat``), with ``w`` and ``h`` sizes
    divided by the patch size. sympy cannot tell the sign of the expanded length
    ``4*w*h - 2*w - 2*h + 1``; the concatenation's indexing does not need it, and the graph
    is one program at every size."""
    dev = device_of(plugin)
    table = torch.randn(3 * 3 + 3, 4, device=dev)

    def f(x: torch.Tensor) -> torch.Tensor:
        w, h = x.shape[-2] // 8, x.shape[-1] // 8
        grid = table[:9].t().reshape(1, 4, 3, 3)
        sub = torch.nn.functional.interpolate(grid, size=(2 * w - 1, 2 * h - 1), mode="bilinear")
        sub = sub.reshape(4, -1).t()
        full = torch.cat([sub, table[9:]])
        return full.sum(-1) * x.mean()

    compiled = torch.compile(f, backend=sdk.backend(plugin, fallback=False), dynamic=True)
    # small tables: one interpreted Triton program per row without a GPU (1,400 rows took 18 s)
    for hw in ((16, 16), (24, 16), (32, 40), (24, 24)):
        x = torch.randn(1, 1, *hw, device=dev)
        torch.testing.assert_close(compiled(x), f(x))
    sizes = [g.sizes for g in graph_reports]
    assert sizes and all(s.startswith("symbolic") for s in sizes), sizes
