"""Every lowering against eager, on fresh random inputs, per codegen plugin.

cpu_cpp runs on CPU tensors; cuda_triton runs on a GPU when there is one and
through Triton's interpreter on CPU tensors otherwise (CI). Forward and, where
the op has one, backward; fp32 and bf16; contiguous, transposed, offset and
broadcast inputs. Nothing here may fall back: ``explain`` is checked too.
"""

from __future__ import annotations

import zlib

import pytest
import torch
import torch.nn.functional as F

import sdk
from tests.opcheck import check
from tests.plugins_under_test import PLUGINS, device_of

pytestmark = pytest.mark.parametrize("plugin", PLUGINS)


@pytest.fixture(autouse=True)
def _seed(request):
    """Fresh random inputs per test, reproducible from the test's name."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


def rand(*shape, dtype=torch.float32, grad=False, device="cpu", low=-2.0, high=2.0):
    t = torch.empty(shape, dtype=torch.float32, device=device).uniform_(low, high).to(dtype)
    return t.requires_grad_(grad)


def layout(t: torch.Tensor, kind: str) -> torch.Tensor:
    """The same values as ``t`` in another layout (a leaf, so gradients reach it)."""
    if kind == "contiguous":
        return t
    g = t.requires_grad
    t = t.detach()
    if kind == "transposed":
        out = t.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif kind == "offset":
        base = torch.empty(t.numel() + 3, dtype=t.dtype, device=t.device)
        out = base[3:].view(t.shape)
        out.copy_(t)
    else:
        raise ValueError(kind)
    return out.requires_grad_(g)


def no_fallbacks(fn, *args, plugin):
    r = sdk.explain(fn, *args, backend=f"sdk:{plugin}")
    assert not r.fallbacks, str(r)
    return r


UNARY = {
    "exp": torch.exp,
    "log": lambda x: torch.log(x.abs() + 0.1),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "erf": torch.erf,
    "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.5),
    "sin": torch.sin,
    "cos": torch.cos,
    "neg": torch.neg,
    "abs": torch.abs,
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "reciprocal": lambda x: 1.0 / (x.abs() + 0.5),
    "expm1": torch.expm1,
    "log1p": lambda x: torch.log1p(x.abs()),
    "atan": torch.atan,
    "softplus": F.softplus,
    "leaky_relu": F.leaky_relu,
    "hardtanh": F.hardtanh,
    "elu": F.elu,
    "selu": F.selu,
    "flip": lambda x: x.flip(-1) * 2,
    "flip_both": lambda x: torch.flip(x, (0, 1)) + x,
    "pow3": lambda x: x**3,
    "square": torch.square,
    "clamp": lambda x: x.clamp(-0.5, 0.7),
}
UNARY_NOGRAD = {
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round": torch.round,
    "trunc": torch.trunc,
    "sign": torch.sign,
    "isnan": lambda x: torch.isnan(x / (x - x[0:1])),
    "gt0": lambda x: x > 0,
    "logical_not": lambda x: torch.logical_not(x > 0),
    "to_int": lambda x: (x * 10).to(torch.int32),
    "to_bool": lambda x: (x * 2).round().bool(),
}
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "atan2": torch.atan2,
    "pow": lambda a, b: torch.pow(a.abs() + 0.1, b),
    "add_alpha": lambda a, b: torch.add(a, b, alpha=3),
    "where": lambda a, b: torch.where(a > b, a, b * 2),
    "hypot_like": lambda a, b: (a * a + b * b).sqrt(),
}
#: binary ops whose lowering adds nothing layout-specific: contiguous inputs only
BINARY_CONTIGUOUS = {
    "fmax": torch.fmax,
    "fmin": torch.fmin,
    "true_divide": lambda a, b: torch.true_divide(a, b.abs() + 0.5),
    "dist": lambda a, b: torch.dist(a, b, 3),
}
BINARY_NOGRAD = {
    "remainder": lambda a, b: torch.remainder(a, b.abs() + 0.3),
    "fmod": lambda a, b: torch.fmod(a, b.abs() + 0.3),
    "floor_divide": lambda a, b: torch.div(a, b.abs() + 0.3, rounding_mode="floor"),
    "trunc_divide": lambda a, b: torch.div(a, b.abs() + 0.3, rounding_mode="trunc"),
    "eq": lambda a, b: a.round() == b.round(),
    "lt": torch.lt,
    "ge": torch.ge,
    "logical_and": lambda a, b: (a > 0) & (b > 0),
    "logical_xor": lambda a, b: (a > 0) ^ (b > 0),
    # NaN where the other is a number: the number (one of each, and both NaN)
    "fmax_nan": lambda a, b: torch.fmax(
        a.masked_fill(a > 2, float("nan")), b.masked_fill(b > 1, float("nan"))
    ),
    "fmin_nan": lambda a, b: torch.fmin(
        a.masked_fill(a > 2, float("nan")), b.masked_fill(b > 1, float("nan"))
    ),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unary(plugin, name, dtype):
    dev = device_of(plugin)
    x = rand(17, 33, dtype=dtype, grad=True, device=dev)
    check(UNARY[name], [x], plugin=plugin)


@pytest.mark.parametrize("name", sorted(UNARY_NOGRAD))
def test_unary_nograd(plugin, name):
    dev = device_of(plugin)
    check(UNARY_NOGRAD[name], [rand(9, 31, device=dev, low=-5, high=5)], plugin=plugin)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "offset", "broadcast"])
def test_binary(plugin, name, kind):
    dev = device_of(plugin)
    a = layout(rand(16, 24, grad=True, device=dev), "contiguous" if kind == "broadcast" else kind)
    b = (
        rand(1, 24, grad=True, device=dev)
        if kind == "broadcast"
        else layout(rand(16, 24, grad=True, device=dev), kind)
    )
    check(BINARY[name], [a, b], plugin=plugin)


@pytest.mark.parametrize("name", sorted(BINARY_CONTIGUOUS))
def test_binary_contiguous(plugin, name):
    dev = device_of(plugin)
    a, b = rand(16, 24, grad=True, device=dev), rand(16, 24, grad=True, device=dev)
    check(BINARY_CONTIGUOUS[name], [a, b], plugin=plugin)


@pytest.mark.parametrize("name", sorted(BINARY_NOGRAD))
def test_binary_nograd(plugin, name):
    dev = device_of(plugin)
    check(
        BINARY_NOGRAD[name],
        [rand(12, 20, device=dev, low=-4, high=4), rand(12, 20, device=dev, low=-4, high=4)],
        plugin=plugin,
    )


def test_scalar_ops_and_int_math(plugin):
    dev = device_of(plugin)
    x = torch.randint(-50, 50, (8, 16), device=dev)

    def fn(x):
        return (x * 3 + 7) // 4, x % 5, (x & 12) | 1, x.abs().max(), (x > 3).sum(1)

    check(fn, [x], plugin=plugin)


REDUCTIONS = {
    "sum_last": lambda x: x.sum(-1),
    "sum_first": lambda x: x.sum(0),
    "sum_all": lambda x: x.sum(),
    "mean_keep": lambda x: x.mean(-1, keepdim=True),
    "amax": lambda x: x.amax(-1),
    "amin_first": lambda x: x.amin(0),
    "var": lambda x: x.var(-1),
    "std_all": lambda x: x.std(),  # (traced with correction=1.0: a float count)
    "var_correction_half": lambda x: x.var(0, correction=0.5),
    "var_mean": lambda x: torch.var_mean(x, 0),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
    "prod": lambda x: (x[:, :24] * 0.2 + 1).prod(-1),
    "norm": lambda x: x.norm(dim=-1),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reduction(plugin, name, dtype):
    dev = device_of(plugin)
    check(REDUCTIONS[name], [rand(13, 257, dtype=dtype, grad=True, device=dev)], plugin=plugin)


def test_reductions_without_grad(plugin):
    dev = device_of(plugin)
    x = rand(7, 129, device=dev)
    x[2, 5] = float("nan")
    x[3, 7] = x[3, 9] = 10.0  # ties: the first wins

    def fn(x):
        v, i = x.max(-1)
        return v, i, x.argmin(0), x.argmax(), (x > 1).any(-1), (x > -3).all(0)

    check(fn, [x], plugin=plugin)


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "offset"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_layouts(plugin, kind, dtype):
    dev = device_of(plugin)
    x = layout(rand(33, 65, dtype=dtype, grad=True, device=dev), kind)
    check(lambda x: torch.softmax(x, -1), [x], plugin=plugin)
    check(lambda x: torch.log_softmax(x, 0), [x], plugin=plugin)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms(plugin, dtype):
    dev = device_of(plugin)
    ln = torch.nn.LayerNorm(48).to(device=dev, dtype=dtype)
    x = rand(6, 10, 48, dtype=dtype, grad=True, device=dev)
    check(ln, [x], plugin=plugin, reference_in_float=False)
    bn = torch.nn.BatchNorm1d(12).to(device=dev)
    check(bn, [rand(20, 12, grad=True, device=dev)], plugin=plugin)
    gn = torch.nn.GroupNorm(3, 12).to(device=dev)
    check(gn, [rand(4, 12, 5, grad=True, device=dev)], plugin=plugin)


VIEWS = {
    "transpose": lambda x: (x.t() * 2).contiguous(),
    "reshape": lambda x: x.reshape(4, 6, 10).sum(1) + 1,
    "reshape_t": lambda x: x.t().reshape(-1) * 3,
    "permute": lambda x: x.view(4, 6, 10).permute(2, 0, 1) + 1,
    "expand": lambda x: x[:, :1].expand(24, 10) * x,
    "slice": lambda x: x[2:20:3, 1:-1] * 2,
    "select": lambda x: x[3] + x[:, 4].sum(),
    "narrow_unsqueeze": lambda x: x.narrow(1, 2, 5).unsqueeze(0) * 2,
    "chunk": lambda x: sum(c * i for i, c in enumerate(x.chunk(3, 0))),
    "unbind": lambda x: torch.stack(x[:3].unbind(0), -1) * 1.5,
    "cat": lambda x: torch.cat([x, x * 2, x[:, :3]], 1),
    "cat0": lambda x: torch.cat([x[:5], torch.tanh(x)], 0),
    "pad": lambda x: F.pad(x, (2, 3, 1, 0), value=0.5),
    # empty parts: never read (a load from one read outside it: an illegal address)
    "cat_empty_parts": lambda x: torch.cat([x[:, :0], x * 2, x[:, 5:5], x[:, :3]], 1),
    "block_diag": lambda x: torch.block_diag(x[:1, :5], x[2:4, :5] * 2, x[:3, :5]),
    "pad_empty": lambda x: F.pad(x[:0], (2, 1, 3, 0), value=0.5) + x[:3, :1],
    "flip_like": lambda x: x[:, torch.arange(9, -1, -1, device=x.device)],
    "tril": lambda x: torch.tril(x[:10]),
}


#: replicate padding (its gradient: torch has no decomposition, the core's sums the rows
#: that replicate each element): (input shape, padding)
REPLICATION_PADS = {
    "1d": ((2, 3, 7), (2, 3)),
    "2d": ((2, 3, 6, 5), (1, 2, 3, 1)),
    "2d_one_row": ((2, 3, 1, 5), (2, 2, 3, 1)),
    "2d_pad_past_the_size": ((2, 3, 2, 2), (4, 3, 5, 6)),
    "3d": ((1, 2, 3, 4, 5), (1, 0, 2, 1, 0, 3)),
}


@pytest.mark.parametrize("name", sorted(REPLICATION_PADS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_replication_pad_and_its_gradient(plugin, name, dtype):
    shape, pad = REPLICATION_PADS[name]
    x = rand(*shape, dtype=dtype, grad=True, device=device_of(plugin))
    check(lambda x: F.pad(x, pad, mode="replicate"), [x], plugin=plugin)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views(plugin, name):
    dev = device_of(plugin)
    check(VIEWS[name], [rand(24, 10, grad=True, device=dev)], plugin=plugin)


def test_indexing(plugin):
    dev = device_of(plugin)
    emb = torch.nn.Embedding(50, 16).to(dev)
    idx = torch.randint(0, 50, (4, 7), device=dev)
    check(emb, [idx], plugin=plugin)
    x = rand(10, 8, grad=True, device=dev)
    i = torch.randint(-10, 10, (5,), device=dev)
    check(lambda x, i: x[i] * 2, [x, i], plugin=plugin)
    check(lambda x, i: torch.index_select(x, 1, i.abs() % 8), [x, i], plugin=plugin)
    g = torch.randint(0, 8, (10, 3), device=dev)
    check(lambda x, g: torch.gather(x, 1, g), [x, g], plugin=plugin)


def test_pointwise_chain_is_one_kernel(plugin):
    dev = device_of(plugin)

    def fn(x, y):
        return (x * torch.sigmoid(x) + y).relu() * 0.5 - torch.tanh(y)

    x, y = rand(64, 128, device=dev), rand(64, 128, device=dev)
    check(fn, [x, y], plugin=plugin)
    r = no_fallbacks(fn, x, y, plugin=plugin)
    assert len(r.kernels) == 1, str(r)


def test_softmax_is_one_kernel(plugin):
    dev = device_of(plugin)
    x = rand(32, 100, device=dev)
    r = no_fallbacks(lambda x: torch.softmax(x, -1), x, plugin=plugin)
    assert len(r.kernels) == 1, str(r)


def test_layer_norm_forward_is_one_kernel(plugin):
    dev = device_of(plugin)
    ln = torch.nn.LayerNorm(64).to(dev)
    with torch.no_grad():
        r = no_fallbacks(ln, rand(16, 64, device=dev), plugin=plugin)
    assert len(r.kernels) == 1, str(r)


def test_dropout_and_random(plugin):
    dev = device_of(plugin)
    # 32768 draws (each one interpreted without a GPU): every bound below is 5 standard
    # deviations or more of its statistic
    x = torch.ones(64, 512, device=dev)
    fn = torch.compile(lambda x: F.dropout(x, 0.3, training=True), backend=sdk.backend(plugin))
    y = fn(x)
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.7) < 0.0125
    torch.testing.assert_close(y[y != 0], torch.full_like(y[y != 0], 1 / 0.7))
    assert not torch.equal(fn(x), y), "two calls drew the same mask"
    r = torch.compile(lambda x: torch.rand_like(x), backend=sdk.backend(plugin))(x)
    assert r.min().item() >= 0 and r.max().item() < 1 and abs(r.mean().item() - 0.5) < 0.01
    n = torch.compile(lambda x: torch.randn_like(x), backend=sdk.backend(plugin))(x)
    assert abs(n.mean().item()) < 0.03 and abs(n.std().item() - 1) < 0.02
