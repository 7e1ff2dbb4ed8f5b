"""Edge values against eager, per codegen plugin: signed zeros, NaN, inf, floats out of an
integer's range, integer division by zero and negative integer powers.

Bit for bit where the answer is a sign or an integer. cpu_cpp runs on CPU tensors against eager
on the CPU; cuda_triton runs on a GPU against eager CUDA where there is one, else through
Triton's interpreter on CPU tensors (tests/plugins_under_test.py).

Where eager itself answers differently per device, each plugin follows its own device's:

* Of two zeros, eager on the CPU keeps the first operand of a max or min (``std::max`` in
  its scalar loop: ``relu(-0.0)`` is ``-0.0``, so ``1 / relu(x)`` is ``-inf``), and relu,
  clamp and hardtanh do so at every size; ``torch.maximum``/``minimum`` do so only outside
  the vectorized loop (AVX2/AVX-512's ``max_ps`` returns the second), so their reference here
  is eager's scalar loop, one element at a time. Eager CUDA gives ``+0.0`` for a max and
  ``-0.0`` for a min (``fmaxf``/``fminf``: ``relu(-0.0)`` is ``0.0`` there), and so does
  cuda_triton, also under the interpreter, whose reference is then eager's values with the
  zeros signed so (:func:`_reference`; eager CUDA measured on an H200).
* A float out of an integer's range (or NaN, inf) converts as the device does in eager: x86-64
  gives INT_MIN (int32 and int64; int8/int16 truncate the int32, uint8 the int64), a GPU
  saturates (NaN: 0). Under the interpreter, Triton's conversions are numpy's on the CPU.
* Integer division by zero raises on the CPU (``RuntimeError: ZeroDivisionError``) and gives
  the kernel's values on CUDA: the compiled function leaves such a division to ATen and so
  answers as eager does on either.
"""

from __future__ import annotations

import math
import platform

import pytest
import torch
import torch.nn.functional as F

import sdk
from tests.plugins_under_test import PLUGINS, device_of

pytestmark = pytest.mark.parametrize("plugin", PLUGINS)

_CUDA = torch.cuda.is_available()
nan, inf = math.nan, math.inf
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
#: -nan keeps its sign bit: float("nan") negated
NEG_NAN = -nan


def _compile(fn, plugin, **options):
    return torch.compile(fn, backend=sdk.backend(plugin, **options))


def _interpreted(plugin: str) -> bool:
    """cuda_triton on CPU tensors: eager CUDA's signed zeros are not there to compare with."""
    return plugin == "cuda_triton" and not _CUDA


