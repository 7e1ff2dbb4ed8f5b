"""A compiled graph's program as data: the steps of one call, over numbered slots.

:class:`_WrapperWriter <core.wrapper._WrapperWriter>` writes each program once, as a
:class:`Steps` list (written by :mod:`core.stepwriter`), which two executors run: the native
runner (``core/runner.cpp``, built by :mod:`core.native`), with one Python->C++ crossing per
call, and the step interpreter (:mod:`core.interp`: ``options={"runner": "python"}``, and
wherever the runner cannot be built or cannot take the program). Symbolic sizes are int64
registers (read from the inputs, computed by EXPR); a kernel with no C entry point, and a
plugin's own library function (``sdk_extern``, CALL_PY), are called through Python from the
runner; collectives and their waits are ATen calls. A program with a step the runner cannot
take (a kernel of more than ``MAX_LAUNCH_ARGS`` arguments, a library call with no CALL form,
written as a CALL_PY of a Python function) runs in the interpreter, and ``Steps.why`` says
why. (A per-call RNG seed and an input's device copy are library calls: ``randint``,
``_to_copy``; a host constant's device copy is made once, at load.)

Each step is a plain tuple, opcode first; ``core/isa.py`` declares every opcode and its
fields once, and this module's constants, :func:`check` (the verifier, driven by the fields'
kinds) and :func:`describe` (``sdk.explain``'s program) come from that table, as does the
runner's own verifier (``core/runner.cpp``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from . import isa

#: the opcodes by name (INPUT, CONST, ALIAS, EMPTY, VIEW, AS_STRIDED, LAUNCH, CALL, RESTRIDE,
#: FREE, WRITES, RETURN, LAUNCH_PY, INPUT_SIZE, INPUT_INT, EXPR, CALL_PY) and CALL's argument
#: kinds (SLOT, VALUE, TENSORS, OPTIONAL_TENSORS, DEFAULT, NUMBER, REG, INTS), as
#: core/isa.py declares them
globals().update({op.name: op.number for op in isa.OPCODES})
globals().update({v.name: v.tag for v in isa.ARG_KINDS})
#: RETURN's items, EXPR's terms and CALL_PY's output specs: ITEM_SLOT, ..., TERM_LIT, ...,
#: SPEC_ANY, SPEC_TENSOR
globals().update({f"ITEM_{v.name}": v.tag for v in isa.ITEM_KINDS})
globals().update({f"TERM_{v.name}": v.tag for v in isa.TERM_KINDS})
globals().update({f"SPEC_{v.name}": v.tag for v in isa.SPEC_KINDS})
#: each opcode's name in sdk.explain's program, by number
NAMES = tuple(op.text for op in sorted(isa.OPCODES, key=lambda op: op.number))
MAX_LAUNCH_ARGS = isa.MAX_LAUNCH_ARGS
_BY_NUMBER = {op.number: op for op in isa.OPCODES}
_RETURN = next(op for op in isa.OPCODES if op.name == "RETURN")


class NotNative(Exception):
    """A part of a program with no step of the form tried (the step writer then writes
    another, or, where none exists, the program cannot be written); the message says which
    and why."""


@dataclass
class Steps:
    """A program's steps, and why the native runner cannot take them (``why``; None where it
    can): the step interpreter runs them then."""

    steps: list[tuple] = field(default_factory=list)
    slots: dict[str, int] = field(default_factory=dict)  # buffer name -> slot
    why: str | None = None
    #: what each register holds (a size symbol, an expression over them) -> register
    regs: dict[Any, int] = field(default_factory=dict)

    def reg(self, key: Any) -> tuple[int, bool]:
        """The register that holds ``key``, and whether it is new (then a step must write
        it before any step reads it)."""
        r = self.regs.get(key)
        if r is not None:
            return r, False
        r = self.regs[key] = len(self.regs)
        return r, True

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


class _Invalid(Exception):
    """What is wrong with one step (check adds which step)."""


_INT64 = (-(1 << 63), 1 << 63)
_INDEX_END = 1 << 31  # an input position, a slot count: a C++ int
_POINTER_END = 1 << 64


def check(steps: Any, n_slots: Any, n_regs: Any = 0, form: str = "runner") -> None:
    """Raise ``ValueError`` naming the first step of the runner's form (core/isa.py's
    ``fields``; ``form="written"``: the wrapper's form, which core/interp.py runs) that the
    runner must not run: an unknown opcode, a field count or kind other than the opcode's, a
    slot or register out of range or read before a step wrote it, a LAUNCH over
    ``MAX_LAUNCH_ARGS`` (the runner's form only), strides not one per size, an EXPR whose terms do not leave one
    value, a return before the end or none.
    The runner's own verifier (core/runner.cpp, from the same table) checks the same when
    it loads a program; this one names the problem in Python first."""
    if type(n_slots) is not int or not 0 <= n_slots < _INDEX_END:
        raise ValueError(f"invalid program: {n_slots!r} slots")
    if type(n_regs) is not int or not 0 <= n_regs < _INDEX_END:
        raise ValueError(f"invalid program: {n_regs!r} registers")
    if not isinstance(steps, list):
        raise ValueError(f"invalid program: the steps are a {type(steps).__name__}, not a list")
    v = _Verifier(n_slots, n_regs, form == "runner")
    for i, s in enumerate(steps):
        try:
            v.step(s)
            if v.op is _RETURN and i != len(steps) - 1:
                raise _Invalid("a return before the last step")
        except _Invalid as exc:
            raise ValueError(
                f"invalid program: step {i} ({describe_step(s, runner=v.runner)}): {exc}"
            ) from None
    if not steps or v.op is not _RETURN:
        raise ValueError("invalid program: the program does not end with a return")


class _Verifier:
    """:func:`check`'s walk: each step's fields by their kinds, over the slots written so far."""

    def __init__(self, n_slots: int, n_regs: int = 0, runner: bool = True) -> None:
        self.n_slots, self.n_regs, self.runner = n_slots, n_regs, runner
        self.written: set[int] = set()
        self.regs_written: set[int] = set()
        self.op: isa.Opcode | None = None

    def step(self, s: Any) -> None:
        if not isinstance(s, tuple) or not s:
            raise _Invalid("a step is a tuple, its opcode first")
        op = _BY_NUMBER.get(s[0]) if type(s[0]) is int else None
        if op is None:
            raise _Invalid(f"unknown opcode {s[0]!r}")
        self.op = op
        fields = op.fields if self.runner else (op.written or op.fields)
        if len(s) != 1 + len(fields):
            raise _Invalid(f"{len(s) - 1} fields; {op.text} takes {len(fields)}")
        self.writes: list[int] = []
        self.frees: list[int] = []
        self.reg_writes: list[int] = []
        for f, x in zip(fields, s[1:]):
            self.field(f, x)
        values = {f.kind: x for f, x in zip(fields, s[1:])}
        strides = values.get(isa.STRIDES)
        _one_stride_per_size(values)
        for d in values.get(isa.DIMS, ()):
            if d >= len(strides or ()):
                raise _Invalid(f"dimension {d} of {len(strides or ())} strides")
        capped = sum(len(x) for f, x in zip(fields, s[1:]) if f.name in op.capped)
        if self.runner and capped > isa.MAX_LAUNCH_ARGS:  # (the interpreter has no limit)
            raise _Invalid(f"{capped} launch arguments, more than {isa.MAX_LAUNCH_ARGS}")
        if isa.TERMS in values:
            _one_value_left(values[isa.TERMS])
        self.written.difference_update(self.frees)
        self.written.update(self.writes)
        self.regs_written.update(self.reg_writes)

    def field(self, f: isa.Field, x: Any) -> None:
        kind = f.kind
        if kind in _LISTS:
            if not isinstance(x, (list, tuple)):
                raise _Invalid(f"{f.name} is a {type(x).__name__}, not a list")
            for y in x:
                self.one(f, _LISTS[kind], y)
        else:
            self.one(f, kind, x)

    def one(self, f: isa.Field, kind: str, x: Any) -> None:
        """One value of field ``f`` (one item of a list field), of ``kind``."""
        if kind in _SLOTS:
            if kind in (_OUT, _OPTIONAL) and type(x) is int and x == -1:
                return
            slot = _integer(f, x, 0, self.n_slots)
            if kind in (_OUT, isa.SLOT_WRITE):
                self.writes.append(slot)
                return
            if slot not in self.written:
                raise _Invalid(f"{f.name}: reads slot {slot} unwritten")
            if kind == isa.SLOT_FREE:
                self.frees.append(slot)
        elif kind == isa.REG_WRITE:
            self.reg_writes.append(_integer(f, x, 0, self.n_regs))
        elif kind == isa.REG_READ:
            self.register(f, x)
        elif kind in _OPERANDS:
            if isinstance(x, tuple) and len(x) == 1:
                self.register(f, x[0])
            else:
                _integer(f, x, *_RANGES[_OPERANDS[kind]])
        elif kind in _RANGES:
            _integer(f, x, *_RANGES[kind])
        elif kind in isa.VARIANTS:
            self.variant(f, isa.VARIANTS[kind], x)
        elif kind not in _TYPES or (self.runner and kind in _WRITTEN):
            raise _Invalid(f"{f.name}: {kind} is not a field of the runner's form")
        elif not _TYPES[kind](x):
            a = "an" if kind[0] in "aeiou" else "a"
            raise _Invalid(f"{f.name} is a {type(x).__name__} {_short(x)}, not {a} {kind}")

    def register(self, f: isa.Field, x: Any) -> None:
        r = _integer(f, x, 0, self.n_regs)
        if r not in self.regs_written:
            raise _Invalid(f"{f.name}: reads register {r} unwritten")

    def variant(self, f: isa.Field, variants: tuple[isa.Variant, ...], x: Any) -> None:
        if not isinstance(x, tuple) or not x or type(x[0]) is not int:
            raise _Invalid(f"{f.name}: {_short(x)} is not a tuple, its tag first")
        v = next((v for v in variants if v.tag == x[0]), None)
        if v is None:
            raise _Invalid(f"{f.name}: unknown tag {x[0]}")
        if len(x) != 1 + len(v.fields):
            raise _Invalid(f"{f.name}: {v.name} takes {len(v.fields)} fields, not {len(x) - 1}")
        for g, y in zip(v.fields, x[1:]):
            self.field(isa.Field(f"{f.name} {g.name}", g.kind), y)
        _one_stride_per_size({g.kind: y for g, y in zip(v.fields, x[1:])})


def _one_stride_per_size(values: dict[str, Any]) -> None:
    """A step's (or a tagged tuple's) strides, one per size where it has both."""
    sizes, strides = values.get(isa.SIZES), values.get(isa.STRIDES)
    if sizes is not None and strides is not None and len(strides) != len(sizes):
        raise _Invalid(f"{len(sizes)} sizes but {len(strides)} strides")


_POPS = {v.tag: v.pops for v in isa.TERM_KINDS}


def _one_value_left(terms: list[tuple]) -> None:
    """EXPR's postfix terms (each already checked): no term pops more values than the
    stack holds, and one value is left."""
    depth = 0
    for k, t in enumerate(terms):
        pops = _POPS[t[0]]
        if depth < pops:
            raise _Invalid(f"terms: term {k} pops {pops} values of {depth}")
        depth += 1 - pops
    if depth != 1:
        raise _Invalid(f"terms: {depth} values left, not 1")


def _integer(f: isa.Field, x: Any, low: int, end: int) -> int:
    if type(x) is not int:
        raise _Invalid(f"{f.name} is a {type(x).__name__}, not an int")
    if not low <= x < end:
        raise _Invalid(f"{f.name}: {x} out of range [{low}, {end})")
    return x


def _device(x: Any) -> bool:
    if not isinstance(x, str):
        return False
    try:
        torch.device(x)
    except RuntimeError:
        return False
    return True


_OUT, _OPTIONAL = "slot out", "optional slot read"  # one item of SLOT_OUTS, OPTIONAL_SLOTS_READ
#: a list kind -> the kind of its items
_LISTS = {
    isa.SLOT_OUTS: _OUT,
    isa.SLOTS_READ: isa.SLOT_READ,
    isa.OPTIONAL_SLOTS_READ: _OPTIONAL,
    isa.POSITIONS: isa.INDEX,
    isa.SIZES: "size operand",
    isa.STRIDES: "int operand",
    isa.NAMES: isa.NAME,
    isa.DIMS: isa.INDEX,
    isa.ARGS: isa.ARGS,
    isa.ITEMS: isa.ITEMS,
    isa.TERMS: isa.TERMS,
    isa.SPECS: isa.SPECS,
}
#: an operand kind (an int literal of its range, or a register as (r,)) -> the int kind
_OPERANDS = {"size operand": "size", "int operand": isa.INT, isa.OFFSET: isa.INT}
_SLOTS = {isa.SLOT_WRITE, isa.SLOT_READ, isa.SLOT_FREE, _OUT, _OPTIONAL}
#: an int kind -> its range [low, end)
_RANGES = {
    isa.INDEX: (0, _INDEX_END),
    "size": (0, _INT64[1]),
    isa.INT: _INT64,
    isa.ADDRESS: (1, _POINTER_END),
    isa.STATE: (0, _POINTER_END),
}
_TYPES: dict[str, Any] = {
    isa.BOOL: lambda x: type(x) is bool,
    isa.DTYPE: lambda x: isinstance(x, torch.dtype),
    isa.DEVICE: _device,
    isa.TENSOR: lambda x: isinstance(x, torch.Tensor),
    isa.NAME: lambda x: isinstance(x, str),
    isa.FUNCTION: callable,
    isa.ERROR: lambda x: x is None or callable(x),
    isa.VALUE: lambda x: True,
    isa.NUMBER: lambda x: isinstance(x, (int, float)),
    # the wrapper's form only
    isa.OP: lambda x: hasattr(x, "_schema"),
    isa.CONST_NAME: lambda x: isinstance(x, str),
    isa.KERNEL: callable,
    isa.VENDOR: lambda x: isinstance(x, str),
}
_WRITTEN = {isa.OP, isa.CONST_NAME, isa.KERNEL, isa.VENDOR}


def describe_step(s: Any, runner: bool = False) -> str:
    """One step, as ``sdk.explain`` prints it (the wrapper's form, by its opcode's ``show``);
    ``runner``: a step of the runner's form, each field by name."""
    op = _BY_NUMBER.get(s[0]) if isinstance(s, tuple) and s and type(s[0]) is int else None
    if op is None:
        return _short(s)
    fields = op.fields if runner else (op.written or op.fields)
    if len(s) != 1 + len(fields):
        return f"{op.text} " + ", ".join(_short(x) for x in s[1:])
    if runner:
        return f"{op.text} " + ", ".join(f"{f.name}={_short(x)}" for f, x in zip(fields, s[1:]))
    return op.show.format(**{f.name: _text(f.kind, x) for f, x in zip(fields, s[1:])})


