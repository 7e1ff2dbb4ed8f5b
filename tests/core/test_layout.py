"""Convnet inference: channels-last layout selection, BatchNorm as one pass, pooling as a
reduction, loop order, and the per-call guard that checks only what a graph bakes in.

Every model is compared with eager on fresh random inputs (and BatchNorm statistics that
are not the identity), outputs in eager's strides; what the compiler did is read from
``sdk.explain``.
"""

from __future__ import annotations

import pytest
import sympy
import torch

import sdk
from sdk.core.ir.kernel import Layout, Stage, Store
from sdk.core.scheduler import _loop_order
from tests.plugins_under_test import PLUGINS, device_of, skip_model_under_interpreter


class Block(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=True)
        self.b1 = torch.nn.BatchNorm2d(c)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + x)


class Net(torch.nn.Module):
    """A small ResNet: stem conv + BN + ReLU + max-pool, a residual block, a depthwise
    conv, global average pooling and a classifier; returns the logits and a feature map."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 5, stride=2, padding=2)
        self.bn = torch.nn.BatchNorm2d(16)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.block = Block(16)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        x = self.dw(self.block(x))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)), x


def _net(device: str, dtype: torch.dtype = torch.float32) -> Net:
    torch.manual_seed(0)
    m = Net().eval()
    for bn in (m.bn, m.block.b1, m.block.b2):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
    return m.to(device=device, dtype=dtype)


def _check(compiled: torch.nn.Module, model: torch.nn.Module, x: torch.Tensor, tol: dict) -> None:
    with torch.no_grad():
        got, want = compiled(x), model(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tol)
        assert g.stride() == w.stride(), "outputs leave in eager's layout"


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [True, False])
def test_convnet_matches_eager(plugin, dtype, channels_last):
    dev = device_of(plugin)
    model = _net(dev, dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    backend = sdk.backend(plugin, channels_last=channels_last, fallback=False)
    compiled = torch.compile(model, backend=backend)
    for _ in range(2):  # fresh inputs on each call
        _check(compiled, model, torch.randn(2, 3, 32, 32, device=dev, dtype=dtype), tol)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("channels_last", [True, None])
def test_as_strided_keeps_the_traces_layout(plugin, channels_last):
    """``as_strided`` addresses its input's storage by the trace's strides: over a
    convolution's output stored channels-last it read other elements (max error 2.7 here,
    silently). A graph holding it is not given channels-last, and the report says why."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(dev)

    def f(x: torch.Tensor) -> torch.Tensor:
        y = conv(x).relu()
        return y.as_strided((2, 8, 4), (y.stride(0), 1, 8)) * 2

    x = torch.randn(2, 3, 8, 8, device=dev)
    with torch.no_grad():
        report = sdk.explain(
            f, x, backend=f"sdk:{plugin}", channels_last=channels_last, fallback=False
        )
        got = torch.compile(
            f, backend=sdk.backend(plugin, channels_last=channels_last, fallback=False)
        )(x)
        torch.testing.assert_close(got, f(x))
    (graph,) = report.graphs
    if channels_last or plugin == "cuda_triton":  # cuda_triton prefers channels_last
        assert any("aten.as_strided.default" in n for n in graph.notes), graph.notes


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize(
    "view",
    [
        lambda y: torch.as_strided(y, (2, 2), (1, 2)),  # transposed
        lambda y: torch.as_strided(y, (2, 2), (2, 1)),  # the same layout
        lambda y: torch.as_strided(y, (3,), (1,), 1),  # an offset
    ],
    ids=["transposed", "same", "offset"],
)
def test_a_graph_output_that_is_an_as_strided_view_of_a_computed_buffer(plugin, view):
    """The computed buffer under the view is stored: the program read it before any step
    wrote it, and the whole graph ran in ATen."""
    dev = device_of(plugin)

    def f(x: torch.Tensor) -> torch.Tensor:
        return view(x + 1)

    x = torch.randn(4, device=dev)
    report = sdk.explain(f, x, backend=f"sdk:{plugin}", fallback=False)
    assert not report.fallbacks, str(report)
    got = torch.compile(f, backend=sdk.backend(plugin, fallback=False))(x)
    torch.testing.assert_close(got, f(x), rtol=0, atol=0)
    assert got.stride() == f(x).stride()


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_reshape_that_copies_is_not_taken_for_a_view(plugin):
    """conv -> permute -> reshape -> matmul over channels-last activations (a ConvNeXt
    block's linear). The reshape's meta kernel copies where the stored layout has no view
    of the new sizes, and that copy's strides were taken for a view of the buffer: the
    product read other elements (max error 15, silently)."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, 3, padding=1).to(dev)
    w = torch.randn(16, 16, device=dev)

    def f(x: torch.Tensor) -> torch.Tensor:
        y = conv(x)
        return y + (y.permute(0, 2, 3, 1).reshape(-1, 16) @ w).view(2, 8, 8, 16).permute(0, 3, 1, 2)

    x = torch.randn(2, 3, 8, 8, device=dev)
    with torch.no_grad():
        got = torch.compile(f, backend=sdk.backend(plugin, channels_last=True, fallback=False))(x)
        torch.testing.assert_close(got, f(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_convnext_head_keeps_channels_last(plugin):
    """ConvNeXt's head (global average pool to 1x1, a channels-last LayerNorm, flatten,
    linear): the pool's meta kernel restrides the 1x1 mean with an ``as_strided`` whose
    strides differ only on its size-1 dims. That reads the same elements in any layout, so
    it does not cost the graph its channels-last convolutions (it did: ConvNeXt-tiny's
    depthwise convolutions then ran in ATen's generic kernel, 2.3 ms against cuDNN's 0.85
    on the H100)."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, 3, padding=1).to(dev)
    dw = torch.nn.Conv2d(16, 16, 7, padding=3, groups=16).to(dev)
    norm = torch.nn.LayerNorm(16, eps=1e-6).to(dev)
    mix = torch.nn.Linear(16, 16).to(dev)
    head = torch.nn.Linear(16, 10).to(dev)

    def f(x: torch.Tensor) -> torch.Tensor:
        y = dw(conv(x))  # a block: its linear runs over channels-last, eager's result too
        y = y + mix(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        y = torch.nn.functional.adaptive_avg_pool2d(y, 1)
        y = norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return head(y.flatten(1))

    # channels-last images: eager's activations are channels-last, and so is the pool's input
    x = torch.randn(2, 3, 12, 12, device=dev).to(memory_format=torch.channels_last)
    with torch.no_grad():
        report = sdk.explain(f, x, backend=f"sdk:{plugin}", channels_last=True, fallback=False)
        got = torch.compile(f, backend=sdk.backend(plugin, channels_last=True, fallback=False))(x)
        torch.testing.assert_close(got, f(x), rtol=1e-4, atol=1e-4)
    (graph,) = report.graphs
    assert any(n.startswith("channels-last activations") for n in graph.notes), graph.notes


class _LayerNorm2d(torch.nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _ConvNeXtBlock(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = torch.nn.LayerNorm(dim, eps=1e-6)
        self.up, self.down = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)
        self.scale = torch.nn.Parameter(torch.full((dim, 1, 1), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.down(torch.nn.functional.gelu(self.up(y))).permute(0, 3, 1, 2)
        return x + self.scale * y


@pytest.mark.parametrize("plugin", PLUGINS)
def test_convnext_blocks_keep_one_layout_between_convolutions(plugin):
    """ConvNeXt's blocks over channels-last activations: each LayerNorm (over the
    permuted view (N, H, W, C), contiguous in memory) is one kernel, stored so that the
    linear after it reads it as it is, and the residual sum is stored channels-last for the
    next convolution. The only conversions are the image's and the weights' of the
    convolutions that are not depthwise: no kernel converts activations between blocks."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 4, 4),
        _LayerNorm2d(16, eps=1e-6),
        _ConvNeXtBlock(16),
        _LayerNorm2d(16, eps=1e-6),
        torch.nn.Conv2d(16, 32, 2, 2),
        _ConvNeXtBlock(32),
    ).to(dev)
    x = torch.randn(2, 3, 32, 32, device=dev)
    with torch.no_grad():
        report = sdk.explain(model, x, backend=f"sdk:{plugin}", channels_last=True, fallback=False)
        got = torch.compile(model, backend=sdk.backend(plugin, channels_last=True))(x)
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    (graph,) = report.graphs
    conversions = [  # a copy for a convolution: one buffer in (a bias added is two)
        k for k in graph.kernels if k.ops == ("aten.convolution.default",) and len(k.inputs) == 1
    ]
    assert len(conversions) == 3, [k.ops for k in graph.kernels]  # image, two weights
    norms = [k for k in graph.kernels if "aten.var_mean.correction" in k.ops]
    assert len(norms) == 4 and all("aten.sub.Tensor" in k.ops for k in norms), [
        k.ops for k in graph.kernels
    ]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_hf_transformers_convnext_keeps_one_layout_between_convolutions(plugin):
    """The same through HF transformers' ConvNeXt, a zoo this layout work was not tuned
    on: a module of its own for the channels-first LayerNorm (stem and downsampling), its
    blocks permuting to NHWC for ``nn.LayerNorm`` and back. Only the image and the two
    weights of the convolutions that are not depthwise are converted; each LayerNorm, the
    pooled head's included, is one kernel with its normalization."""
    transformers = pytest.importorskip("transformers")
    dev = device_of(plugin)
    torch.manual_seed(0)
    config = transformers.ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)
    model = transformers.ConvNextModel(config).to(dev).eval()
    x = torch.randn(2, 3, 32, 32, device=dev)
    with torch.no_grad():
        report = sdk.explain(model, x, backend=f"sdk:{plugin}", channels_last=True, fallback=False)
        compiled = torch.compile(model, backend=sdk.backend(plugin, channels_last=True))
        got, want = compiled(x), model(x)
    for a, b in zip(got.to_tuple(), want.to_tuple(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    (graph,) = report.graphs
    conversions = [
        k for k in graph.kernels if k.ops == ("aten.convolution.default",) and len(k.inputs) == 1
    ]
    assert len(conversions) == 3, [k.ops for k in graph.kernels]  # image, two weights
    norms = [k for k in graph.kernels if "aten.var_mean.correction" in k.ops]
    assert len(norms) == 5 and all("aten.sub.Tensor" in k.ops for k in norms), [
        k.ops for k in graph.kernels
    ]


def _report(plugin: str, **options):
    dev = device_of(plugin)
    x = torch.randn(2, 3, 32, 32, device=dev)
    with torch.no_grad():
        return sdk.explain(_net(dev), x, backend=f"sdk:{plugin}", fallback=False, **options)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_batchnorm_in_inference_is_one_pass(plugin):
    """conv -> BN -> ReLU (-> + residual) is a library call and one kernel: the
    per-channel scale (rsqrt(var + eps) * weight) is recomputed in it, not a kernel."""
    (graph,) = _report(plugin, channels_last=False).graphs
    normalizing = [k for k in graph.kernels if "aten.sub.Tensor" in k.ops]
    assert len(normalizing) == 3, [k.ops for k in graph.kernels]
    for k in normalizing:  # the variance's root in the kernel: sqrt or rsqrt, as torch decomposes
        roots = {"aten.sqrt.default", "aten.rsqrt.default"} & set(k.ops)
        assert roots and "aten.relu.default" in k.ops, k.ops
    # and no kernel does the per-channel part alone
    assert all("aten.sub.Tensor" in k.ops or "aten.mean.dim" in k.ops for k in graph.kernels), [
        k.ops for k in graph.kernels
    ]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_channels_last_is_chosen_once_and_converted_at_the_edges(plugin):
    (graph,) = _report(plugin, channels_last=True).graphs
    assert any("channels-last" in n for n in graph.notes), graph.notes
    # conversions in: the input image and the three weights whose layouts differ (the
    # depthwise weight's do not); none between the convolutions; the feature map leaves
    # in eager's layout from a kernel that does other work anyway
    copies = [k for k in graph.kernels if k.ops == ("aten.convolution.default",)]
    assert len(copies) == 4, [k.ops for k in graph.kernels]
    assert len(graph.kernels) == 8, [k.ops for k in graph.kernels]


def test_channels_last_follows_the_plugin_preference():
    """cpu_cpp does not prefer channels_last (sdk.Preferences): the core keeps the trace's layout."""
    (graph,) = _report("cpu_cpp").graphs
    assert not any("channels-last" in n for n in graph.notes), graph.notes
    assert not any(k.ops == ("aten.convolution.default",) for k in graph.kernels)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_global_average_pooling_is_a_reduction(plugin):
    (graph,) = _report(plugin).graphs
    assert not any("adaptive_avg_pool" in e.op for e in graph.externs), graph.externs
    assert not graph.fallbacks


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("out", [(1, 1), (2, 4), (3, 3)])
def test_adaptive_avg_pool2d(plugin, out):
    """Even windows are a reduction; uneven ones (8 -> 3) stay a library call."""
    dev = device_of(plugin)
    x = torch.randn(2, 5, 8, 8, device=dev)

    def fn(t):
        return torch.nn.functional.adaptive_avg_pool2d(t.relu(), out) * 2

    got = torch.compile(fn, backend=sdk.backend(plugin, fallback=False))(x)
    torch.testing.assert_close(got, fn(x))


def test_loop_order_follows_the_largest_store():
    """A kernel storing a channels-last (N, C, H, W) buffer walks C fastest."""
    xs = tuple(sympy.Symbol(f"x{i}", integer=True, nonnegative=True) for i in range(4))
    sizes = (2, 8, 4, 4)
    cl = Layout(sizes, (128, 1, 32, 8), 0, torch.float32, "cpu")
    from sdk.core.ir.expr import Const

    stage = Stage((), (), [], [Store("out", cl.linear(xs), Const(0.0, torch.float32))])
    order, osizes = _loop_order(xs, sizes, [stage], {"out": cl})
    assert order == (xs[0], xs[2], xs[3], xs[1]) and osizes == (2, 4, 4, 8)
    contiguous = Layout(sizes, (128, 16, 4, 1), 0, torch.float32, "cpu")
    stage = Stage((), (), [], [Store("out", contiguous.linear(xs), Const(0.0, torch.float32))])
    assert _loop_order(xs, sizes, [stage], {"out": contiguous}) == (xs, sizes)


def test_loop_order_skips_a_larger_access_that_is_not_affine():
    """Max-pooling over channels-last: its largest access, the input's window, addresses
    rows and columns through a div/mod (the padded window's wrap-around), which says nothing
    of the memory order; the channels-last output it stores decides, so C runs fastest (it
    ran fastest along W: every lane of a warp 2*C bytes or more from the next)."""
    from sdk.core.ir.expr import Load

    xs = tuple(sympy.Symbol(f"x{i}", integer=True, nonnegative=True) for i in range(4))
    n, c, h, w = xs
    sizes = (2, 8, 4, 4)
    inp = Layout((2, 8, 9, 9), (648, 1, 72, 8), 0, torch.float32, "cpu")
    out = Layout(sizes, (128, 1, 32, 8), 0, torch.float32, "cpu")
    window = 648 * n + c + 72 * sympy.Mod(2 * h + 8, 9) + 8 * sympy.Mod(2 * w + 8, 9)
    stage = Stage((), (), [], [Store("out", out.linear(xs), Load("inp", window, torch.float32))])
    order, osizes = _loop_order(xs, sizes, [stage], {"out": out, "inp": inp})
    assert order == (n, h, w, c) and osizes == (2, 4, 4, 8)


def test_guard_checks_sizes_only_for_inputs_that_only_reach_library_calls(specializations):
    """A backward graph's inputs are not guarded by Dynamo: its program checks them
    itself (here a program is called directly, as one that is not Dynamo-guarded). ``b``
    goes whole to mm: another layout of it needs no new variant and is right. ``a`` is
    read by a kernel: another layout gets its own variant."""

    def fn(a, b):
        return torch.mm(a.relu(), b)

    a, b = torch.randn(8, 16), torch.randn(16, 4)
    torch.testing.assert_close(torch.compile(fn, backend="sdk:cpu_cpp")(a, b), fn(a, b))
    (prog,) = specializations
    prog._dynamo_guarded = False  # as a backward graph's program is
    prog._install(next(iter(prog.variants)))
    bt = torch.randn(4, 16).t()  # same sizes, transposed strides
    (got,) = prog(a, bt)
    torch.testing.assert_close(got, fn(a, bt))
    assert len(prog.variants) == 1
    at = torch.randn(16, 8).t()
    (got,) = prog(at, b)
    torch.testing.assert_close(got, fn(at, b))
    assert len(prog.variants) == 2
    b5 = torch.randn(16, 5)  # other sizes are never run on the old variant
    (got,) = prog(a, b5)
    torch.testing.assert_close(got, fn(a, b5))
    assert len(prog.variants) == 3


@pytest.mark.parametrize("plugin", PLUGINS)
def test_parameters_of_another_layout_or_alignment_are_right(plugin):
    """Forward graphs leave sizes and strides to Dynamo's guards and check alignment:
    a parameter swapped for one of other strides, or one that starts 4 bytes into its
    storage (read by a kernel compiled for 16-byte alignment), still gives eager's result."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32)).to(dev)
    x = torch.randn(4, 16, device=dev)
    compiled = torch.compile(m, backend=sdk.backend(plugin, fallback=False))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), m(x))
        m[0].weight = torch.nn.Parameter(torch.randn(16, 32, device=dev).t())  # strides (1, 32)
        torch.testing.assert_close(compiled(x), m(x))
        m[1].weight = torch.nn.Parameter(torch.randn(64, device=dev)[::2])  # stride 2
        torch.testing.assert_close(compiled(x), m(x))
        m[1].bias = torch.nn.Parameter(torch.randn(33, device=dev)[1:])  # 4 bytes in
        torch.testing.assert_close(compiled(x), m(x))
        x2 = torch.randn(4 * 16 + 1, device=dev)[1:].view(4, 16)  # a misaligned input
        torch.testing.assert_close(compiled(x2), m(x2))


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize(
    "case",
    [
        (3, 2, 1, (2, 4, 9, 9), torch.float32, False),
        (2, 2, 0, (1, 3, 8, 8), torch.float32, False),
        (3, 1, 1, (2, 3, 5, 7), torch.bfloat16, False),
        (3, 2, 0, (4, 9, 9), torch.float32, False),
        ((3, 2), (2, 1), (1, 0), (2, 2, 7, 6), torch.float32, False),
        (3, 2, 1, (1, 2, 8, 8), torch.float32, True),
    ],
    ids=lambda c: "-".join(map(str, c[:3])) + ("-ceil" if c[5] else ""),
)
def test_max_pool2d_values_and_indices_match_eager(plugin, case):
    """Lowered, not a library call; NaN wins, -inf windows and padding as ATen does."""
    k, stride, pad, shape, dtype, ceil = case
    dev = device_of(plugin)
    x = torch.randn(*shape, dtype=dtype, device=dev)
    x[..., 0, 0] = float("nan")
    x[..., 2, 3] = float("-inf")
    x[..., :3, :3] = float("-inf") if len(shape) == 4 else x[..., :3, :3]

    def fn(t):
        return torch.nn.functional.max_pool2d_with_indices(t * 1.0, k, stride, pad, ceil_mode=ceil)

    v, i = torch.compile(fn, backend=sdk.backend(plugin, fallback=False))(x)
    rv, ri = fn(x)
    torch.testing.assert_close(v, rv, equal_nan=True)
    assert torch.equal(i, ri)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("indices", [False, True], ids=["values", "with_indices"])
def test_max_pool2d_of_channels_last_leaves_in_eager_strides(plugin, indices):
    """A graph without convolutions pooling a channels-last input: eager answers
    channels-last values (and indices); so does the compiled graph, whose pool has two
    outputs (the lowering chose contiguous strides for them, unlike for a one-output op)."""
    dev = device_of(plugin)
    x = torch.randn(2, 8, 12, 10, device=dev).to(memory_format=torch.channels_last)

    def f(t):
        out = torch.nn.functional.max_pool2d(t.relu(), 3, 2, 1, return_indices=indices)
        return out if indices else (out,)

    got = torch.compile(f, backend=sdk.backend(plugin, fallback=False))(x)
    want = f(x)
    for a, b in zip(got, want, strict=True):
        assert a.stride() == b.stride(), (a.stride(), b.stride())
        assert torch.equal(a, b)


_POOL_GRAD_CASES = [
    # kernel, stride, padding, dilation, ceil_mode, shape
    (3, 2, 1, 1, False, (2, 3, 9, 9)),  # a ResNet stem's: windows overlap
    (2, 2, 0, 1, False, (1, 3, 8, 8)),  # windows tile the input
    (3, 1, 1, 1, False, (2, 2, 6, 7)),  # every element in up to nine windows
    (2, 3, 0, 1, False, (2, 2, 8, 8)),  # gaps: some elements in no window
    ((3, 2), (2, 1), (1, 0), 1, True, (2, 2, 7, 6)),
    (3, 2, 0, 1, False, (3, 9, 9)),  # no batch dim
    (3, 2, 1, 2, False, (1, 2, 9, 9)),  # dilation: the library call
    (11, 2, 5, 1, False, (1, 2, 12, 12)),  # 36 windows an element: the library call
]


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "case", _POOL_GRAD_CASES, ids=lambda c: "-".join(map(str, c[:4])) + ("-ceil" if c[4] else "")
)
def test_max_pool2d_gradient(plugin, dtype, case):
    """The gradient gathered in generated code, in ATen's order: fp32 bits are eager's
    (ties, NaN and -inf windows, padding, elements in no window included); dilated and
    heavily overlapping windows stay the library call, never an op-level fallback."""
    k, stride, pad, dil, ceil, shape = case
    dev = device_of(plugin)
    torch.manual_seed(0)
    x = torch.randn(*shape, device=dev).to(dtype)
    x[..., 1, :] = x[..., 2, :]  # ties: the first maximum takes the gradient
    x[..., 0, 0] = float("nan")
    x[..., -1, -3:] = float("-inf")
    x = x.requires_grad_()
    g_out = torch.randn(
        torch.nn.functional.max_pool2d(x, k, stride, pad, dil, ceil_mode=ceil).shape, device=dev
    ).to(dtype)

    def f(t, g):
        return (
            torch.nn.functional.max_pool2d(t * 2, k, stride, pad, dil, ceil_mode=ceil) * g
        ).sum()

    library_call = dil != 1 or k == 11  # (their forward falls back to ATen: allowed)
    with sdk.collect_reports() as reports:
        got = torch.compile(f, backend=sdk.backend(plugin, fallback=library_call))(x, g_out)
        (grad,) = torch.autograd.grad(got, x)
    (backward,) = [r for r in reports.graphs if r.kind == "backward"]
    library = [e for e in backward.externs if "max_pool2d_with_indices_backward" in e.op]
    assert bool(library) == library_call, backward.externs
    assert not backward.fallbacks, backward.fallbacks
    if dtype == torch.float32 or library_call:  # (a library call: ATen's kernel, eager's bits)
        (want,) = torch.autograd.grad(f(x, g_out), x)
        assert torch.equal(grad.isnan(), want.isnan())
        assert torch.equal(grad.nan_to_num(), want.nan_to_num()), (grad - want).abs().max()
    else:  # the sum in float, rounded once (eager on the CPU rounds each partial sum)
        xf = x.detach().float().requires_grad_()
        (want,) = torch.autograd.grad(f(xf, g_out.float()), xf)
        torch.testing.assert_close(grad.float(), want, equal_nan=True, atol=2e-2, rtol=1.6e-2)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_max_pool2d_gradient_of_a_sum(plugin):
    """``max_pool2d(x).sum()``, indices returned too: the gradient gathered from the sum's,
    one element expanded to every window (a load of one address under a block mask, which
    Triton refused for a scalar pointer); eager's bits, eager's indices."""
    dev = device_of(plugin)
    x = torch.randn(2, 3, 9, 9, device=dev, requires_grad=True)

    def f(t):
        v, i = torch.nn.functional.max_pool2d(t * 2, 3, 2, 1, return_indices=True)
        return v.sum(), i

    loss, idx = torch.compile(f, backend=sdk.backend(plugin, fallback=False))(x)
    (grad,) = torch.autograd.grad(loss, x)
    want_loss, want_idx = f(x)
    (want,) = torch.autograd.grad(want_loss, x)
    assert torch.equal(idx, want_idx)
    assert torch.equal(grad, want)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_max_pool2d_of_symbolic_sizes(plugin):
    """Pooled sizes are floor divisions of the input's symbols: the sum over the pooled
    output (its mask, of the reduction's symbolic numel) and the gathered gradient compile
    once for every size, in either layout; the gradient has eager's bits."""
    dev = device_of(plugin)

    def f(t):
        return (torch.nn.functional.max_pool2d(t.relu(), 3, 2, 1) * 3).sum()

    compiled = torch.compile(f, backend=sdk.backend(plugin, fallback=False), dynamic=True)
    for shape in [(2, 3, 9, 9), (2, 3, 12, 10), (1, 4, 17, 13)]:
        for channels_last in (False, True):
            x = torch.randn(*shape, device=dev)
            if channels_last:
                x = x.to(memory_format=torch.channels_last)
            x.requires_grad_()
            with sdk.collect_reports() as reports:
                got = compiled(x)
                (grad,) = torch.autograd.grad(got, x)
            want = f(x)
            (want_grad,) = torch.autograd.grad(want, x)
            torch.testing.assert_close(got, want)  # a sum: its order is the kernel's
            assert torch.equal(grad, want_grad), (shape, channels_last)
            for g in reports.graphs:
                assert not g.externs and not g.fallbacks, (g.externs, g.fallbacks)


class _Patches(torch.nn.Module):
    """A patch embedding (a convolution), then attention over the patches: the backward
    graph's 4-d inputs (batch, heads, patches, ...) have symbolic sizes (BEiT, ViT)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Conv2d(3, 8, 4, stride=4)
        self.qk = torch.nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        q = self.qk(t).view(t.shape[0], t.shape[1], 2, 8).transpose(1, 2)
        return ((q @ q.transpose(-1, -2)).softmax(-1) @ q).sum()


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_backward_with_convolutions_and_symbolic_inputs_stays_symbolic(plugin, graph_reports):
    """Which layout a backward with convolutions takes is read from its inputs' stride
    expressions, never by guarding on a symbolic size: on torch 2.11, ``is_contiguous`` of a
    symbolic tensor did, and BEiT's backward then compiled per shape."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = _Patches().to(dev)
    compiled = torch.compile(model, backend=sdk.backend(plugin, fallback=False), dynamic=True)
    for shape in [(2, 3, 16, 16), (3, 3, 20, 24)]:
        x = torch.randn(*shape, device=dev)
        compiled(x).backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).backward()
        for g, p in zip(got, model.parameters()):
            torch.testing.assert_close(g, p.grad, atol=1e-4, rtol=1e-4)
        model.zero_grad()
    sizes = {r.name: r.sizes for r in graph_reports}
    assert any("backward" in name for name in sizes), sizes
    assert all(s.startswith("symbolic") for s in sizes.values()), sizes


# -- LayerNorm over channels, in the forms model zoos write it ----------------------------


class _NormPermuted(torch.nn.LayerNorm):
    """``F.layer_norm`` on the permuted view (N, H, W, C), permuted back (timm's and
    torchvision's LayerNorm2d)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.layer_norm(
            x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps
        )
        return y.permute(0, 3, 1, 2)


class _NormVarMean(torch.nn.LayerNorm):
    """``var_mean`` over dim 1, ``keepdim=True`` (timm's channels-first LayerNorm2d)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var, mean = torch.var_mean(x, dim=1, unbiased=False, keepdim=True)
        y = (x - mean) * torch.rsqrt(var + self.eps)
        return y * self.weight[:, None, None] + self.bias[:, None, None]


class _NormMeans(torch.nn.LayerNorm):
    """``mean`` over dim 1, then the mean of the squared deviations (ConvNeXt's own
    channels-first LayerNorm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        y = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * y + self.bias[:, None, None]


_NORMS = {"permuted": _NormPermuted, "var_mean": _NormVarMean, "means": _NormMeans}


class _ConvMlpBlock(torch.nn.Module):
    """A ConvNeXt block with 1x1 convolutions for its MLP (timm's ``conv_mlp``): the norm
    sits between two convolutions in NCHW."""

    def __init__(self, dim: int, norm: type) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = norm(dim, eps=1e-6)
        self.up = torch.nn.Conv2d(dim, 4 * dim, 1)
        self.down = torch.nn.Conv2d(4 * dim, dim, 1)
        self.gamma = torch.nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.down(torch.nn.functional.gelu(self.up(self.norm(self.dw(x)))))
        return x + y.mul(self.gamma.reshape(1, -1, 1, 1))


def _convnext(form: str, device: str) -> torch.nn.Module:
    norm = _NORMS[form]
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 4, 4),
        norm(16, eps=1e-6),
        _ConvMlpBlock(16, norm),
        norm(16, eps=1e-6),
        torch.nn.Conv2d(16, 32, 2, 2),
        _ConvMlpBlock(32, norm),
    )
    for m in model.modules():  # affine parameters that are not the identity
        if isinstance(m, torch.nn.LayerNorm):
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model.to(device)


def _conversions(graph, op: str) -> int:
    """Kernels that only copy a buffer into another layout for a convolution call."""
    return sum(1 for k in graph.kernels if k.ops == (op,) and len(k.inputs) == 1)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_layer_norm_over_channels_gets_one_layout_in_any_form(plugin):
    """A LayerNorm over the channels of channels-last activations, written as
    ``F.layer_norm`` on a permuted view, as ``var_mean`` over dim 1, or as two ``mean``s
    over dim 1, is one kernel that reads the activations as they are and stores its result
    channels-last for the next convolution. The forms over dim 1 were two kernels each
    (the statistics stored, then read back: their normalization's loops are the
    reduction's, transposed); every form now compiles to the same kernels, whose only
    conversions are the image's and two weights'."""
    skip_model_under_interpreter(plugin, 25)
    dev = device_of(plugin)
    x = torch.randn(2, 3, 32, 32, device=dev)
    counts = {}
    for form in _NORMS:
        model = _convnext(form, dev).eval()
        # full float32 convolutions on both sides (cuDNN's default TF32 and the two layouts'
        # algorithms put one element in a thousand past 1e-4 in a loaded GPU suite run)
        with torch.no_grad(), torch.backends.cudnn.flags(allow_tf32=False):
            report = sdk.explain(
                model, x, backend=f"sdk:{plugin}", channels_last=True, fallback=False
            )
            got = torch.compile(model, backend=sdk.backend(plugin, channels_last=True))(x)
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
        (graph,) = report.graphs
        assert _conversions(graph, "aten.convolution.default") == 3, (form, graph.kernels)
        # the statistics are never a kernel of their own: each reduction's kernel
        # normalizes too
        for k in graph.kernels:
            if {"aten.var_mean.correction", "aten.mean.dim"} & set(k.ops):
                assert "aten.sub.Tensor" in k.ops, (form, k.ops)
        counts[form] = len(graph.kernels)
    assert len(set(counts.values())) == 1, counts


def _functional(model: torch.nn.Module):
    names = [n for n, _ in model.named_parameters()]

    def f(x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, dict(zip(names, params)), (x,))

    params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    return f, params


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("form", list(_NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_over_channels_trains_like_eager(plugin, form, dtype):
    """A training step of that model in each form, channels-last, against eager: the
    output and every parameter's gradient (the backward reads channels-last activations
    saved by the forward). Through Triton's interpreter only the float32 permuted form
    runs (the other five took 110 s of CI's two cores); a GPU runs all six."""
    from tests.opcheck import check

    if (form, dtype) != ("permuted", torch.float32):
        skip_model_under_interpreter(plugin, 20)
    dev = device_of(plugin)
    model = _convnext(form, dev).to(dtype)
    f, params = _functional(model)
    x = torch.randn(2, 3, 32, 32, device=dev, dtype=dtype)
    # cuDNN runs float32 convolutions in TF32 by default, and the channels-last and
    # contiguous calls pick different algorithms: full float32 on both sides
    with torch.backends.cudnn.flags(allow_tf32=False):
        check(f, [x, *params], plugin=plugin, channels_last=True)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_layer_norm_over_channels_trains_in_one_layout(plugin):
    """The forward graph's activations saved for the backward stay channels-last: they
    were stored in eager's layout and converted back for each convolution (the forms over
    dim 1 took 17 forward kernels against the permuted form's 10). Every form's forward
    now has the same kernels, with no conversion but the image's and two weights'; the
    backward's convolution gradients take channels-last operands, and its only
    conversions are the image (saved as it came) and the two weights."""
    skip_model_under_interpreter(plugin, 55)
    dev = device_of(plugin)
    x = torch.randn(2, 3, 32, 32, device=dev)
    counts = {}
    for form in _NORMS:
        f, params = _functional(_convnext(form, dev))
        report = sdk.explain(f, x, *params, backend=f"sdk:{plugin}", channels_last=True)
        fwd = next(g for g in report.graphs if g.kind == "forward")
        bwd = next(g for g in report.graphs if g.kind == "backward")
        assert any(n.startswith("channels-last activations") for n in bwd.notes), bwd.notes
        assert _conversions(fwd, "aten.convolution.default") == 3, [k.ops for k in fwd.kernels]
        assert _conversions(bwd, "aten.convolution_backward.default") == 3, [
            k.ops for k in bwd.kernels
        ]
        counts[form] = len(fwd.kernels)
    assert len(set(counts.values())) == 1, counts


class _PooledHead(torch.nn.Module):
    """A convolution, then a classifier head as timm's ConvNeXt has it: global average
    pooling of channels-last activations, a LayerNorm over the channels, flatten, Linear.
    The pooling's meta restrides its result (an ``as_strided``); the backward of that
    restride is AOTAutograd's ``as_strided_scatter`` into a flat buffer of zeros."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1)
        y = self.norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.fc(y.flatten(1))


@pytest.mark.parametrize("plugin", PLUGINS)
def test_as_strided_over_a_flat_buffer_of_the_graph_keeps_training_channels_last(plugin):
    """``as_strided`` over a one-dimensional buffer the graph makes itself (the backward's
    ``full`` and ``as_strided_scatter`` above) addresses it right in any layout of the
    activations: the backward stays channels-last (it fell back to the trace's layout, with
    a copy of every saved activation, for timm's ConvNeXt), and matches eager."""
    from tests.opcheck import check

    dev = device_of(plugin)
    f, params = _functional(_PooledHead().to(dev))
    x = torch.randn(2, 3, 8, 8, device=dev).to(memory_format=torch.channels_last)
    report = sdk.explain(f, x, *params, backend=f"sdk:{plugin}", channels_last=True)
    bwd = next(g for g in report.graphs if g.kind == "backward")
    assert any(n.startswith("channels-last activations") for n in bwd.notes), bwd.notes
    assert not any("channels-last not used" in n for n in bwd.notes), bwd.notes
    check(f, [x, *params], plugin=plugin, channels_last=True)


def test_a_channels_last_backward_is_one_program_with_torchs_autograd_cache_on_or_off(
    tmp_path, monkeypatch
):
    """With torch's AOTAutograd cache on (the SDK's warm starts), AOTAutograd compiles the
    backward inside its fake mode; the layouts a library call answers for channels-last
    operands were then asked of fake tensors, whose convolution gradients are contiguous
    where the meta kernel's are channels-last. The same graph became another program (timm
    ConvNeXt's backward: 97 kernels against 82, 18 conversions against 5)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    f, params = _functional(_convnext("permuted", "cpu"))
    x = torch.randn(2, 3, 32, 32).requires_grad_(True)
    programs = {}
    for on in (True, False):
        # fresh caches for each: the second compile must build, not hit the first's program
        monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / f"sdk-{on}"))
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / f"inductor-{on}"))
        with (
            functorch_config.patch(enable_autograd_cache=on),
            inductor_config.patch(fx_graph_cache=True),
        ):
            torch._dynamo.reset()
            report = sdk.explain(f, x, *params, backend="sdk:cpu_cpp", channels_last=True)
        bwd = next(g for g in report.graphs if g.kind == "backward")
        programs[on] = (bwd.program, [(k.nodes, k.source) for k in bwd.kernels])
    assert programs[True] == programs[False], "torch's AOTAutograd cache made another program"


def test_a_forward_from_the_whole_graph_cache_tells_aotautograd_its_outputs_strides(
    tmp_path, monkeypatch
):
    """A forward program from the whole-graph cache leaves the activations it saves for the
    backward in the layouts its build chose (channels-last). The build tells AOTAutograd
    those strides, which compiles the backward for them; a hit must tell it too, or the
    backward is compiled for eager's strides, a variant no call uses (a warm process's
    ResNet-50 step built a 134-kernel backward it never ran, beside the 70-kernel one)."""
    import torch._functorch.config as functorch_config

    from sdk.core import build_stages

    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    built: list[str] = []
    run = build_stages.run

    def counting(session, ctx, graph):
        built.append(ctx.graph_kind)
        return run(session, ctx, graph)

    monkeypatch.setattr(build_stages, "run", counting)
    f, params = _functional(_convnext("permuted", "cpu"))
    x = torch.randn(2, 3, 32, 32).requires_grad_(True)
    want = f(x, *params)[0]
    want_grads = torch.autograd.grad(want.sum(), [x, *params])
    for first in (True, False):
        built.clear()
        # (AOTAutograd traces each time: the second forward is a hit of the SDK's cache only)
        with functorch_config.patch(enable_autograd_cache=False):
            torch._dynamo.reset()
            compiled = torch.compile(f, backend=sdk.backend("cpu_cpp", channels_last=True))
            got = compiled(x, *params)[0]
            grads = torch.autograd.grad(got.sum(), [x, *params])
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for g, w in zip(grads, want_grads, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        # the second time, both programs come from the cache: the backward is asked for the
        # strides it was built for, not built for eager's
        assert built == (["forward", "backward"] if first else []), (first, built)


_PREFERRING = """
import sdk
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401


@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name={name!r}, version="0.1", hook_api=sdk.HOOK_API_VERSION, device_types=("cpu",),
        capabilities=frozenset({{sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE}}),
    )


@sdk.hookimpl
def sdk_preferences():
    return sdk.Preferences(channels_last=True, channels_last_training={training})
"""


@pytest.mark.parametrize("training", [False, True])
def test_training_graphs_choose_channels_last_by_the_plugin_preference(
    training, make_plugin, fake_dist, use_registry
):
    """A plugin preferring channels-last gets it in training graphs (a BatchNorm convnet's
    step: its batch statistics become column reductions) only when it prefers it there too
    (``Preferences.channels_last_training``); both graphs then say so and the step matches
    eager, gradients included. Without it, neither graph does, and its inference graph still
    goes channels-last."""
    from tests.opcheck import check

    name = f"cl_training_{training}".lower()
    module = make_plugin(_PREFERRING.format(name=name, training=training), head=False)
    use_registry(fake_dist(f"{name}-plugin", {name: module}))
    f, params = _functional(_net("cpu").train())
    x = torch.randn(2, 3, 32, 32)
    report = sdk.explain(lambda x, *p: f(x, *p)[0].sum(), x, *params, backend=f"sdk:{name}")
    assert {g.kind for g in report.graphs} == {"forward", "backward"}
    for g in report.graphs:
        chosen = any(n.startswith("channels-last activations") for n in g.notes)
        assert chosen == training, (training, g.kind, g.notes)
    if training:
        torch._dynamo.reset()
        # the weight gradients are sums over N·H·W in another order than eager's
        check(f, [x, *params], plugin=name, tol=dict(rtol=1e-4, atol=1e-4))
    with torch.no_grad():
        torch._dynamo.reset()
        (graph,) = sdk.explain(_net("cpu"), x, backend=f"sdk:{name}").graphs
    assert any(n.startswith("channels-last activations") for n in graph.notes), graph.notes


class _TimmBlock(torch.nn.Module):
    """timm's ConvNeXt block (``conv_mlp=False``): the MLP in NHWC, permuted back to NCHW,
    scaled by ``gamma`` and added to the shortcut; its ``Dropout(0.0)`` is a clone in
    training graphs."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c)
        self.fc1, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
        self.drop = torch.nn.Dropout(0.0)
        self.gamma = torch.nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.drop(self.fc2(self.drop(torch.nn.functional.gelu(self.fc1(self.norm(y))))))
        y = y.permute(0, 3, 1, 2).mul(self.gamma.reshape(1, -1, 1, 1))
        return y + x


def test_a_permute_between_fused_members_walks_memory_in_order():
    """The clone of the MLP's NHWC output, its NCHW view scaled by ``gamma`` and the
    residual sum are one kernel over the NHWC loops. The NCHW members were mapped onto
    those loops by unravelling their flat index, a one-to-one mapping but one that reads
    and writes every element out of order (div/mod in each index; 2x slower kernels on an
    H200); mapped through the permute, as the members read each other, every index is
    affine. cpu_cpp shows its indices plainly; the layout is the core's."""
    import re

    from tests.opcheck import check

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 4, 4), _TimmBlock(16), _TimmBlock(16))
    f, params = _functional(model)
    x = torch.randn(2, 3, 32, 32)
    report = sdk.explain(lambda x, *p: f(x, *p).sum(), x, *params, backend="sdk:cpu_cpp")
    kernels = [k for g in report.graphs if g.name.endswith("forward") for k in g.kernels]
    assert any(
        {"aten.clone.default", "aten.mul.Tensor", "aten.add.Tensor"} <= set(k.ops) for k in kernels
    ), [k.ops for k in kernels]
    for k in kernels:
        scrambled = [i for i in re.findall(r"\w+\[([^\]]*)\]", k.source) if re.search("[/%]", i)]
        assert not scrambled, (k.name, scrambled)
    check(f, [x, *params], plugin="cpu_cpp")


def test_a_matrix_products_epilogue_and_its_permuted_readers_share_affine_loops():
    """Inference, where cuda_triton computes the second Linear's bias in the kernel that
    reads the product: that epilogue runs over the product's ``[N*H*W, C]``, the scaled
    residual sum over the permuted ``[N, C, H, W]``. Neither shape's loops map the other
    without unravelling a flat index (every load and store of timm's ConvNeXt-tiny took
    div/mod and walked memory at a stride of C: 1.5x Inductor's device time on an H200);
    the merged kernel runs over ``(N, H, W, C)``, which both map onto. Checked on the
    kernel's source and against eager."""
    import re

    dev = device_of("cuda_triton")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 4, 4), _TimmBlock(16)).eval().to(dev)
    x = torch.randn(2, 3, 32, 32, device=dev)
    with torch.no_grad():
        report = sdk.explain(model, x, backend="sdk:cuda_triton")
        got = torch.compile(model, backend="sdk:cuda_triton")(x)
        torch.testing.assert_close(got, model(x))
    kernels = [k for g in report.graphs for k in g.kernels]
    epilogue = [k for k in kernels if {"aten.mul.Tensor", "aten.add.Tensor"} <= set(k.ops)]
    assert epilogue, [k.ops for k in kernels]
    for k in epilogue:
        accesses = [ln for ln in k.source.splitlines() if "tl.load(" in ln or "tl.store(" in ln]
        scrambled = [ln.strip() for ln in accesses if re.search("//|%", ln)]
        assert accesses and not scrambled, (k.name, scrambled)