def _assert_same(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Equal dtype, values and signs of zero; NaN where eager has NaN (its payload and sign
    are the hardware's after arithmetic)."""
    assert actual.dtype == expected.dtype, (what, actual.dtype, expected.dtype)
    a, e = actual.cpu(), expected.cpu()
    if e.is_floating_point():
        both_nan = a.isnan() & e.isnan()
        ok = both_nan | ((a == e) & (a.signbit() == e.signbit()))
    else:
        ok = a == e
    assert bool(ok.all()), f"{what}:\n  compiled {a.tolist()}\n  eager    {e.tolist()}"


# -- signed zeros ------------------------------------------------------------------------

X = [-0.0, 0.0, -1.0, 1.0, nan, -inf, inf, -0.5, 0.5, 7.0, -7.0, 1e-30]

#: op -> (function, the sign eager CUDA gives every zero it returns: a max +0.0, a min -0.0)
ZERO_OPS = {
    "relu": (torch.relu, 0.0),
    "relu6": (F.relu6, 0.0),
    "clamp_0_1": (lambda x: x.clamp(0.0, 1.0), 0.0),
    "clamp_-1_-0": (lambda x: x.clamp(-1.0, -0.0), -0.0),
    "clamp_min": (lambda x: x.clamp_min(0.0), 0.0),
    "clamp_max": (lambda x: x.clamp_max(-0.0), -0.0),
    "hardtanh": (lambda x: F.hardtanh(x, 0.0, 1.0), 0.0),
}


def _reference(plugin: str, result: torch.Tensor, cuda_zero: float) -> torch.Tensor:
    """Eager's ``result`` on the plugin's device: as it is, except for cuda_triton under the
    interpreter, where eager CUDA's zeros are signed ``cuda_zero``."""
    if not _interpreted(plugin):
        return result
    return torch.where(result == 0, torch.full_like(result, cuda_zero), result)


@pytest.mark.parametrize("name", sorted(ZERO_OPS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_like_ops_give_eagers_signed_zero(plugin, name, dtype):
    fn, cuda_zero = ZERO_OPS[name]
    x = torch.tensor(X, dtype=dtype, device=device_of(plugin))
    expected = fn(x)
    if _CUDA and plugin == "cuda_triton":  # the rule the interpreter's reference follows
        zeros = expected[expected == 0]
        assert bool((zeros.signbit() == (math.copysign(1, cuda_zero) < 0)).all()), zeros
    _assert_same(_compile(fn, plugin)(x), _reference(plugin, expected, cuda_zero), name)


def test_one_over_relu_keeps_the_sign_of_zero(plugin):
    """The campaign's case: ``1 / relu(x)`` and ``signbit(relu(x))`` at ``x = -0.0``."""
    x = torch.tensor([-0.0, 0.0, -2.0, 3.0], device=device_of(plugin))

    def fn(x):
        r = torch.relu(x)
        return 1.0 / r, torch.signbit(r)

    got = _compile(fn, plugin)(x)
    ref = _reference(plugin, torch.relu(x), 0.0)
    _assert_same(got[0], 1.0 / ref, "1 / relu(x)")
    _assert_same(got[1], torch.signbit(ref), "signbit(relu(x))")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_maximum_and_minimum_of_zeros_nan_and_inf(plugin, dtype):
    """Every pair of the edge values, both orders. cpu_cpp's reference is eager's scalar loop
    (each pair alone): of two zeros the first; cuda_triton's is eager CUDA's (+0.0 for the
    maximum, -0.0 for the minimum)."""
    vals = [-0.0, 0.0, nan, NEG_NAN, inf, -inf, 1.0, -1.0]
    pairs = [(a, b) for a in vals for b in vals]
    dev = device_of(plugin)
    a = torch.tensor([p[0] for p in pairs], dtype=dtype, device=dev)
    b = torch.tensor([p[1] for p in pairs], dtype=dtype, device=dev)
    got = _compile(lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)), plugin)(a, b)
    for i, op in enumerate((torch.maximum, torch.minimum)):
        if plugin == "cpu_cpp":  # one element at a time: eager's scalar loop
            expected = torch.cat([op(a[k : k + 1], b[k : k + 1]) for k in range(len(pairs))])
        else:
            expected = op(a, b)
            if _interpreted(plugin):  # eager CUDA: -0.0 only where both are (max), either (min)
                neg = (
                    a.signbit() & b.signbit() if op is torch.maximum else a.signbit() | b.signbit()
                )
                zero = torch.where(neg, -0.0, 0.0).to(dtype)
                expected = torch.where((a == 0) & (b == 0), zero, expected)
        _assert_same(got[i], expected, op.__name__)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_signbit_of_zeros_nan_and_inf(plugin, dtype):
    """signbit is True for -0.0, -inf and a NaN whose sign bit is set (eager's answer for
    -nan), read in a kernel of its own and fused after a copy."""
    vals = [-0.0, 0.0, NEG_NAN, nan, -inf, inf, -1e-30, 1e-30, -3.0, 2.0]
    x = torch.tensor(vals, dtype=torch.float64).to(dtype)
    bits = x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize])
    bits[2] = bits[3] | -(2 ** (8 * dtype.itemsize - 1))  # a conversion may drop NaN's sign
    x = x.to(device_of(plugin))

    def fn(x):
        return torch.signbit(x), torch.signbit(x * 2) & (x != 5)

    got = _compile(fn, plugin)(x)
    expected = torch.signbit(x)
    assert expected[0] and not expected[1], expected  # -0.0
    if x.device.type == "cuda" and dtype == torch.float16:
        # eager CUDA answers False for an fp16 NaN whose sign bit is set (measured on an H200:
        # it converts to float first); the sdk reads the bit. Compared without it.
        keep = ~x.isnan()
        got, expected = (got[0][keep], got[1][keep]), expected[keep]
        x = x[keep]
    else:
        assert expected[2], expected  # -nan
    _assert_same(got[0], expected, "signbit(x)")
    finite = ~x.isnan()  # the sign of NaN * 2 is the hardware's
    _assert_same(got[1][finite], torch.signbit(x * 2)[finite], "signbit(x * 2)")


