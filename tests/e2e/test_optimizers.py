"""Every torch.optim optimizer compiled with sdk:cpu_cpp matches eager (issue 47).

Each optimizer of ``tests/optimizers.py``, single-tensor (``foreach=False``) and multi-tensor
(``foreach=True``), compiled alone (``torch.compile(opt.step)``) and inside a compiled
training step, trains a small random model three steps beside an eager twin; the losses,
parameters and optimizer states must match eager's. The rarer variants run on fewer
combinations (the GPU suite, ``tests/gpu/test_optimizers_gpu.py``, runs them all):
``fused=True`` where torch has it on the CPU, ``lr`` as a tensor stepped by a scheduler (no
compile after the second step), and ``lr`` as a float stepped by a scheduler (one compile per
new value, as with torch's own backends). ``capturable=True`` is CUDA-only in eager torch.
"""

from __future__ import annotations

import pytest

import sdk
from tests.optimizers import OPTIMIZERS, WHERE, counting, lambda_lr, run_both, step_lr

BACKEND = "sdk:cpu_cpp"


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_matches_eager(name, foreach, where):
    out = run_both(name, BACKEND, where=where, foreach=foreach)
    assert out.counts[0] > 0, "nothing compiled at the first step"
    # the state exists after the first step (SGD's momentum buffers after the second): the
    # third step runs the programs compiled before
    assert out.counts[2] == 0, [g.name for g in out.per_step[2]]


def _whole(graphs, generated: bool = True) -> None:
    """No op of these graphs ran through ATen; ``generated``: every op ran in a generated
    kernel (no library call either), and the native runner ran each graph."""
    assert graphs
    for g in graphs:
        assert not g.fallbacks, str(g)
        if generated:
            assert g.generated_fraction == 1.0, str(g)
            # (SDK_RUNNER=check: the runner runs it, checked against the interpreter)
            assert g.runner == "native" or g.runner.startswith("check"), str(g)


@pytest.mark.parametrize("name", ["adam", "sgd_momentum"])
def test_foreach_step_runs_in_generated_kernels(name):
    """The multi-tensor ops of a foreach step (``_foreach_addcdiv``, ``_foreach_lerp``, ...)
    are decomposed per tensor: the step graphs run whole in generated kernels, by the native
    runner (no op returning a list of tensors is left, which only the step interpreter runs)."""
    out = run_both(name, BACKEND, foreach=True)
    _whole([g for graphs in out.per_step for g in graphs])


@pytest.mark.parametrize("where", WHERE)
def test_foreach_gradient_clipping_matches_eager(where):
    """``clip_grad_norm_(foreach=True)`` (``_foreach_norm`` and ``_foreach_mul``) before a
    foreach Adam step: it clips (the gradients' norm is above 0.05 here), and nothing runs
    through ATen; compiled alone, the clipping and the step run whole in generated kernels
    (in a training step the matrix products are library calls)."""
    out = run_both("adam", BACKEND, where=where, foreach=True, clip=0.05)
    _whole([g for graphs in out.per_step for g in graphs], generated=where == "alone")


@pytest.mark.parametrize(
    ("name", "where"),
    [("sgd_momentum", "step"), ("adam", "alone"), ("adamw", "step"), ("adagrad", "alone")],
)
def test_fused_optimizer_matches_eager(name, where):
    """torch.compile does not trace a fused optimizer (torch marks it
    ``torch.compiler.disable``, for Inductor too): its step runs torch's fused kernel
    between the compiled graphs, and the result is eager's."""
    out = run_both(name, BACKEND, where=where, fused=True)
    assert any("fused" in b.reason for b in out.breaks), [str(b) for b in out.breaks]


@pytest.mark.parametrize("name", ["sgd_momentum", "adam", "rmsprop_centered", "asgd"])
def test_tensor_lr_with_scheduler_does_not_recompile(name, builds):
    """``lr`` as a tensor, changed by a scheduler at every step: the programs compiled by
    the second step (the state is made at the first, SGD's momentum at the second) serve
    every later step, with no variant of them built either."""
    out = run_both(name, BACKEND, steps=4, scheduler=lambda_lr, tensor_lr=True, foreach=False)
    assert out.counts[0] > 0
    assert out.counts[2:] == [0, 0], out.counts
    assert len(builds) == sum(out.counts[:2]), builds


def test_tensor_lr_with_scheduler_in_a_compiled_training_step(builds):
    out = run_both(
        "adamax", BACKEND, where="step", steps=4, scheduler=step_lr, tensor_lr=True, foreach=True
    )
    assert out.counts[2:] == [0, 0], out.counts
    assert len(builds) == sum(out.counts[:2]), builds


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_float_lr_with_scheduler_recompiles_no_more_than_aot_eager(name):
    """A float ``lr`` may be a constant of the graph: each new value then compiles again
    (torch's advice: make it a tensor). Where Dynamo passes it in as a value instead (it does
    for Adam's foreach step once the value changed), the SDK's program reads it at each call,
    which ``aot_eager`` does not: it guards on the value and compiles once per value. Either
    way each step matches eager (``run_both`` compares the parameters after every step, so a
    stale ``lr`` fails), and the SDK is never asked to compile more often than ``aot_eager``,
    whose Dynamo and AOTAutograd front end is Inductor's (the GPU suite compares with Inductor
    itself): the SDK adds no recompile of its own."""
    from torch._dynamo.backends.debugging import aot_eager

    asked = {"sdk": 0, "aot_eager": 0}

    kw = {"scheduler": step_lr, "steps": 4, "foreach": name == "adam"}
    out = run_both(name, counting(asked, "sdk", sdk.backend("cpu_cpp")), **kw)
    assert all(n <= 1 for n in out.counts), out.counts  # at most one program per lr value
    sdk.reset()
    run_both(name, counting(asked, "aot_eager", aot_eager), **kw)
    assert 0 < asked["sdk"] <= asked["aot_eager"], asked