def describe(steps: list[tuple]) -> str:
    """The steps (as :class:`Steps` holds them: kernels as functions, ops as OpOverloads),
    one per line, as ``sdk.explain`` prints them."""
    return "\n".join(f"{i:4d}  {describe_step(s)}" for i, s in enumerate(steps))


def _text(kind: str, x: Any) -> str:
    """A field's value as ``describe_step`` prints it: slots as ``%N``."""
    if kind in (isa.SLOT_WRITE, isa.SLOT_READ, isa.SLOT_FREE):
        return f"%{x}"
    if kind in (isa.SLOT_OUTS, isa.SLOTS_READ, isa.OPTIONAL_SLOTS_READ):
        empty = "_" if kind == isa.SLOT_OUTS else ""
        return ", ".join("_" if s < 0 else f"%{s}" for s in x) or empty
    if kind in (isa.REG_WRITE, isa.REG_READ):
        return f"r{x}"
    if kind in (isa.SIZES, isa.STRIDES):
        return "(" + ", ".join(_operand_text(y) for y in x) + ")"
    if kind == isa.OFFSET:
        return _operand_text(x)
    if kind == isa.TERMS:
        return _terms_text(x)
    if kind == isa.SPECS:
        return ", ".join(_spec_text(y) for y in x)
    if kind in isa.VARIANTS:
        return ", ".join(_variant_text(isa.VARIANTS[kind], item) for item in x)
    if kind in (isa.KERNEL, isa.FUNCTION):
        return getattr(x, "__name__", repr(x))
    if kind in (isa.OP, isa.NAME, isa.CONST_NAME, isa.VENDOR):
        return str(x)
    return _value_text(x)