# -- float -> integer casts ------------------------------------------------------------------

CAST_VALUES = [
    3e9, -3e9, nan, NEG_NAN, inf, -inf, 300.0, -129.5, 255.5, 256.0, -1.5, 4e4, -4e4, 65543.0,
    1e20, -1e20, 2.0**31, -(2.0**31), -(2.0**31) - 1e3, 2.0**31 - 128, 2.0**63, -(2.0**63),
    4294967301.0, -0.0, 7.9, -7.9, 127.5, -128.5, 32767.5, -32768.9, 65535.0, 1e-40,
]  # fmt: skip


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"),
    reason="out-of-range conversions are the CPU's; cpu_cpp follows x86-64's and AArch64's",
)
@pytest.mark.parametrize("src", FLOATS, ids=str)
def test_float_to_int_casts_match_eager_bit_for_bit(plugin, src):
    x = torch.tensor(CAST_VALUES, dtype=torch.float64).to(src).to(device_of(plugin))

    def fn(x):
        return tuple(x.to(dt) for dt in INTS)

    got = _compile(fn, plugin)(x)
    for dt, g, e in zip(INTS, got, fn(x)):
        _assert_same(g, e, f"{src} -> {dt}")


def test_triton_converts_floats_to_narrow_ints_through_a_wider_int(plugin):
    """A GPU converts a float straight to int8/int16/uint8 saturating to that range (-1.5 ->
    uint8 0, 40000.0 -> int16 32767); eager CUDA goes through int32 (uint8: int64) and wraps
    (255, -25536), as its CPU does. The interpreter's numpy conversions cannot show it, so
    this reads the kernel: cuda_triton converts through the wider integer."""
    if plugin != "cuda_triton":
        pytest.skip("the Triton renderer's conversions")
    x = torch.tensor([-1.5, 4e4], device=device_of(plugin))
    report = sdk.explain(
        lambda x: (x.to(torch.int8), x.to(torch.int16), x.to(torch.uint8)),
        x,
        backend="sdk:cuda_triton",
    )
    source = "\n".join(k.source for k in report.kernels)
    assert ".to(tl.int32).to(tl.int8)" in source, source
    assert ".to(tl.int32).to(tl.int16)" in source, source
    assert ".to(tl.int64).to(tl.uint8)" in source, source


# -- integer division by zero, negative integer powers --------------------------------------


def _outcome(fn, *args):
    """What calling ``fn`` gives: its result, or the RuntimeError it raised."""
    try:
        return fn(*args)
    except RuntimeError as exc:
        return exc


INT_DIV = {
    "floordiv": lambda a, b: a // b,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "floordiv_0": lambda a, b: a // 0,
    "remainder_0": lambda a, b: a % 0,
    "fmod_0": lambda a, b: torch.fmod(a, 0),
    "div_trunc_0": lambda a, b: torch.div(a, 0, rounding_mode="trunc"),
}


@pytest.mark.parametrize("name", sorted(INT_DIV))
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_division_by_zero_answers_as_eager(plugin, name, dtype):
    """Eager on the CPU raises ``RuntimeError: ZeroDivisionError`` when called; so does the
    compiled function (ATen runs the division). Without a zero it gives eager's values."""
    dev = device_of(plugin)
    a = torch.tensor([7, -7, 5, 0, -9, 9], dtype=dtype, device=dev)
    zero = torch.tensor([2, -3, 0, 1, 4, -1], dtype=dtype, device=dev)
    nonzero = torch.tensor([2, -3, 5, 1, 4, -1], dtype=dtype, device=dev)
    fn = INT_DIV[name]
    compiled = _compile(fn, plugin)
    expected, got = _outcome(fn, a, zero), _outcome(compiled, a, zero)
    if isinstance(expected, RuntimeError):
        assert dev == "cpu" and "ZeroDivisionError" in str(expected), expected
        assert isinstance(got, RuntimeError) and str(got) == str(expected), got
    else:
        _assert_same(got, expected, name)
    if not name.endswith("_0"):
        _assert_same(compiled(a, nonzero), fn(a, nonzero), f"{name}, no zero")


