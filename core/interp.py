"""The Python executor of a compiled graph's program: the steps the native runner runs.

:func:`program` turns a program's steps (core/steps.py) into ``call(args)``, which executes
them as the native runner (core/runner.cpp) does, step for step: the same allocations,
views, launches and library calls in the same order, so the two give equal bits. It runs
where the runner does not: ``options={"runner": "python"}``, wherever the runner cannot be
built, and a program with a step the runner cannot take (``Wrapper.native_why``: a kernel
of more than ``MAX_LAUNCH_ARGS`` arguments, which the interpreter has no limit on; a library
call with no CALL form, written as a CALL_PY of a Python function). There is no other form
of a program: what the interpreter runs is the reference the runner is checked against
(``options={"runner": "check"}``).

It interprets the wrapper's form of a step (core/isa.py's ``written``: kernels as their
Python functions, ops as ``OpOverload``, constants by name), the form the wrapper writes and
the whole-graph cache keeps, so no C entry point or schema lookup is needed to run it (a
runner-form LAUNCH_PY, whose fields are a LAUNCH's, runs too). The steps are decoded once,
by opcode number through core/isa.py's table, into one closure per step (:data:`_MAKERS`:
one maker per opcode, which receives the step's fields by name); a call runs the closures
over a list of slots. WRITES steps cost nothing per call: they split the closures into
segments, and a step that raises after one marks the inputs written by then, as the
runner's ``mark_writes`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import torch

from . import isa
from . import steps as st
from .adapters.torch_private import buffer_ops, real_mode

#: ATen ops whose public ``torch`` function runs the same overload with less per-call host
#: work than calling the ``OpOverload`` (its schema-driven argument conversion costs about
#: 6 us more per call on an H100 host: a graph with 60 convolutions pays 0.4 ms a call).
#: The keyword arguments each function takes by the schema's names.
_PUBLIC_FUNCTIONS: dict[str, tuple[str, frozenset[str]]] = {
    "aten.convolution.default": ("convolution", frozenset()),
    "aten.mm.default": ("mm", frozenset()),
    "aten.bmm.default": ("bmm", frozenset()),
    "aten.addmm.default": ("addmm", frozenset({"beta", "alpha"})),
    "aten.baddbmm.default": ("baddbmm", frozenset({"beta", "alpha"})),
    "aten._addmm_activation.default": ("_addmm_activation", frozenset({"beta", "alpha"})),
}

#: one step's closure: ``run(slots, args)``
Run = Callable[[list, Any], None]


class _Decoder:
    """What the makers share while one program is decoded: its constants, and the buffer
    constructors of each device its EMPTY steps name (core/adapters' ``buffer_ops``)."""

    def __init__(
        self,
        constants: dict[str, torch.Tensor],
        device: torch.device,
        n_slots: int,
        named: dict[str, Any],
        check_result: Callable[..., tuple] | None,
    ) -> None:
        self.constants, self.device = constants, device
        self._ops: dict[str, tuple] = {}
        self.view = buffer_ops(device)[2]
        #: registers live after the slots, in the same list: register r is s[base + r]
        self.base = n_slots
        self.named, self.check_result = named, check_result

    def operands(self, xs: list) -> tuple[tuple | None, Callable[[list], tuple] | None]:
        """A list of size operands (an int, or ``(r,)`` register r): ``(the tuple, None)``
        where all are literals, else ``(None, a getter of the tuple from the slots)``."""
        if all(type(x) is int for x in xs):
            return tuple(xs), None
        regs = [(k, self.base + x[0]) for k, x in enumerate(xs) if type(x) is not int]
        template = [x if type(x) is int else 0 for x in xs]

        def get(s: list) -> tuple:
            out = template.copy()
            for k, r in regs:
                out[k] = s[r]
            return tuple(out)

        return None, get

    def at_call(self, xs: list) -> Callable[[list], tuple]:
        """A getter of the operands' tuple from the slots, whether or not one is a register."""
        fixed, get = self.operands(xs)
        return get or (lambda s: fixed)

    def buffer_ops(self, device: str) -> tuple:
        ops = self._ops.get(device)
        if ops is None:
            ops = self._ops[device] = buffer_ops(torch.device(device))
        return ops


_MAKERS: dict[str, Callable[..., Any]] = {}


def _maker(name: str) -> Callable:
    def register(fn: Callable) -> Callable:
        _MAKERS[name] = fn
        return fn

    return register


@_maker("INPUT")
def _input(d: _Decoder, dst: int, index: int) -> Run:
    def run(s: list, a: Any) -> None:
        s[dst] = a[index]

    return run


@_maker("CONST")
def _const(d: _Decoder, dst: int, name: str, on_device: bool = False) -> Run:
    """A constant; a host constant's device copy is made once, here (as the runner makes it
    when the program is loaded), outside any fake mode of the compile."""
    if name not in d.constants:
        raise ValueError(f"the program reads constant {name!r}, which the graph has not")
    tensor = d.constants[name]
    if on_device:
        tensor = device_copy(tensor, d.device)

    def run(s: list, a: Any) -> None:
        s[dst] = tensor

    return run


def _static(*operand_lists: list) -> bool:
    """Whether every operand is a literal (no register)."""
    return all(type(x) is int for xs in operand_lists for x in xs)


def device_copy(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host constant's copy on the graph's device, as both executors make it once, when the
    program is loaded: contiguous, and real (outside any fake mode of the compile)."""
    with real_mode():
        return tensor.to(device).contiguous()


@_maker("ALIAS")
def _alias(d: _Decoder, dst: int, src: int) -> Run:
    def run(s: list, a: Any) -> None:
        s[dst] = s[src]

    return run


@_maker("EMPTY")
def _empty(d: _Decoder, dst: int, sizes: list, strides: list, dtype: Any, device: str) -> Run:
    """The device's fast allocator where it allocates on this device (the current one, as
    the runner checks per EMPTY), else ``torch.empty_strided``."""
    empty, fast, _, is_current = d.buffer_ops(device)
    if not _static(sizes, strides):
        sizes_of, strides_of = d.at_call(sizes), d.at_call(strides)
        pick = (lambda: fast if is_current() else empty) if fast and is_current else None
        chosen = fast or empty

        def run(s: list, a: Any) -> None:
            s[dst] = (pick() if pick else chosen)(sizes_of(s), strides_of(s), dtype)

        return run
    sizes, strides = tuple(sizes), tuple(strides)
    if fast is None:

        def run(s: list, a: Any) -> None:
            s[dst] = empty(sizes, strides, dtype)

    elif is_current is None:

        def run(s: list, a: Any) -> None:
            s[dst] = fast(sizes, strides, dtype)

    else:

        def run(s: list, a: Any) -> None:
            s[dst] = (fast if is_current() else empty)(sizes, strides, dtype)

    return run


@_maker("VIEW")
def _view(d: _Decoder, dst: int, src: int, sizes: list, strides: list, offset: int) -> Run:
    """src's storage reinterpreted, the offset relative to src's, with no view record."""
    view = d.view
    if not _static(sizes, strides, [offset]):
        sizes_of, strides_of = d.at_call(sizes), d.at_call(strides)
        offset_of = d.at_call([offset])

        def run_symbolic(s: list, a: Any) -> None:
            s[dst] = view(s[src], sizes_of(s), strides_of(s), offset_of(s)[0])

        return run_symbolic
    sizes, strides = tuple(sizes), tuple(strides)

    def run(s: list, a: Any) -> None:
        s[dst] = view(s[src], sizes, strides, offset)

    return run


@_maker("AS_STRIDED")
def _as_strided(
    d: _Decoder, dst: int, src: int, sizes: list, strides: list, offset: int, relative: bool
) -> Run:
    as_strided = torch.as_strided
    if not _static(sizes, strides, [offset]):
        sizes_of, strides_of = d.at_call(sizes), d.at_call(strides)
        offset_of = d.at_call([offset])

        def run_symbolic(s: list, a: Any) -> None:
            t = s[src]
            base = t.storage_offset() if relative else 0
            s[dst] = as_strided(t, sizes_of(s), strides_of(s), base + offset_of(s)[0])

        return run_symbolic
    sizes, strides = tuple(sizes), tuple(strides)
    if relative:

        def run(s: list, a: Any) -> None:
            t = s[src]
            s[dst] = as_strided(t, sizes, strides, t.storage_offset() + offset)

    else:

        def run(s: list, a: Any) -> None:
            s[dst] = as_strided(s[src], sizes, strides, offset)

    return run


@_maker("LAUNCH")
@_maker("LAUNCH_PY")
def _launch(d: _Decoder, function: Callable, slots: list, sizes: list, **_: Any) -> Run:
    """The kernel through its Python function: ``function(tensors..., sizes...)`` (the
    runner's form's C entry point, error and state, where given, are the runner's)."""
    sizes, get_sizes = d.operands(sizes)
    if get_sizes is not None:

        def run_symbolic(s: list, a: Any) -> None:
            function(*[s[i] for i in slots], *get_sizes(s))

        return run_symbolic
    if sizes or not 0 < len(slots) <= 4:

        def run(s: list, a: Any) -> None:
            function(*[s[i] for i in slots], *sizes)

    elif len(slots) == 1:
        (t0,) = slots

        def run(s: list, a: Any) -> None:
            function(s[t0])

    elif len(slots) == 2:
        t0, t1 = slots

        def run(s: list, a: Any) -> None:
            function(s[t0], s[t1])

    elif len(slots) == 3:
        t0, t1, t2 = slots

        def run(s: list, a: Any) -> None:
            function(s[t0], s[t1], s[t2])

    else:
        t0, t1, t2, t3 = slots

        def run(s: list, a: Any) -> None:
            function(s[t0], s[t1], s[t2], s[t3])

    return run


@_maker("CALL")
def _call(d: _Decoder, op: Any, args: list, outs: list, multi: bool) -> Run:
    """An ATen op, one argument per schema argument: its Python call converts each by the
    schema's type as the runner's decoder does (a Python number where the schema takes a
    Tensor becomes a wrapped number), and a DEFAULT is left out, so the schema's default
    is taken; the arguments after it are passed by name."""
    schema = op._schema
    if len(args) != len(schema.arguments):
        raise ValueError(f"{op}: {len(args)} arguments, the schema takes {len(schema.arguments)}")
    pos: list = []
    kw: dict[str, Any] = {}
    fills: list[tuple[Any, Any]] = []  # (position or name, a slot or a getter)
    by_name = False
    for arg, formal in zip(args, schema.arguments):
        if arg[0] == st.DEFAULT:
            if not formal.has_default_value():
                raise ValueError(f"{op}: argument {formal.name} has no default")
            by_name = True
            continue
        by_name = by_name or formal.kwarg_only
        value, get = _ARGS[arg[0]](d, *arg[1:])
        if by_name:
            kw[formal.name] = value
        else:
            pos.append(value)
        if get is not None:
            fills.append((formal.name if by_name else len(pos) - 1, get))
    fn: Any = op
    public = _PUBLIC_FUNCTIONS.get(str(op))
    if public is not None and set(kw) <= public[1] and all(a[0] != st.NUMBER for a in args):
        fn = getattr(torch, public[0])
    store = _results(schema, outs, multi)
    # positional slots, positional getters, keyword fills (a slot or a getter)
    slots = [(w, g) for w, g in fills if type(w) is int and type(g) is int]
    gets = [(w, g) for w, g in fills if type(w) is int and type(g) is not int]
    named = [(w, g) for w, g in fills if type(w) is str]
    if not gets and not named and not kw:

        def run(s: list, a: Any) -> None:
            p = pos.copy()
            for i, j in slots:
                p[i] = s[j]
            store(s, fn(*p))

        return run

    def run(s: list, a: Any) -> None:
        p = pos.copy()
        for i, j in slots:
            p[i] = s[j]
        for i, get in gets:
            p[i] = get(s)
        k = kw.copy()
        for name, get in named:
            k[name] = s[get] if type(get) is int else get(s)
        store(s, fn(*p, **k))

    return run


def _arg_slot(d: _Decoder, slot: int) -> tuple:
    return None, slot  # (read straight from the slots)


def _arg_tensors(d: _Decoder, slots: list) -> tuple:
    return None, lambda s: [s[i] for i in slots]


def _arg_optional_tensors(d: _Decoder, slots: list) -> tuple:
    return None, lambda s: [None if i < 0 else s[i] for i in slots]


def _arg_value(d: _Decoder, value: Any) -> tuple:
    return value, None


def _arg_reg(d: _Decoder, reg: int) -> tuple:
    r = d.base + reg
    return None, lambda s: s[r]


def _arg_ints(d: _Decoder, values: list) -> tuple:
    fixed, get = d.operands(values)
    return (list(fixed), None) if get is None else (None, lambda s: list(get(s)))


#: each CALL argument kind (core/isa.py's ARG_KINDS, by tag): (a constant, None) or (None,
#: its slot, or a getter of the value from the slots). NUMBER: the Python number, which the op's schema
#: conversion makes a wrapped-number tensor of, as the runner does
_ARGS: dict[int, Callable[..., tuple]] = {
    st.SLOT: _arg_slot,
    st.VALUE: _arg_value,
    st.TENSORS: _arg_tensors,
    st.OPTIONAL_TENSORS: _arg_optional_tensors,
    st.NUMBER: _arg_value,
    st.REG: _arg_reg,
    st.INTS: _arg_ints,
}


def _results(schema: Any, outs: list, multi: bool) -> Callable[[list, Any], None]:
    """How a CALL's result reaches its slots, as the runner's stack does: a multi-output
    op's Tensor[] spread over ``outs``; else each returned value in order, a non-tensor as
    None (undefined)."""
    pairs = [(k, o) for k, o in enumerate(outs) if o >= 0]
    if not pairs:
        return lambda s, r: None
    one = len(schema.returns) == 1
    if one and str(schema.returns[0].type) == "Tensor" and pairs == [(0, pairs[0][1])]:
        dst = pairs[0][1]

        def store_tensor(s: list, r: Any) -> None:
            s[dst] = r

        return store_tensor

    def store(s: list, r: Any) -> None:
        values = r if not one or (multi and isinstance(r, list)) else (r,)
        for k, o in pairs:
            if k < len(values):
                v = values[k]
                s[o] = v if isinstance(v, torch.Tensor) else None

    return store


@_maker("INPUT_SIZE")
def _input_size(d: _Decoder, reg: int, index: int, which: int, dim: int) -> Run:
    """A register from the input's size(dim) (which 0), stride(dim) (1) or storage offset (2)."""
    r = d.base + reg
    if which == 0:

        def run(s: list, a: Any) -> None:
            s[r] = a[index].size(dim)

    elif which == 1:

        def run(s: list, a: Any) -> None:
            s[r] = a[index].stride(dim)

    elif which == 2:

        def run(s: list, a: Any) -> None:
            s[r] = a[index].storage_offset()

    else:
        raise ValueError(f"input size kind {which} (0 size, 1 stride, 2 storage offset)")
    return run


@_maker("INPUT_INT")
def _input_int(d: _Decoder, reg: int, index: int) -> Run:
    r = d.base + reg

    def run(s: list, a: Any) -> None:
        v = a[index]
        if type(v) is not int:
            raise TypeError(f"sdk runner: graph input {index} is not an int")
        s[r] = v

    return run


@_maker("EXPR")
def _expr(d: _Decoder, reg: int, terms: list) -> Run:
    """The postfix terms' value (Python's ``//`` and ``%``, as the runner computes them)."""
    r, base = d.base + reg, d.base
    code = [
        (t[0], t[1] + base if t[0] == st.TERM_REG else (t[1] if len(t) > 1 else 0)) for t in terms
    ]
    binary = {
        st.TERM_ADD: lambda x, y: x + y,
        st.TERM_MUL: lambda x, y: x * y,
        st.TERM_FLOORDIV: lambda x, y: x // y,
        st.TERM_MOD: lambda x, y: x % y,
    }

    def run(s: list, a: Any) -> None:
        stack: list[int] = []
        for kind, x in code:
            if kind == st.TERM_LIT:
                stack.append(x)
            elif kind == st.TERM_REG:
                stack.append(s[x])
            elif kind == st.TERM_NEG:
                stack[-1] = -stack[-1]
            else:
                y = stack.pop()
                stack[-1] = binary[kind](stack[-1], y)
        s[r] = stack[0]

    return run


@_maker("CALL_PY")
def _call_py(
    d: _Decoder,
    function: str,
    args: list,
    names: list,
    outs: list,
    multi: bool,
    specs: list,
    who: str,
) -> Run:
    """A plugin's own library function, by its name in the program's table, its result
    checked as the runner checks it (the wrapper's ``_vendor_result``)."""
    fn, check = d.named.get(function), d.check_result
    if fn is None or check is None:
        raise ValueError(f"the program calls plugin function {function!r}, which it has not")
    made = [_ARGS[arg[0]](d, *arg[1:]) for arg in args]
    n_pos = len(args) - len(names)
    values = [v for v, _ in made]
    gets = [(k, g) for k, (_, g) in enumerate(made) if g is not None]
    layouts = []
    for spec in specs:
        if spec[0] == st.SPEC_ANY:
            layouts.append(None)
        else:
            layouts.append((d.operands(spec[1]), d.operands(spec[2]), spec[3], spec[4]))

    def run(s: list, a: Any) -> None:
        v = values.copy()
        for k, g in gets:
            v[k] = s[g] if type(g) is int else g(s)
        out_specs = tuple(
            None
            if lay is None
            else (
                lay[0][0] if lay[0][1] is None else lay[0][1](s),
                lay[1][0] if lay[1][1] is None else lay[1][1](s),
                lay[2],
                lay[3],
            )
            for lay in layouts
        )
        result = fn(*v[:n_pos], **dict(zip(names, v[n_pos:])))
        checked = check(result, out_specs, multi, who)
        for k, o in enumerate(outs):
            if o >= 0 and k < len(checked):  # (a number a later step reads, as it is)
                s[o] = checked[k]

    return run


@_maker("RESTRIDE")
def _restride(d: _Decoder, slot: int, dims: list, strides: list) -> Run:
    """slots[slot] copied into these strides where one of its dims has others."""
    fixed, get_strides = d.operands(strides)
    if get_strides is not None and dims:

        def run_symbolic(s: list, a: Any) -> None:
            t, want = s[slot], get_strides(s)
            if t is not None and any(t.stride(k) != want[k] for k in dims):
                out = torch.empty_strided(t.shape, want, dtype=t.dtype, device=t.device)
                out.copy_(t)
                s[slot] = out

        return run_symbolic
    strides = fixed or ()
    if not dims:
        return lambda s, a: None
    pick = itemgetter(*dims)  # (one dim: the stride itself, else a tuple of them)
    want = pick(strides)

    def run(s: list, a: Any) -> None:
        t = s[slot]
        if t is not None and pick(t.stride()) != want:
            out = torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device)
            out.copy_(t)
            s[slot] = out

    return run


@_maker("FREE")
def _free(d: _Decoder, slot: int) -> Run:
    def run(s: list, a: Any) -> None:
        s[slot] = None

    return run


@_maker("WRITES")
def _writes(d: _Decoder, positions: list) -> tuple[int, ...]:
    """Not a closure: :func:`program` splits the steps here (see the module's doc)."""
    return tuple(positions)


@_maker("RETURN")
def _return(d: _Decoder, items: list) -> Callable[[list], tuple]:
    """The outputs as a tuple: a slot's tensor (None where undefined), a register's value
    (a size, as an int), or a value as is."""
    slots = [(k, item[1]) for k, item in enumerate(items) if item[0] == st.ITEM_SLOT]
    slots += [(k, d.base + item[1]) for k, item in enumerate(items) if item[0] == st.ITEM_REG]
    if len(slots) == len(items) > 1 and all(item[0] == st.ITEM_SLOT for item in items):
        return itemgetter(*(slot for _, slot in slots))
    template = [item[1] if item[0] == st.ITEM_VALUE else None for item in items]

    def ret(s: list) -> tuple:
        out = template.copy()
        for k, slot in slots:
            out[k] = s[slot]
        return tuple(out)

    return ret


def _without_aliases(steps: list[tuple]) -> list[tuple[int, tuple]]:
    """``steps`` (each with its index) less each ALIAS whose two slots nothing changes from there on (no step
    writes, frees or restrides either): the later steps read the source's slot instead.
    One closure call less per alias (a memory plan's reuse of a buffer is one)."""
    last: dict[int, int] = {}  # slot -> the last step that changes it
    for i, step in enumerate(steps):
        for slot in _changed(step):
            last[slot] = i
    same: dict[int, int] = {}
    out = []
    for i, step in enumerate(steps):
        if step[0] == st.ALIAS:
            dst, src = step[1], same.get(step[2], step[2])
            if last.get(dst) == i and last.get(src, -1) < i:
                same[dst] = src
                continue
        out.append((i, _slots_mapped(step, same) if same else step))
    return out


def _changed(step: tuple) -> list[int]:
    """The slots a step writes, frees or (RESTRIDE) replaces."""
    if step[0] == st.RESTRIDE:
        return [step[1]]
    out: list[int] = []
    for f, x in zip(_FIELDS[step[0]], step[1:]):
        if f.kind in (isa.SLOT_WRITE, isa.SLOT_FREE):
            out.append(x)
        elif f.kind == isa.SLOT_OUTS:
            out += [y for y in x if y >= 0]
    return out


def _slots_mapped(step: tuple, same: dict[int, int]) -> tuple:
    """``step`` with each slot it names mapped by ``same`` (through its fields' kinds)."""
    return (step[0], *(_mapped(f.kind, x, same) for f, x in zip(_FIELDS[step[0]], step[1:])))


def _mapped(kind: str, x: Any, same: dict[int, int]) -> Any:
    if kind in (isa.SLOT_WRITE, isa.SLOT_READ, isa.SLOT_FREE):
        return same.get(x, x)
    if kind in (isa.SLOT_OUTS, isa.SLOTS_READ, isa.OPTIONAL_SLOTS_READ):
        return [same.get(y, y) for y in x]
    if kind in isa.VARIANTS:
        tags = {v.tag: v.fields for v in isa.VARIANTS[kind]}
        return [(t[0], *(_mapped(g.kind, y, same) for g, y in zip(tags[t[0]], t[1:]))) for t in x]
    return x


#: each opcode's fields in the interpreted form (the wrapper's), by opcode number
_FIELDS = {op.number: op.written or op.fields for op in isa.OPCODES}

#: each opcode's maker and its fields' names in the interpreted form, by opcode number
_TABLE: dict[int, tuple[Callable[..., Any], tuple[str, ...]]] = {
    op.number: (_MAKERS[op.name], tuple(f.name for f in (op.written or op.fields)))
    for op in isa.OPCODES
}


def program(
    steps: list[tuple],
    n_slots: int,
    constants: dict[str, torch.Tensor],
    device: torch.device,
    mark_writes: Callable[[list[int]], None],
    version: int = isa.VERSION,
    n_regs: int = 0,
    named: dict[str, Any] | None = None,
    check_result: Callable[..., tuple] | None = None,
) -> Callable[[Any], tuple]:
    """``call(args)`` executing ``steps`` (the wrapper's form, written for ISA ``version``),
    checked first (:func:`core.steps.check`, a ``ValueError`` naming the step) and decoded
    once."""
    if version != isa.VERSION:
        raise ValueError(
            f"the program was written for ISA version {version}, this interpreter runs "
            f"version {isa.VERSION} (core/isa.py)"
        )
    st.check(steps, n_slots, n_regs, form="written")
    d = _Decoder(constants, device, n_slots, named or {}, check_result)
    segments: list[tuple[tuple[Run, ...], tuple[int, ...] | None]] = []
    runs: list[Run] = []
    written = None
    *body, (_, last) = _without_aliases(steps)
    for i, step in body:
        make, names = _TABLE[step[0]]
        try:
            made = make(d, **dict(zip(names, step[1:])))
        except Exception as exc:  # noqa: BLE001 - named with its step, as the runner does
            raise ValueError(
                f"invalid program: step {i} ({st.describe_step(step)}): {exc}"
            ) from None
        if step[0] == st.WRITES:
            segments.append((tuple(runs), written))
            runs, written = [], made
        else:
            runs.append(made)
    segments.append((tuple(runs), written))
    ret = _return(d, last[1])
    segments = [seg for seg in segments if seg[0]]
    size = n_slots + n_regs  # the slots, then the registers

    def call(args: Any) -> tuple:
        s = [None] * size
        for runs, written in segments:
            try:
                for run in runs:
                    run(s, args)
            except BaseException:
                if written is not None:
                    mark_writes(list(written))
                raise
        return ret(s)

    call.interpreted = True  # type: ignore[attr-defined]
    return call
