"""The program as data: the steps of one program, written part by part (core/wrapper.py).

:class:`StepWriter` holds the :class:`~core.steps.Steps` of one program and adds the steps of
each part the wrapper writes (the inputs, the memory plan's entries, a launch, a library
call, the return), in program order. Sizes that are symbolic (a graph compiled with
``dynamic=True``) become registers: read from the inputs (INPUT_SIZE, INPUT_INT), computed
by EXPR where a size is an expression over them, and each size, stride or offset field
takes the register as an operand ``(r,)``.

Every graph gets steps. A step the native runner cannot take (a kernel of more than
``MAX_LAUNCH_ARGS`` arguments) is still written, with the reason in ``Steps.why``: the step
interpreter (core/interp.py) runs the program then. A library call with no CALL form (not
an ATen op, an argument no schema converts, a number result the graph reads) becomes a
CALL_PY of a Python function that rebuilds its arguments (:class:`Packed`), which only the
interpreter runs (the reason is in ``Steps.why`` too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from . import steps as st
from .fallback import op_name
from .guards import size_sources
from .ir.graph import ExternNode, StorageView
from .ir.index import FloorDiv, Mod, is_static, static
from .ir.kernel import Kernel, Layout
from .lowering import SEED_BUFFER, Lowerer
from .memory import Alias, Carve, Entry, Free

#: the seeds a program draws per call are in [0, SEED_HIGH)
SEED_HIGH = 2**62

#: the number types a library call may return beside its tensors (unread: see call)
_NUMBER_RETURNS = frozenset({"int", "SymInt", "float", "bool", "Scalar"})

_BINARY = {sympy.Add: st.TERM_ADD, sympy.Mul: st.TERM_MUL}


class StepWriter:
    """The steps of one program, in program order.

    ``layouts``: every buffer's planned layout; ``placed``: buffers whose storage offset at
    run time is their layout's; ``input_names``: the graph inputs' buffers; ``copy_of``:
    host value -> its device copy's buffer; ``name``: the name a CALL_PY step calls a
    Python function by (the program's ``named`` table)."""

    def __init__(
        self,
        L: Lowerer,
        layouts: dict[str, Layout],
        placed: set[str],
        input_names: set[str],
        copy_of: dict[str, str],
        name: Callable[[Any], str],
    ) -> None:
        self.L, self.layouts, self.placed = L, layouts, placed
        self.input_names, self.copy_of, self.name = input_names, copy_of, name
        self.steps = st.Steps()

    # ---- sizes: literals, or registers ----

    def bind_sizes(self) -> None:
        """Each size symbol into a register, read from where guards.size_sources finds
        it: an input's size, or an int input."""
        S = self.steps
        for sym, (index, dim) in size_sources(self.L.specs).items():
            r, _ = S.reg(sym)
            if dim is None:
                S.add(st.INPUT_INT, r, index)
            else:
                S.add(st.INPUT_SIZE, r, index, 0, dim)

    def operand(self, x: Any) -> int | tuple[int]:
        """A size, stride or offset as a step's operand: an int, or ``(r,)`` the register
        that holds its value (an EXPR step written first where it is an expression)."""
        if isinstance(x, int):
            return x
        if is_static(x):
            return int(static(x))
        x = sympy.sympify(x)
        r = self.steps.regs.get(x)
        if r is None:
            terms = self._terms(x if x.has(FloorDiv, Mod) else sympy.expand(x))
            r, _ = self.steps.reg(x)
            self.steps.add(st.EXPR, r, terms)
        return (r,)

    def operands(self, xs: Any) -> list:
        return [self.operand(x) for x in xs]

    def _terms(self, e: sympy.Expr) -> list[tuple]:
        """``e`` as EXPR's postfix terms: what ``print_index`` prints, term for term."""
        if e.is_Integer:
            return [(st.TERM_LIT, int(e))]
        if e.is_Symbol:
            r = self.steps.regs.get(e)
            if r is None:
                raise st.NotNative(f"size symbol {e} is not the size of an input")
            return [(st.TERM_REG, r)]
        if isinstance(e, (FloorDiv, Mod)):
            op = st.TERM_FLOORDIV if isinstance(e, FloorDiv) else st.TERM_MOD
            return [*self._terms(e.args[0]), *self._terms(e.args[1]), (op,)]
        if e.is_Add or e.is_Mul:
            args = sorted(e.args, key=sympy.default_sort_key) if e.is_Add else e.args
            out = self._terms(args[0])
            for a in args[1:]:
                out += [*self._terms(a), (_BINARY[type(e)],)]
            return out
        if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
            base = self._terms(e.base)
            return base + [*base, (st.TERM_MUL,)] * (int(e.exp) - 1)
        raise st.NotNative(f"a size expression the runner has no term for: {e}")

    # ---- the prologue ----

    def input(self, name: str, index: int) -> None:
        self.steps.add(st.INPUT, self.steps.slot(name), index)

    def constant(self, name: str) -> None:
        self.steps.add(st.CONST, self.steps.slot(name), name, False)

    def constant_copy(self, host: str) -> None:
        """A host constant's device copy: made once, when the program is loaded, and kept
        (``interp.device_copy``)."""
        self.steps.add(st.CONST, self.steps.slot(self.copy_of[host]), host, True)

    def device_copy(self, host: str) -> None:
        """A host value's device copy: ATen's ``_to_copy`` to the graph's device,
        contiguous, as ``host.to(_dev).contiguous()`` makes it."""
        S = self.steps
        args = [
            (st.SLOT, S.read(host)),
            (st.DEFAULT,),  # dtype
            (st.DEFAULT,),  # layout
            (st.VALUE, torch.device(self.L.device)),
            (st.DEFAULT,),  # pin_memory
            (st.DEFAULT,),  # non_blocking
            (st.VALUE, torch.contiguous_format),
        ]
        S.add(st.CALL, torch.ops.aten._to_copy.default, args, [S.slot(self.copy_of[host])], False)

    def seed(self) -> None:
        """The per-call seed: _make_seed's draw as a library call, the same op from the same
        generator."""
        S = self.steps
        args = [
            (st.VALUE, 0),
            (st.VALUE, SEED_HIGH),
            (st.VALUE, [1]),
            (st.VALUE, torch.int64),
            (st.DEFAULT,),  # layout
            (st.VALUE, torch.device(self.L.device)),
            (st.DEFAULT,),  # pin_memory
        ]
        S.add(st.CALL, torch.ops.aten.randint.low, args, [S.slot(SEED_BUFFER)], False)

    # ---- the memory plan and views ----

    def plan(self, e: Entry) -> None:
        """A memory plan entry: an alias, a free, a carved view, an allocation."""
        S = self.steps
        if isinstance(e, Alias):
            src = S.read(e.src)
            S.add(st.ALIAS, S.slot(e.dst), src)
        elif isinstance(e, Free):
            S.add(st.FREE, S.read(e.buffer))
        elif isinstance(e, Carve):
            lay = e.layout
            src = S.read(e.src)
            sizes, strides = self.operands(lay.sizes), self.operands(lay.strides)
            S.add(st.VIEW, S.slot(e.dst), src, sizes, strides, self.operand(lay.offset))
        else:
            lay, device = e.layout, str(self.L.device)
            sizes, strides = self.operands(lay.sizes), self.operands(lay.strides)
            if lay.offset == 0:
                S.add(st.EMPTY, S.slot(e.dst), sizes, strides, lay.dtype, device)
                return
            flat = S.temp()
            S.add(st.EMPTY, flat, [self.operand(lay.storage_size)], [1], lay.dtype, device)
            S.add(st.VIEW, S.slot(e.dst), flat, sizes, strides, self.operand(lay.offset))

    def view(self, buf: str, layout: Layout, *, result: bool = False) -> int:
        """The steps of the wrapper's ``_restrided``: a slot holding that view of ``buf``."""
        S = self.steps
        src, out = S.read(buf), S.temp()
        sizes, strides = self.operands(layout.sizes), self.operands(layout.strides)
        delta = self.operand(sympy.expand(sympy.sympify(layout.offset) - self.layouts[buf].offset))
        if buf in self.placed and not result:
            S.add(st.VIEW, out, src, sizes, strides, delta)
        elif buf in self.input_names:
            S.add(st.AS_STRIDED, out, src, sizes, strides, delta, True)
        else:
            S.add(st.AS_STRIDED, out, src, sizes, strides, self.operand(layout.offset), False)
        return out

    # ---- launches and library calls ----

    def launch(self, step: Kernel, fn: Callable) -> None:
        """A kernel's launch: its buffers, then its size arguments (registers); one without
        a C entry point (``sdk.NativeEntry``) is launched through Python by the runner (its
        entry point may also come later: the runner program is made when the program is
        loaded, after the plugin loaded its kernels)."""
        n = len(step.args) + len(step.size_args)
        S = self.steps
        if n > st.MAX_LAUNCH_ARGS:  # (the interpreter has no such limit)
            S.refuse(f"kernel {step.name}: {n} arguments, over the runner's {st.MAX_LAUNCH_ARGS}")
        sizes = self.operands(step.size_args)
        S.add(st.LAUNCH, fn, [S.read(a.name) for a in step.args], sizes, step.name)

    def call(self, step: ExternNode, in_place: Any) -> None:
        """A library call as a CALL step: the ATen overload, one argument per schema argument
        (views made into slots of their own first), the slots of its outputs. A collective
        and its wait are ATen ops too (``_c10d_functional``), called in the program's order."""
        op = step.target if in_place is None else in_place
        try:
            args, outs = self._call_form(step, op, in_place)
        except st.NotNative as exc:  # no CALL form: a Python call, which the interpreter runs
            self.steps.refuse(str(exc))
            outs = [] if in_place is not None else self._outs(step)
            self.python_call(op, step, outs, [(st.SPEC_ANY,)] * len(outs), op_name(op))
            return
        self.steps.add(st.CALL, op, args, outs, bool(step.multi_output))

    def _call_form(self, step: ExternNode, op: Any, in_place: Any) -> tuple[list, list]:
        """A CALL step's arguments and output slots, or NotNative."""
        schema = getattr(op, "_schema", None)
        if schema is None:
            raise st.NotNative(f"{getattr(op, '__name__', repr(op))} is not an ATen op")
        for k, r in enumerate(schema.returns):
            kind = str(r.type)
            if kind in ("Tensor", "Tensor?", "Tensor[]"):
                continue
            # a number beside the tensors (the sizes cuDNN's attention returns), which the
            # graph does not read: the runner drops it, as the Python program does
            read = k < len(step.outputs) and bool(step.outputs[k])
            if kind not in _NUMBER_RETURNS or read:
                raise st.NotNative(f"{op_name(op)} returns a {kind}")
        args = []
        for i, formal in enumerate(schema.arguments):
            if i < len(step.args) and not formal.kwarg_only:
                args.append(self._arg(step.args[i], str(formal.type)))
            elif formal.name in step.kwargs:
                args.append(self._arg(step.kwargs[formal.name], str(formal.type)))
            elif formal.has_default_value():
                args.append((st.DEFAULT,))
            else:
                raise st.NotNative(f"{op_name(op)}: argument {formal.name} not given")
        return args, [] if in_place is not None else self._outs(step)

    def _outs(self, step: ExternNode) -> list[int]:
        return [self.steps.slot(o[0]) if o else -1 for o in step.outputs]

    def python_call(self, fn: Any, step: ExternNode, outs: list, specs: list, who: str) -> None:
        """``fn(*step.args, **step.kwargs)`` as a CALL_PY step of the interpreter's: each
        tensor, size and value of the arguments (however nested) passed on its own, and
        :class:`Packed` rebuilding the arguments around them."""
        leaves: list = []
        shape = _flatten((list(step.args), dict(step.kwargs)), leaves)
        args = [self._leaf(x) for x in leaves]
        name = self.name(Packed(fn, shape))
        multi = bool(step.multi_output)
        self.steps.add(st.CALL_PY, name, args, [], outs, multi, specs, who)

    def _leaf(self, x: Any) -> tuple:
        if isinstance(x, StorageView):
            return self._arg(x, "Tensor")
        if isinstance(x, sympy.Expr):
            return (st.REG, self.operand(x)[0]) if not is_static(x) else (st.VALUE, int(static(x)))
        return (st.VALUE, x)

    def _arg(self, x: Any, kind: str) -> tuple:
        """One argument of a CALL step, for a schema argument of type ``kind``."""
        S = self.steps
        if isinstance(x, StorageView):
            if x.layout == self.layouts[x.buffer]:
                return (st.SLOT, S.read(x.buffer))
            return (st.SLOT, self.view(x.buffer, x.layout))
        if kind in ("Tensor", "Tensor?", "Optional[Tensor]") and isinstance(x, (bool, int, float)):
            return (st.NUMBER, x)
        if isinstance(x, (list, tuple)) and kind in ("Tensor[]", "List[Tensor]"):
            return (st.TENSORS, [self._arg(y, kind)[1] for y in x])
        if isinstance(x, (list, tuple)) and kind in ("Tensor?[]", "List[Optional[Tensor]]"):
            return (st.OPTIONAL_TENSORS, [-1 if y is None else self._arg(y, kind)[1] for y in x])
        return self._number(x) or (st.VALUE, _plain(x))

    def _number(self, x: Any, seq: type | tuple[type, ...] = (list, tuple)) -> tuple | None:
        """A symbolic size (REG), or a ``seq`` of sizes one of which is symbolic (INTS, a
        list); None for anything else."""
        if isinstance(x, sympy.Expr) and not is_static(x):
            return (st.REG, self.operand(x)[0])
        if (
            isinstance(x, seq)
            and any(isinstance(y, sympy.Expr) and not is_static(y) for y in x)
            and all(isinstance(y, (int, sympy.Expr)) and not isinstance(y, bool) for y in x)
        ):
            return (st.INTS, self.operands(x))
        return None

    def vendor(self, step: ExternNode, name: str, fn: Callable, who: str) -> None:
        """A library call through the plugin's own function (``named[name]``) as a CALL_PY
        step: each output checked against the op's layout (the wrapper's ``_vendor_result``).
        ``fn``: the function, for an argument of no CALL_PY form (:meth:`python_call`)."""
        S = self.steps
        specs = []
        for out in step.outputs:
            if not out:
                specs.append((st.SPEC_ANY,))
                continue
            lay = out[1]
            sizes, strides = self.operands(lay.sizes), self.operands(lay.strides)
            specs.append((st.SPEC_TENSOR, sizes, strides, lay.dtype, lay.device))
        try:
            args = [self._vendor_arg(a) for a in step.args]
            args += [self._vendor_arg(v) for v in step.kwargs.values()]
        except st.NotNative as exc:  # its arguments rebuilt in Python: the interpreter's
            S.refuse(str(exc))
            self.python_call(fn, step, self._outs(step), specs, who)
            return
        outs = self._outs(step)
        S.add(st.CALL_PY, name, args, list(step.kwargs), outs, bool(step.multi_output), specs, who)

    def _vendor_arg(self, x: Any) -> tuple:
        """One argument of a plugin's function: a tensor, a size, a list of either, a value."""
        if isinstance(x, StorageView):
            return self._arg(x, "Tensor")
        number = self._number(x, list)  # (a tuple stays a tuple: see below)
        if number is not None:
            return number
        if isinstance(x, list) and x and all(isinstance(y, StorageView) for y in x):
            return (st.TENSORS, [self._arg(y, "Tensor")[1] for y in x])
        if _holds(x, lambda y: isinstance(y, (StorageView, sympy.Expr))):
            raise st.NotNative(
                f"an argument of a plugin's function the runner cannot pass: {type(x).__name__}"
            )
        return (st.VALUE, x)

    def restride(self, name: str, dims: list[int], lay: Layout) -> None:
        S = self.steps
        S.add(st.RESTRIDE, S.read(name), dims, self.operands(lay.strides))

    def returns(self, outputs: list[tuple]) -> None:
        """The return: each graph output as a slot, a view of one, a size or a value."""
        S, items = self.steps, []
        for kind, buf, layout in outputs:
            if kind == "buf":
                items.append((st.ITEM_SLOT, S.read(buf)))
            elif kind == "view":
                base = self.layouts[buf]
                slot = S.read(buf) if layout == base else self.view(buf, layout, result=True)
                items.append((st.ITEM_SLOT, slot))
            elif isinstance(buf, sympy.Expr):  # a symbolic size (saved for the backward)
                r = self.operand(buf)
                items.append((st.ITEM_REG, r[0]) if isinstance(r, tuple) else (st.ITEM_VALUE, r))
            else:
                items.append((st.ITEM_VALUE, buf))
        S.add(st.RETURN, items)


class Packed:
    """A Python call whose arguments a CALL_PY step passes flattened: ``fn`` called with
    them rebuilt (``shape``: :func:`_flatten`'s), positional then by name."""

    def __init__(self, fn: Any, shape: Any) -> None:
        self.fn, self.shape = fn, shape
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *leaves: Any) -> Any:
        args, kwargs = _rebuild(self.shape, iter(leaves))
        return self.fn(*args, **kwargs)