def test_integer_division_by_a_constant_is_generated(plugin):
    """A nonzero constant divisor cannot raise: the kernel divides (position ids, ``arange //
    n``); a tensor divisor is left to ATen, and the report says why."""
    dev = device_of(plugin)
    a = torch.arange(-20, 20, device=dev)

    def by_constant(a):
        return a // 4, a % -3, torch.fmod(a, 5), torch.div(a, -7, rounding_mode="trunc")

    report = sdk.explain(by_constant, a, backend=f"sdk:{plugin}")
    assert report.kernels and not report.fallbacks, str(report)
    for g, e in zip(_compile(by_constant, plugin, fallback=False)(a), by_constant(a)):
        _assert_same(g, e, "by a constant")
    report = sdk.explain(lambda a, b: a // b, a, a + 100, backend=f"sdk:{plugin}")
    reasons = [f.reason for f in report.fallbacks]
    assert len(reasons) == 1 and "ZeroDivisionError" in reasons[0], str(report)
    # fallback=False: the compile raises, naming the cause (inside Dynamo's wrapper)
    with pytest.raises(Exception) as info:
        _compile(lambda a, b: torch.remainder(a, b), plugin, fallback=False)(a, a + 100)
    chain, e = [], info.value
    while e is not None and e not in chain:
        chain.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
    assert any(
        isinstance(e, sdk.LoweringError) and "may hold 0 (eager raises ZeroDivisionError" in str(e)
        for e in chain
    ), chain


@pytest.mark.parametrize("exponent", [-1, -2, -3])
@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64])
def test_integer_to_a_negative_power_raises_as_eager(plugin, exponent, dtype):
    a = torch.tensor([1, -1, 2, 0, 3], dtype=dtype, device=device_of(plugin))

    def fn(a):
        return (a + 1) ** exponent

    expected = _outcome(fn, a)
    assert isinstance(expected, RuntimeError), expected
    assert "Integers to negative integer powers are not allowed" in str(expected)
    got = _outcome(_compile(fn, plugin), a)
    assert isinstance(got, RuntimeError) and str(got) == str(expected), got
    # a float tensor, or an integer to a power >= 0, is generated
    for f in (lambda a: (a.float() + 1) ** exponent, lambda a: (a + 1) ** -exponent):
        report = sdk.explain(f, a, backend=f"sdk:{plugin}")
        assert not report.fallbacks, str(report)
        torch.testing.assert_close(_compile(f, plugin)(a), f(a), rtol=1.3e-6, atol=0)


@pytest.mark.parametrize(
    "name, fn",
    [
        ("elu", lambda x: F.elu(x, 0.7)),
        ("selu", F.selu),
        ("elu_negative_alpha", lambda x: F.elu(x, -2.0)),
    ],
)
def test_elu_at_zeros_nan_and_inf(plugin, name, fn):
    """ELU's two branches meet at 0: eager gives a zero its ``scale * x`` (sign kept), NaN
    stays NaN, -inf goes to ``-alpha * scale``. Values up to expm1's rounding."""
    x = torch.tensor(X + [-1e-7, -88.0, 88.0], device=device_of(plugin))
    got, want = _compile(fn, plugin)(x).cpu(), fn(x).cpu()
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    if name != "elu_negative_alpha":  # (eager's CPU and CUDA kernels disagree on the sign
        # of a zero there: one takes its scale * x, the other alpha * scale * expm1(x))
        assert torch.equal(got.signbit(), want.signbit()), (got, want)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True)
