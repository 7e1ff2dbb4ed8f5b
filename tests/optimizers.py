"""torch.optim's optimizers run compiled beside an eager twin (issue 47): the helpers of
``tests/e2e/test_optimizers.py`` (sdk:cpu_cpp) and ``tests/gpu/test_optimizers_gpu.py``
(sdk:cuda_triton).

Two copies of one small random model (two linear layers, one without a bias: three
parameters), each with its own optimizer built from the same options, take the same batches;
one runs compiled, the other eagerly. ``where="alone"`` compiles ``opt.step`` by itself (the
gradients come from an eager backward); ``where="step"`` compiles the whole training step:
forward, backward, ``opt.step()`` and ``opt.zero_grad()`` in one function. After each step
the loss and every parameter must match eager (``torch.testing.assert_close``'s defaults),
and after the last step every tensor of the optimizers' state as well. ``clip``: the
gradients are clipped to that total norm before each ``opt.step()``
(``clip_grad_norm_(foreach=True)``), compiled with it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import sdk

O = torch.optim

#: every optimizer of torch.optim, with the options that change its update rule;
#: ``differentiable=False`` (their default) throughout
OPTIMIZERS: dict[str, tuple[type[O.Optimizer], dict[str, Any]]] = {
    "sgd": (O.SGD, {"lr": 0.1}),
    "sgd_momentum": (O.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
    "sgd_nesterov": (O.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    "adam": (O.Adam, {"lr": 0.01, "weight_decay": 0.01}),
    "adam_amsgrad": (O.Adam, {"lr": 0.01, "amsgrad": True}),
    "adamw": (O.AdamW, {"lr": 0.01}),
    "adamax": (O.Adamax, {"lr": 0.01, "weight_decay": 0.01}),
    "adagrad": (O.Adagrad, {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01}),
    "adadelta": (O.Adadelta, {"lr": 1.0, "weight_decay": 0.01}),
    "rmsprop": (O.RMSprop, {"lr": 0.01, "momentum": 0.9}),
    "rmsprop_centered": (O.RMSprop, {"lr": 0.01, "centered": True, "weight_decay": 0.01}),
    "nadam": (O.NAdam, {"lr": 0.01, "weight_decay": 0.01}),
    "radam": (O.RAdam, {"lr": 0.01, "weight_decay": 0.01, "decoupled_weight_decay": True}),
    "asgd": (O.ASGD, {"lr": 0.01, "t0": 1}),  # t0=1: the averaging starts within the run
    "rprop": (O.Rprop, {"lr": 0.01}),
}

#: the optimizers with ``capturable`` (torch.optim's own flag; CUDA only in eager)
CAPTURABLE = tuple(n for n, (cls, _) in OPTIMIZERS.items() if cls not in (O.SGD, O.Adagrad))

WHERE = ("alone", "step")

#: what a report says of a graph whose program raised when run (core/stages/wrap.py):
#: ATen ran it instead, so the compiled result was never checked
RAN_IN_ATEN = "the compiled program raised when run"


def lambda_lr(opt: O.Optimizer) -> O.lr_scheduler.LRScheduler:
    """A scheduler that changes ``lr`` at every step."""
    return O.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0 / (epoch + 1))


def step_lr(opt: O.Optimizer) -> O.lr_scheduler.LRScheduler:
    return O.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)


def model(device: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 4), nn.Tanh(), nn.Linear(4, 2, bias=False)).to(device)


def make_optimizer(
    name: str, params: Any, device: str, tensor_lr: bool = False, **options: Any
) -> O.Optimizer:
    """``OPTIMIZERS[name]`` over ``params`` with ``options`` on top; ``tensor_lr``: ``lr``
    as a 0-d tensor of its own (a scheduler writes it in place)."""
    cls, kw = OPTIMIZERS[name]
    kw = {**kw, "differentiable": False, **options}
    if tensor_lr:
        kw["lr"] = torch.tensor(kw["lr"], device=device)
    return cls(params, **kw)


@dataclass
class Twin:
    """One model and its optimizer (and scheduler), and the step that trains it."""

    model: nn.Module
    opt: O.Optimizer
    sched: O.lr_scheduler.LRScheduler | None
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor | None] = field(init=False)


def _clipped(twin: Twin, clip: float | None, opt_step: Callable[[], Any]) -> Callable[[], Any]:
    """``opt_step`` after ``clip_grad_norm_`` (multi-tensor) where ``clip`` is given."""
    if clip is None:
        return opt_step

    def step() -> Any:
        nn.utils.clip_grad_norm_(twin.model.parameters(), clip, foreach=True)
        return opt_step()

    return step


def _train_step(
    twin: Twin, clip: float | None = None
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    opt_step = _clipped(twin, clip, twin.opt.step)

    def train(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(twin.model(x), y)
        loss.backward()
        opt_step()
        twin.opt.zero_grad()
        return loss

    return train


def _alone_step(twin: Twin, opt_step: Callable[[], Any]) -> Callable:
    def train(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(twin.model(x), y)  # eager forward and backward
        loss.backward()
        opt_step()
        twin.opt.zero_grad()
        return loss.detach()

    return train


@dataclass
class Outcome:
    """What the compiled twin compiled: the reports of each step's new graphs, and each
    graph break."""

    per_step: list[list[sdk.GraphReport]]
    breaks: list[sdk.GraphBreak]

    @property
    def counts(self) -> list[int]:
        return [len(r) for r in self.per_step]


def run_both(
    name: str,
    backend: Any,
    device: str = "cpu",
    *,
    where: str = "alone",
    steps: int = 3,
    scheduler: Callable[[O.Optimizer], O.lr_scheduler.LRScheduler] | None = None,
    tensor_lr: bool = False,
    clip: float | None = None,
    **options: Any,
) -> Outcome:
    """Train the twins ``steps`` steps, compiled with ``backend`` and eagerly, comparing them
    after each step (AssertionError at the first difference); the reports of what compiled."""
    twins = []
    base = model(device)
    for m in (base, copy.deepcopy(base)):
        opt = make_optimizer(name, m.parameters(), device, tensor_lr, **options)
        twins.append(Twin(m, opt, scheduler(opt) if scheduler else None))
    got, want = twins
    if where == "alone":
        opt_step = torch.compile(_clipped(got, clip, got.opt.step), backend=backend)
        got.step = _alone_step(got, opt_step)
    else:
        got.step = torch.compile(_train_step(got, clip), backend=backend)
    want.step = _alone_step(want, _clipped(want, clip, want.opt.step))
    torch.manual_seed(1)
    batches = [(torch.randn(6, 8, device=device), torch.randn(6, 2, device=device))]
    batches += [(torch.randn(6, 8, device=device), torch.randn(6, 2, device=device))]
    outcome = Outcome([], [])
    for i in range(steps):
        x, y = batches[i % len(batches)]
        with sdk.collect_reports() as compiled:
            loss = got.step(x, y)
        outcome.per_step.append(list(compiled.graphs))
        outcome.breaks += compiled.breaks
        torch.testing.assert_close(loss, want.step(x, y), msg=lambda m, i=i: f"loss {i}: {m}")
        for tw in twins:
            if tw.sched is not None:
                tw.sched.step()
        _same_parameters(got.model, want.model, f"after step {i}")
    _same_state(got.opt, want.opt)
    ran_in_aten = [n for r in outcome.per_step for g in r for n in g.notes if RAN_IN_ATEN in n]
    assert not ran_in_aten, ran_in_aten[0]
    return outcome


def _same_parameters(got: nn.Module, want: nn.Module, when: str) -> None:
    for (n, a), b in zip(got.named_parameters(), want.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=lambda m, n=n: f"{n} {when}: {m}")


def _same_state(got: O.Optimizer, want: O.Optimizer) -> None:
    """Every entry of every parameter's state (moments, steps, ...), and the groups' lr.
    Devices may differ: on CUDA, Dynamo makes the compiled optimizer capturable, which keeps
    ``step`` on the GPU where eager keeps it on the CPU."""
    for i, (p, q) in enumerate(zip(_params(got), _params(want), strict=True)):
        a, b = got.state[p], want.state[q]
        assert a.keys() == b.keys(), (i, a.keys(), b.keys())
        for key in a:
            torch.testing.assert_close(
                a[key],
                b[key],
                check_device=False,
                msg=lambda m, i=i, key=key: f"state[{i}][{key!r}]: {m}",
            )
    for g, h in zip(got.param_groups, want.param_groups, strict=True):
        torch.testing.assert_close(g["lr"], h["lr"], check_device=False)


def _params(opt: O.Optimizer) -> list[torch.Tensor]:
    return [p for g in opt.param_groups for p in g["params"]]


def counting(asked: dict[str, int], key: str, compile_fn: Callable) -> Callable:
    """``compile_fn`` as a backend that counts in ``asked[key]`` each graph it is asked to
    compile."""

    def backend(gm: Any, example_inputs: Any) -> Any:
        asked[key] += 1
        return compile_fn(gm, example_inputs)

    return backend
