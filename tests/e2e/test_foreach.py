"""torch's multi-tensor ops (``aten._foreach_*``) against eager.

The SDK decomposes each functional foreach op (what AOTAutograd leaves of
``torch._foreach_add_``) into one call of its per-tensor op per list element
(``core/adapters/foreach.py``). Every overload torch defines is checked here on random
inputs made from its schema, fp32 and bf16: the decomposition itself against the foreach
op in eager, and the ops compiled with sdk:cpu_cpp (all of them in one graph per dtype,
which must run whole in generated kernels but for the ops the core does not lower).
torch's own OpInfo samples of the foreach ops (``foreach_*_op_db``) check the
decompositions too. ``tests/e2e/test_optimizers.py`` runs the optimizers that call them.
"""

from __future__ import annotations

import warnings
import zlib

import pytest
import torch

import sdk
from sdk.core.adapters import torch_private as tp
from sdk.core.adapters.foreach import PREFIX, foreach_ops

OPS = foreach_ops()
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: {}, torch.bfloat16: dict(atol=1e-2, rtol=1.6e-2)}

#: ops whose inputs must lie in (0, 1): logarithms, roots, inverse sines, powers of them
POSITIVE = {"log", "log10", "log2", "log1p", "sqrt", "rsqrt", "pow", "acos", "asin", "lgamma"}

#: per-tensor ops the core does not lower: ATen runs them between the kernels
NOT_LOWERED = {
    "aten.lgamma.default",
    "aten.linalg__powsum.default",
    "aten.mm.default",  # a library call
}

#: overloads torch.compile cannot trace (torch 2.13): their fake kernel refuses a fake
#: ``scalars`` tensor ("Expected scalars to be on CPU, got meta instead")
UNTRACEABLE = {"_foreach_addcdiv.Tensor", "_foreach_addcmul.Tensor"}

SHAPES = [(3, 4), (5,), (2, 1, 3)]


def name_of(op) -> str:
    return str(op).removeprefix("aten.")


@pytest.fixture(autouse=True)
def _seed(request):
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _uniform(shape, dtype, low, high, signed=False) -> torch.Tensor:
    t = torch.empty(shape).uniform_(low, high)
    if signed:
        t = t * (torch.randint(0, 2, shape) * 2 - 1)
    return t.to(dtype)


def _list(op, dtype, first: bool) -> list[torch.Tensor]:
    """Three tensors of other shapes, the last one transposed. The first list argument
    (``self``) takes both signs unless the op needs positive values; the others are positive
    and away from zero (divisors, exponents, weights)."""
    base = op._schema.name.removeprefix("aten::" + PREFIX)
    if base == "mm":
        shapes = [(3, 4), (2, 5), (4, 1)] if first else [(4, 2), (5, 3), (1, 6)]
        return [_uniform(s, dtype, 0.5, 1.5, signed=True) for s in shapes]
    if first and base not in POSITIVE:
        out = [_uniform(s, dtype, 0.1, 1.4, signed=True) for s in SHAPES]
    elif first:
        out = [_uniform(s, dtype, 0.1, 0.9) for s in SHAPES]
    else:
        out = [_uniform(s, dtype, 0.5, 1.5) for s in SHAPES]
    out[-1] = out[-1].transpose(0, -1).contiguous().transpose(0, -1)
    return out


def sample(op, dtype) -> tuple[list, dict]:
    """Arguments for one call of the foreach op ``op``, from its schema."""
    args: list = []
    kwargs: dict = {}
    first = True
    for a in op._schema.arguments:
        t = str(a.type)
        if t == "List[Tensor]":
            value = _list(op, dtype, first)
            first = False
        elif t == "List[number]":
            value = [0.5, 1.5, 2.0]
        elif t == "Tensor" and a.name == "scalars":  # one value per element
            value = _uniform((len(SHAPES),), dtype, 0.5, 1.5)
        elif t == "Tensor":
            value = torch.tensor(0.75, dtype=dtype)
        elif t == "number" and a.name not in ("ord",):
            value = 0.75 if a.name != "self" else 1.5
        elif a.has_default_value():
            continue
        else:
            raise AssertionError(f"{op}: no sample for {a.name} of type {t}")
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    if "alpha" in {a.name for a in op._schema.arguments}:
        kwargs["alpha"] = 0.5
    return args, kwargs


