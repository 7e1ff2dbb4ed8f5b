"""A compiled graph's program as data: the steps of one call, over numbered slots.

:class:`_WrapperWriter <core.program._WrapperWriter>` writes each program twice: as Python
source (the reference, ``options={"runner": "python"}``) and, where every step has a native
form, as a :class:`Steps` list that the native runner (``core/runner.cpp``, built by
:mod:`core.native`) executes with one Python->C++ crossing per call. A program with a step
the runner cannot take (a symbolic size, a constant copied to the device, a plugin's own
library function, a collective, an input that is not a tensor) stays Python, and
``Steps.why`` says why; a kernel with no C entry point is launched through Python from the
runner. (A per-call RNG seed and an input's device copy are library calls: ``randint``,
``_to_copy``.)

Each step is a plain tuple, opcode first (``core/runner.cpp`` lists them); :func:`check`
verifies a list before the runner gets it (every slot written before it is read, opcodes and
argument kinds known), :func:`describe` prints it for ``sdk.explain``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

INPUT, CONST, ALIAS, EMPTY, VIEW, AS_STRIDED, LAUNCH, CALL, RESTRIDE, FREE, WRITES, RETURN = range(
    12
)
#: (the runner's form of a LAUNCH whose kernel has no C entry point: Python launches it)
LAUNCH_PY = 12
NAMES = (
    "input",
    "const",
    "alias",
    "empty",
    "view",
    "as_strided",
    "launch",
    "call",
    "restride",
    "free",
    "writes",
    "return",
    "launch (Python)",
)
#: argument kinds of a CALL: a slot's tensor, a constant, a Tensor[] of slots, a Tensor?[]
#: of slots (-1: None), the schema's default, a Python number where the schema takes a Tensor
SLOT, VALUE, TENSORS, OPTIONAL_TENSORS, DEFAULT, NUMBER = range(6)
#: the most pointer and size arguments one launch may take (core/runner.cpp's call_c)
MAX_LAUNCH_ARGS = 96


class NotNative(Exception):
    """A step the runner has no form for; the message says which and why."""


@dataclass
class Steps:
    """A program's steps, or why it has none (``why``): the Python program runs then."""

    steps: list[tuple] = field(default_factory=list)
    slots: dict[str, int] = field(default_factory=dict)  # buffer name -> slot
    why: str | None = None

    def slot(self, name: str) -> int:
        """The slot of buffer ``name``, given one on first use."""
        s = self.slots.get(name)
        if s is None:
            s = self.slots[name] = len(self.slots)
        return s

    def temp(self) -> int:
        """A slot of its own (a view made for one call's argument)."""
        return self.slot(f"_t{len(self.slots)}")

    def read(self, name: str) -> int:
        """The slot of buffer ``name``, which an earlier step must have written."""
        s = self.slots.get(name)
        if s is None:
            raise NotNative(f"{name} is read before any step writes it")
        return s

    def add(self, *step: Any) -> None:
        self.steps.append(step)

    def refuse(self, why: str) -> None:
        if self.why is None:
            self.why = why


def check(steps: list[tuple], n_slots: int) -> None:
    """Raise ``ValueError`` naming the first step that reads a slot no earlier step wrote,
    or has an unknown opcode or argument kind; the runner trusts what passes."""
    written: set[int] = set()

    def reads(i: int, slot: int) -> None:
        if not 0 <= slot < n_slots or slot not in written:
            raise ValueError(f"step {i} ({describe_step(steps[i])}) reads slot {slot} unwritten")

    for i, s in enumerate(steps):
        op = s[0]
        if op in (INPUT, CONST, EMPTY):
            written.add(s[1])
        elif op in (ALIAS, VIEW, AS_STRIDED):
            reads(i, s[2])
            written.add(s[1])
        elif op in (LAUNCH, LAUNCH_PY):
            for slot in s[2]:
                reads(i, slot)
            if len(s[2]) + len(s[3]) > MAX_LAUNCH_ARGS:
                raise ValueError(f"step {i}: more than {MAX_LAUNCH_ARGS} launch arguments")
        elif op == CALL:
            for arg in s[3]:
                kind = arg[0]
                if kind == SLOT:
                    reads(i, arg[1])
                elif kind in (TENSORS, OPTIONAL_TENSORS):
                    for slot in arg[1]:
                        if slot >= 0 or kind == TENSORS:
                            reads(i, slot)
                elif kind not in (VALUE, DEFAULT, NUMBER):
                    raise ValueError(f"step {i}: unknown argument kind {kind}")
            written.update(o for o in s[4] if o >= 0)
        elif op in (RESTRIDE, FREE):
            reads(i, s[1])
            if op == FREE:
                written.discard(s[1])
        elif op == RETURN:
            for kind, value in s[1]:
                if kind == 0:
                    reads(i, value)
        elif op != WRITES:
            raise ValueError(f"step {i}: unknown opcode {op}")
    if not steps or steps[-1][0] != RETURN:
        raise ValueError("the program does not end with a return")


def describe_step(s: tuple) -> str:
    op, rest = s[0], s[1:]
    name = NAMES[op] if 0 <= op < len(NAMES) else f"op{op}"
    if op == LAUNCH:  # (LAUNCH, kernel function, slots, sizes, kernel name)
        slots = ", ".join(f"%{x}" for x in rest[1])
        return f"launch {rest[3] if len(rest) > 3 else '?'}({slots})"
    if op == CALL:  # (CALL, OpOverload, args, outs, multi)
        args = ", ".join(_arg_text(a) for a in rest[1])
        outs = ", ".join("_" if o < 0 else f"%{o}" for o in rest[2])
        return f"{outs or '_'} = {rest[0]}({args})"
    if op == CONST:
        return f"%{rest[0]} = constant {rest[1]}"
    if op == INPUT:
        return f"%{rest[0]} = input {rest[1]}"
    if op in (ALIAS, VIEW, AS_STRIDED, EMPTY):
        return f"%{rest[0]} = {name} " + ", ".join(_value_text(v) for v in rest[1:])
    return f"{name} " + ", ".join(_value_text(v) for v in rest)


def describe(steps: list[tuple]) -> str:
    """The steps (as :class:`Steps` holds them: kernels as functions, ops as OpOverloads),
    one per line, as ``sdk.explain`` prints them."""
    return "\n".join(f"{i:4d}  {describe_step(s)}" for i, s in enumerate(steps))


def _arg_text(arg: tuple) -> str:
    kind = arg[0]
    if kind == SLOT:
        return f"%{arg[1]}"
    if kind == DEFAULT:
        return "<default>"
    if kind in (TENSORS, OPTIONAL_TENSORS):
        return "[" + ", ".join("None" if s < 0 else f"%{s}" for s in arg[1]) + "]"
    return _value_text(arg[1])


def _value_text(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"tensor{tuple(v.shape)}"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_value_text(x) for x in v) + ")"
    return repr(v)
