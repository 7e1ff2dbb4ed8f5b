"""Python numbers where an op's schema takes a Tensor (core/arguments.py): Dynamo makes
``addcmul_``/``addcdiv_`` with a ``value`` a ``prims.fma`` whose second operand is a float,
and ``prims.fma``'s Python autograd kernel hands that float to the dispatcher, which refuses it.
Every path that runs the op, a generated kernel or ATen, must take it."""

from __future__ import annotations

import logging

import pytest
import torch

import sdk

BF16 = {"atol": 1e-2, "rtol": 1.6e-2}


def update(state, a, b):
    state.addcmul_(a, b, value=0.5)
    state.addcdiv_(a, b.abs() + 1, value=-0.25)
    return state * 2


def _check(backend, dtype, caplog):
    state, a, b = (torch.randn(64, dtype=dtype) for _ in range(3))
    expected_state = state.clone()
    expected = update(expected_state, a, b)
    out = torch.compile(update, backend=backend)(state, a, b)
    tol = BF16 if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out, expected, **tol)
    torch.testing.assert_close(state, expected_state, **tol)
    # the program ran: it did not fail and give way to ATen (a warning, in the log)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("runner", ["native", "python"])
def test_fma_of_a_number_runs_in_a_kernel(seeded, dtype, runner, caplog):
    backend = sdk.backend("cpu_cpp", runner=runner)
    _check(backend, dtype, caplog)
    state, a, b = (torch.randn(64, dtype=dtype) for _ in range(3))
    [graph] = sdk.explain(update, state, a, b, backend=backend).graphs
    assert not graph.fallbacks
    assert any(n.endswith("prims.fma.default") for k in graph.kernels for n in k.nodes)


def test_bf16_addcmul_is_rounded_once_as_eager_rounds_it(seeded):
    """The product Dynamo splits out of addcmul_ is not rounded to bfloat16 before the fma:
    bit for bit eager's result, where rounding it first is off by a bfloat16 step."""
    state, a, b = (torch.randn(4096, dtype=torch.bfloat16) for _ in range(3))

    def fn(s, x, y):
        return s.clone().addcmul_(x, y, value=0.5)

    out = torch.compile(fn, backend=sdk.backend("cpu_cpp"))(state, a, b)
    assert torch.equal(out, fn(state, a, b))


@pytest.mark.parametrize("runner", ["native", "python"])
def test_fma_of_a_number_runs_through_aten(seeded, runner, caplog):
    """Complex tensors have no IR form: prims.fma runs through ATen, from the program, and
    is given its number as a tensor (the native runner's wrapped number reached prims.fma's
    Python autograd kernel as a float, which the dispatcher refused after the graph had begun
    writing ``state``)."""
    _check(sdk.backend("cpu_cpp", runner=runner), torch.complex64, caplog)