def _close(got, want, dtype, what: str) -> None:
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(
            g, w, equal_nan=True, **TOL[dtype], msg=lambda m, i=i: f"{what}[{i}]: {m}"
        )


def test_every_foreach_op_is_decomposed():
    names = {name_of(op) for op in OPS}
    # the ones torch.optim and clip_grad_norm_ call, among every other
    assert {
        "_foreach_add.List",
        "_foreach_add.Tensor",
        "_foreach_addcdiv.Tensor",
        "_foreach_addcmul.ScalarList",
        "_foreach_lerp.Scalar",
        "_foreach_norm.Scalar",
        "_foreach_pow.ScalarAndTensor",
        "_foreach_copy.default",
    } <= names
    assert len(OPS) > 60
    table = tp.default_decompositions()
    assert not [op for op in OPS if op not in table]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS, ids=name_of)
def test_decomposition_matches_eager(op, dtype):
    args, kwargs = sample(op, dtype)
    got = tp.default_decompositions()[op](*args, **kwargs)
    _close(got, op(*args, **kwargs), dtype, name_of(op))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_foreach_op_compiled_matches_eager(dtype):
    """All the ops in one graph (one build): each one's results against eager's, and no
    op in ATen but those the core does not lower."""
    samples = {op: sample(op, dtype) for op in OPS if name_of(op) not in UNTRACEABLE}

    def every_op(samples):
        return {op: op(*args, **kwargs) for op, (args, kwargs) in samples.items()}

    compiled = torch.compile(every_op, backend="sdk:cpu_cpp")
    got = compiled(samples)
    report = sdk.explain(compiled, samples)
    want = every_op(samples)
    for op in samples:
        _close(got[op], want[op], dtype, name_of(op))
    assert len(report.graphs) == 1, str(report)
    left = {f.op for f in report.fallbacks}
    assert left <= NOT_LOWERED, left - NOT_LOWERED
    runner = report.graphs[0].runner  # (SDK_RUNNER=check: the runner runs it, and is checked)
    assert runner == "native" or runner.startswith("check"), runner


def _opinfo_samples():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ImportWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        from torch.testing._internal import common_methods_invocations as m
    for db in ("binary", "unary", "pointwise", "reduce", "other"):
        for info in getattr(m, f"foreach_{db}_op_db"):
            yield pytest.param(info, id=info.name)


class _Compare(torch.utils._python_dispatch.TorchDispatchMode):
    """Runs each foreach op ATen dispatches both ways: eagerly and decomposed (an in-place
    one, ``_foreach_copy_``, as the functional form AOTAutograd would leave of it)."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.removeprefix("aten::")
        packet = getattr(torch.ops.aten, name.removesuffix("_"), None)
        functional = getattr(packet, func._overloadname, None) if packet else None
        if functional not in OPS:
            return func(*args, **kwargs)
        self.seen.add(functional)
        got = tp.default_decompositions()[functional](*args, **kwargs)  # before any write
        out = func(*args, **kwargs)
        _close(got, args[0] if func is not functional else out, self.dtype, name_of(func))
        return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("info", list(_opinfo_samples()))
def test_decomposition_matches_eager_on_opinfo_samples(info, dtype):
    """torch's own samples (scalars of every Python type, alpha, norms of every order)."""
    compare = _Compare(dtype)
    for s in info.sample_inputs("cpu", dtype, num_input_tensors=[3]):
        kwargs = {k: v for k, v in s.kwargs.items() if k != "disable_fastpath"}
        try:
            info.op(s.input, *s.args, **kwargs)
        except (RuntimeError, TypeError):
            continue  # a sample eager itself rejects (subtraction of bools, ...)
        with compare:
            info.op(s.input, *s.args, **kwargs)
    assert compare.seen, f"no sample of {info.name} reached a foreach op"
