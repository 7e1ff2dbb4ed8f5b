"""The ISA fuzz (tests/core/test_isa.py), in a process of its own so that a crash of the
native runner is a failed test, not a dead pytest worker.

    python -m tests.isa_fuzz_worker --seed 0 --mutations 400

Compiles a few small graphs with ``sdk:cpu_cpp`` and keeps the programs the native runner
is given (the runner's form, core/isa.py), then mutates them at random: an int's bit
flipped, a value of another type, a field dropped or duplicated, an opcode swapped, steps
dropped, swapped or cut off, fewer slots. Each mutant goes to ``steps.check`` and to the
runner's ``Program`` constructor (never run: a mutated address would be called). Prints one
JSON line: the counts, the opcodes the programs held, and every disagreement, where the two
verifiers must agree exactly: the runner's verifier refuses (``ValueError``, "invalid
program") a mutant iff ``steps.check`` refuses it, at the same step; a mutant both accept
may still be refused by the runner's decoder (an op's schema), also with a ``ValueError``; any
other exception is a problem too.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable
from typing import Any

import torch

import sdk
from sdk.core import isa, native
from sdk.core import steps as st
from sdk.core.wrapper import _vendor_result


def programs() -> list[tuple[list, int, int]]:
    """The runner's programs of a few small graphs (forward and backward, static and
    symbolic sizes), as the wrapper hands them to ``native.program``: (steps, slots,
    registers)."""
    seen: list[tuple[list, int, int]] = []
    real = native.program

    def record(steps: list, n_slots: int, *args: Any, n_regs: int = 0) -> Any:
        seen.append((steps, n_slots, n_regs))
        return real(steps, n_slots, *args, n_regs=n_regs)

    native.program = record
    try:
        for fn, args, dynamic in _graphs():
            torch._dynamo.reset()
            backend = sdk.backend("cpu_cpp", cache=False)
            compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
            out = compiled(*args)
            loss = sum(o.float().sum() for o in out if isinstance(o, torch.Tensor) and o.grad_fn)
            if isinstance(loss, torch.Tensor):
                loss.backward()
    finally:
        native.program = real
    return [*seen, (_written_by_hand(), 5, 3)]


def _add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    torch.add(a, b, out=out)


def _neg(t: torch.Tensor) -> torch.Tensor:
    return -t


def _written_by_hand() -> list:
    """A valid program with the opcodes the graphs above do not use: CONST, FREE, LAUNCH_PY,
    INPUT_SIZE, CALL_PY, a RETURN of a Python value and of a register. Run on
    ``[x, n]`` (x of 4 elements): ``-(cat([x, x + 1]) * 2), None, n``."""
    I, S = st.SLOT, st.TENSORS
    spec = (st.SPEC_TENSOR, [(1,)], [1], torch.float32, "cpu")
    return [
        (st.INPUT, 0, 0),
        (st.CONST, 1, torch.ones(4)),
        (st.INPUT_SIZE, 0, 0, 0, 0),
        (st.INPUT_INT, 2, 1),
        (st.EXPR, 1, [(st.TERM_LIT, 2), (st.TERM_REG, 0), (st.TERM_MUL,)]),
        (st.EMPTY, 2, [(0,)], [1], torch.float32, "cpu"),
        (st.LAUNCH_PY, _add, [0, 1, 2], []),
        (st.CALL, "aten::cat", "", [(S, [0, 2]), (st.VALUE, 0)], [3], False),
        (st.FREE, 2),
        (st.CALL, "aten::mul", "Tensor", [(I, 3), (st.NUMBER, 2.0)], [2], False),
        (st.CALL_PY, _neg, [(I, 2)], [], [4], False, [spec], "_neg", _vendor_result),
        (st.RETURN, [(st.ITEM_SLOT, 4), (st.ITEM_VALUE, None), (st.ITEM_REG, 2)]),
    ]


def _graphs() -> list[tuple[Callable, tuple, bool]]:
    def writes_and_views(buf, idx, x):
        buf.add_(1)  # a graph input written in place: WRITES
        y = x.t()[1:] * 2  # a view of an input at an offset
        buf[idx] = y.sum(1)[: idx.numel()]  # index_put_: a Tensor?[] argument
        return y, buf.view(2, -1)

    def mlp(x, w1, w2):
        h = torch.nn.functional.gelu(x @ w1)
        return (torch.cat([h, x], 1) @ w2).softmax(-1), h.mean()

    def dropout(x):
        return torch.nn.functional.dropout(x, 0.5, training=True).relu() + 1

    def symbolic(x, y):  # sizes in registers: a view, a kernel's size arguments, a size out
        return (x.view(-1, 4) * y).sum(1), x[1:].t().contiguous(), x.shape[0] * 2

    torch.manual_seed(0)
    return [
        (writes_and_views, (torch.randn(8), torch.tensor([0, 3, 5]), torch.randn(6, 5)), False),
        (
            mlp,
            (
                torch.randn(4, 8),
                torch.randn(8, 16, requires_grad=True),
                torch.randn(24, 4, requires_grad=True),
            ),
            False,
        ),
        (dropout, (torch.randn(16, 8),), False),
        (symbolic, (torch.randn(6, 8, requires_grad=True), torch.randn(4)), True),
    ]


# ---- mutations: each returns a new program (the original's leaves shared, not copied) ----


def _places(x: Any, path: tuple = ()) -> list[tuple]:
    """Every position in a nested structure of tuples and lists: paths of indexes."""
    out = [path] if path else []
    if isinstance(x, (tuple, list)) and not isinstance(x, str):
        for i, y in enumerate(x):
            out += _places(y, (*path, i))
    return out


def _get(x: Any, path: tuple) -> Any:
    for i in path:
        x = x[i]
    return x


def _edit(x: Any, path: tuple, fn: Callable[[list, int], None]) -> Any:
    """A copy of ``x`` down ``path`` (tuples stay tuples), ``fn(items, index)`` applied to
    the items of the container that holds the last index."""
    items = list(x)
    if len(path) == 1:
        fn(items, path[0])
    else:
        items[path[0]] = _edit(x[path[0]], path[1:], fn)
    return tuple(items) if isinstance(x, tuple) else items


def _flip(rng: random.Random, v: int) -> int:
    bit = rng.choice([0, 1, 2, 3, 4, 5]) if rng.random() < 0.6 else rng.randrange(6, 66)
    return v ^ (1 << bit) if rng.random() < 0.9 else -v - 1


_OTHERS = ["x", None, 1.5, True, [], (), [0], (0,), (5,), -1, 2**70, torch.float32]


def mutate(
    rng: random.Random, steps: list, n_slots: int, n_regs: int
) -> tuple[list, int, int, str]:
    """One random mutation of a program: (steps, n_slots, n_regs, what was done)."""
    if rng.random() < 0.05:
        return steps, n_slots, max(0, n_regs - rng.randrange(1, 3)), "registers"
    steps, n_slots, what = _mutate(rng, steps, n_slots)
    return steps, n_slots, n_regs, what


def _mutate(rng: random.Random, steps: list, n_slots: int) -> tuple[list, int, str]:
    places = _places(steps)
    ints = [p for p in places if type(_get(steps, p)) is int]
    kind = rng.choice(
        ["flip", "flip", "flip", "type", "drop", "dup", "opcode", "cut", "swap", "slots"]
    )
    if kind == "flip" and ints:
        p = rng.choice(ints)
        return _edit(steps, p, lambda a, i: a.__setitem__(i, _flip(rng, a[i]))), n_slots, kind
    if kind == "type":
        p = rng.choice(places)
        other = rng.choice(_OTHERS)
        return _edit(steps, p, lambda a, i: a.__setitem__(i, other)), n_slots, kind
    if kind in ("drop", "dup"):
        p = rng.choice([p for p in places if len(p) > 1] or places)
        if kind == "drop":
            return _edit(steps, p, lambda a, i: a.pop(i)), n_slots, kind
        return _edit(steps, p, lambda a, i: a.insert(i, a[i])), n_slots, kind
    if kind == "opcode":
        i = rng.randrange(len(steps))
        code = rng.choice([*range(len(isa.OPCODES)), -1, len(isa.OPCODES)])
        return _edit(steps, (i, 0), lambda a, j: a.__setitem__(j, code)), n_slots, kind
    if kind == "cut":
        return steps[: rng.randrange(len(steps))], n_slots, kind
    if kind == "swap":
        out = list(steps)
        i, j = rng.randrange(len(out)), rng.randrange(len(out))
        out[i], out[j] = out[j], out[i]
        if rng.random() < 0.5:
            del out[i]
        return out, n_slots, kind
    return steps, max(0, n_slots - rng.randrange(1, 4)), "slots"


# ---- the two verifiers ----


def _step(message: str) -> int | None:
    m = re.search(r"invalid program: step (\d+)", message)
    return int(m.group(1)) if m else None


def verdicts(
    mod: Any, steps: list, n_slots: int, n_regs: int
) -> tuple[str | None, str | None, bool]:
    """(steps.check's refusal, the runner's refusal, whether the runner's verifier said it),
    None where one accepted."""
    try:
        st.check(steps, n_slots, n_regs)
        python = None
    except ValueError as exc:
        python = str(exc)
    try:
        mod.Program(steps, n_slots, lambda positions: None, isa.VERSION, n_regs)
        runner = None
    except ValueError as exc:  # std::invalid_argument: the verifier's, or the decoder's
        runner = str(exc)
    verified = runner is not None and "invalid program" in runner
    return python, runner, verified


def fuzz(seed: int, mutations: int) -> dict[str, Any]:
    mod = native.module()
    assert mod is not None, native.why_not()
    corpus = programs()
    rng = random.Random(seed)
    counts = {"both refused": 0, "both accepted": 0, "decoder refused": 0}
    problems: list[str] = []
    for steps, n_slots, n_regs in corpus:  # the programs as written: both accept them
        python, runner, _ = verdicts(mod, steps, n_slots, n_regs)
        if python or runner:
            problems.append(f"an unmutated program refused: {python or runner}")
    x = torch.randn(4)  # (the one written by hand runs, as written)
    hand = mod.Program(_written_by_hand(), 5, lambda positions: None, isa.VERSION, 3)
    out, none, n = hand([x, 5])
    if not (none is None and n == 5 and torch.equal(out, -(torch.cat([x, x + 1]) * 2))):
        problems.append(f"the program written by hand returned {out}, {none}, {n}")
    for k in range(mutations):
        steps, n_slots, n_regs = corpus[k % len(corpus)]
        mutant, slots, regs, what = mutate(rng, steps, n_slots, n_regs)
        try:
            python, runner, verified = verdicts(mod, mutant, slots, regs)
        except Exception as exc:  # noqa: BLE001 - any other exception: a disagreement to report
            problems.append(f"mutation {k} ({what}): {type(exc).__name__}: {exc}"[:400])
            continue
        if python is None and runner is None:
            counts["both accepted"] += 1
        elif python is not None and verified and _step(python) == _step(runner):
            counts["both refused"] += 1
        elif python is None and runner is not None and not verified:
            counts["decoder refused"] += 1
        else:
            problems.append(f"mutation {k} ({what}): steps.check: {python}; runner: {runner}"[:600])
    return {
        "programs": len(corpus),
        "opcodes": sorted({st.NAMES[s[0]] for steps, _, _ in corpus for s in steps}),
        "counts": counts,
        "problems": problems,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutations", type=int, default=400)
    ns = parser.parse_args()
    print(json.dumps(fuzz(ns.seed, ns.mutations)), flush=True)
    # done (the report is out): exit without the interpreter's last collections over all
    # that torch made; exit handlers still run
    import gc

    gc.freeze()