def _operand_text(x: Any) -> str:
    return f"r{x[0]}" if isinstance(x, tuple) and len(x) == 1 else _value_text(x)


_INFIX = {"ADD": "+", "MUL": "*", "FLOORDIV": "//", "MOD": "%"}


def _terms_text(terms: Any) -> str:
    """EXPR's postfix terms as an infix expression (``(r0 * 4) // r1``)."""
    stack: list[str] = []
    names = {v.tag: v.name for v in isa.TERM_KINDS}
    try:
        for t in terms:
            name = names[t[0]]
            if name == "LIT":
                stack.append(str(t[1]))
            elif name == "REG":
                stack.append(f"r{t[1]}")
            elif name == "NEG":
                stack.append(f"-{stack.pop()}")
            else:
                b, a = stack.pop(), stack.pop()
                stack.append(f"({a} {_INFIX[name]} {b})")
    except (KeyError, IndexError, TypeError):
        return _short(terms)
    return stack[0][1:-1] if len(stack) == 1 and stack[0].startswith("(") else ", ".join(stack)


def _spec_text(spec: Any) -> str:
    if isinstance(spec, tuple) and len(spec) == 5:
        _, sizes, strides, dtype, device = spec
        return f"{_text(isa.SIZES, sizes)}/{_text(isa.STRIDES, strides)} {dtype} {device}"
    return "any"


def _variant_text(variants: tuple[isa.Variant, ...], item: tuple) -> str:
    v = next((v for v in variants if v.tag == item[0]), None)
    if v is None or not v.fields:
        return "<default>" if v is not None else _short(item)
    f, x = v.fields[0], item[1]
    if f.kind == isa.STRIDES:  # an int[] of operands
        return "[" + ", ".join(_operand_text(y) for y in x) + "]"
    if f.kind in (isa.SLOTS_READ, isa.OPTIONAL_SLOTS_READ):
        return "[" + ", ".join("None" if s < 0 else f"%{s}" for s in x) + "]"
    return _text(f.kind, x)


def _short(x: Any) -> str:
    """A value in an error message: a tensor by its shape, at most 80 characters."""
    text = _value_text(x) if not isinstance(x, tuple) or len(x) < 20 else f"({len(x)} items)"
    return text if len(text) <= 80 else text[:77] + "..."


def _value_text(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"tensor{tuple(v.shape)}"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_value_text(x) for x in v) + ")"
    return repr(v)