_LEAF = object()


def _flatten(x: Any, leaves: list) -> Any:
    """``x``'s structure (lists, tuples, dicts) with each other value appended to ``leaves``."""
    if isinstance(x, (list, tuple)):
        return (type(x), [_flatten(y, leaves) for y in x])
    if isinstance(x, dict):
        return (dict, {k: _flatten(y, leaves) for k, y in x.items()})
    leaves.append(x)
    return _LEAF


def _rebuild(shape: Any, leaves: Any) -> Any:
    if shape is _LEAF:
        return next(leaves)
    kind, inner = shape
    if kind is dict:
        return {k: _rebuild(y, leaves) for k, y in inner.items()}
    return kind(_rebuild(y, leaves) for y in inner)


def _holds(x: Any, pred: Callable[[Any], bool]) -> bool:
    if isinstance(x, (list, tuple)):
        return any(_holds(y, pred) for y in x)
    if isinstance(x, dict):
        return any(_holds(y, pred) for y in x.values())
    return pred(x)


def _plain(x: Any) -> Any:
    """A constant argument the runner converts by the schema's type, or NotNative."""
    if isinstance(x, (list, tuple)):
        return [_plain(y) for y in x]
    if isinstance(x, sympy.Expr):
        if not is_static(x):  # (a size or a list of sizes is a REG or an INTS: _number)
            raise st.NotNative(f"a symbolic size inside an argument: {x}")
        return int(static(x))
    if x is None or isinstance(
        x, (bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)
    ):
        return x
    raise st.NotNative(f"an argument of type {type(x).__name__}")
