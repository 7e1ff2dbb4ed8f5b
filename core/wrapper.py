"""The generated wrapper of one program, and the same program as data.

:class:`_WrapperWriter` writes the Python source of ``call(args)`` (bind the inputs, run
every kernel and library call in order over the memory plan, return the outputs) and, step
by step beside it, the program as data (core/steps.py) that the native runner
(core/native.py) runs. :class:`Wrapper` is the result: plain data the whole-graph cache
keeps, which :meth:`Wrapper.materialize` turns into the callable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from sdk.errors import SDKError
from sdk.report import ExternReport

from . import crosscheck, interp, isa
from . import steps as st
from .adapters.torch_private import buffer_ops, real_mode
from .fallback import op_name
from .guards import is_symbolic, size_bindings
from .interp import _PUBLIC_FUNCTIONS
from .ir.graph import ExternNode, StorageView
from .ir.index import is_static, print_size, print_sizes, static
from .ir.kernel import Kernel, Layout
from .lowering import (
    COLLECTIVE_OPS,
    SEED_BUFFER,
    Lowerer,
)
from .memory import (
    Entry,
    plan_memory,
    source_line,
)
from .stepwriter import SEED_HIGH, StepWriter


@dataclass
class Wrapper:
    """The generated wrapper: its source and what the source names (beside the standard
    helpers :meth:`materialize` provides). Plain data, so the whole-graph cache can keep it."""

    source: str
    named: dict[str, Any]  # the _cN objects: kernels, extern ops, constants of the calls
    constants: dict[str, torch.Tensor]  # the graph's constant tensors, by buffer name
    on_device: tuple[str, ...]  # constants copied to the device once, on the first call
    device: str
    layout_free: frozenset[int]
    kernel_read: frozenset[int]
    #: the names in ``named`` of the plugin's own library functions, and their calls
    vendor: dict[str, str] = field(default_factory=dict)
    #: the program as data (core/steps.py: kernels as their functions, ops as OpOverloads,
    #: constants by name), or None with the reason in ``native_why``
    steps: list[tuple] | None = None
    n_slots: int = 0
    n_regs: int = 0  # the steps' int64 registers (sizes of a graph of symbolic sizes)
    native_why: str | None = None
    #: the ISA version (core/isa.py) the steps were written for: the runner refuses another
    isa_version: int = isa.VERSION

    def materialize(self, graph_name: str, runner: str = "python") -> Callable:
        """The program as a function ``call(args)``. With steps: the native runner's program
        (core/native.py) with ``runner="native"`` where the runner builds and takes them,
        else the step interpreter's (core/interp.py); ``runner="check"``: both, each call
        compared bit for bit (core/crosscheck.py). Without steps: the Python source's."""
        if self.steps is None:
            call = self._source_call(graph_name)
        else:
            native = None
            if runner in ("native", "check"):
                try:
                    native = self._native()
                except Exception as exc:  # noqa: BLE001 - the interpreter runs, with the reason
                    self.native_why = f"the runner refused the program: {type(exc).__name__}: {exc}"
            call = native
            if native is None or runner == "check":
                call = interp.program(
                    self.steps,
                    self.n_slots,
                    self.constants,
                    torch.device(self.device),
                    _mark_writes,
                    self.isa_version,
                    n_regs=self.n_regs,
                    named=self.named,
                    check_result=_vendor_result,
                )
            if native is not None:
                native.steps = self.steps
                if runner == "check":
                    call = crosscheck.cross_checked(
                        native, call, torch.device(self.device), graph_name
                    )
        if runner == "check" and not hasattr(call, "cross_checked"):
            call.not_checked = crosscheck.why_not(self.steps is not None, self.native_why)
        # what the per-call guard must check (guards.make_check): only sizes of inputs
        # nothing bakes the layout of; only alignment where Dynamo already guards layouts
        call.layout_free = self.layout_free
        call.kernel_read = self.kernel_read
        return call

    def _source_call(self, graph_name: str) -> Callable:
        """The Python source's ``call`` (a program with no steps)."""
        device = torch.device(self.device)
        empty, empty_fast, view, is_current = buffer_ops(device)
        env: dict[str, Any] = {
            "torch": torch,
            "_as_strided": torch.as_strided,
            "_view": view,
            "_restride": _restride,
            "_dev": device,
            "_empty": empty_fast or empty,
            "_empty_fast": empty_fast,
            "_empty_any": empty,
            "_is_current": is_current,
            "_seed": _make_seed,
            "_vendor_result": _vendor_result,
            "_writes": _WRITES,
        }
        moved: dict[str, Any] = {}
        for name, t in self.constants.items():
            env[name] = t
            if name in self.on_device:
                env[f"{name}_src"] = _OnDevice(t, moved, name)
        env.update(self.named)
        exec(compile(self.source, f"<sdk wrapper {graph_name}>", "exec"), env)  # noqa: S102
        return env["call"]

    def _native(self) -> Any | None:
        """The runner's program for :attr:`steps` (kernels by their C entry points, ops by
        schema name, constants by value), or None where the runner cannot be built."""
        from . import native

        out: list[tuple] = []
        moved: dict[str, Any] = {}  # the constants' device copies, made once
        for step in self.steps or ():
            op = step[0]
            if op == st.LAUNCH:
                entry = getattr(step[1], "native", None)
                if entry is None:  # a kernel of the plugin's launched through Python
                    out.append((st.LAUNCH_PY, step[1], step[2], step[3]))
                    continue
                checked, state = entry.error is not None, entry.state
                out.append((op, entry.address, *step[2:4], checked, entry.error, state, step[1]))
            elif op == st.CALL:
                schema = step[1]._schema
                out.append((op, schema.name, schema.overload_name, *step[2:]))
            elif op == st.CONST:
                tensor = self.constants[step[2]]
                if step[3]:  # the device copy, made once and kept (as _OnDevice keeps it);
                    # made now, outside the compile's fake mode (a real tensor, not a fake one)
                    with real_mode():
                        tensor = _OnDevice(tensor, moved, step[2]).get(torch.device(self.device))
                out.append((op, step[1], tensor))
            elif op == st.CALL_PY:  # the plugin's function, by its name in ``named``
                out.append((op, self.named[step[1]], *step[2:], _vendor_result))
            else:
                out.append(step)
        made = native.program(out, self.n_slots, _mark_writes, self.isa_version, n_regs=self.n_regs)
        if made is not None:  # what each step is, for its host time (Program.step_ns)
            made.step_kinds = tuple(_kind_of(s) for s in out)
        return made


class _WrapperWriter:
    """Writes the source of one program's wrapper: ``call(args)``, which binds the inputs,
    runs every kernel and library call in order and returns the outputs.

    :meth:`write` calls one method per part of that function, in the order the lines come.
    The parts share what the source names (the ``_cN`` objects, :meth:`_const`), the memory
    plan, and what the per-call guard must learn from the source: the inputs whose strides
    it bakes in, and those a kernel reads (:meth:`_wrapper`).
    """

    def __init__(
        self,
        L: Lowerer,
        program: list,
        compiled: dict[str, Callable],
        outputs: list[tuple],
        layouts: dict[str, Layout],
    ) -> None:
        self.L, self.program, self.compiled = L, program, compiled
        self.outputs, self.layouts = outputs, layouts
        self.copy_of = {host.buffer: dev for dev, (host, _) in L.host.items()}  # host -> device
        self.named: dict[str, Any] = {}
        self.vendor: dict[str, str] = {}  # named plugin functions -> their calls
        self._consts: dict[int, str] = {}
        out_bufs = {b for kind, b, _ in outputs if kind in ("buf", "view")}
        #: buffers that are graph inputs written in place (core/lowering/mutation.py)
        self.written = L.written
        self.mem = plan_memory(
            program, layouts, out_bufs, {n for n, _ in L.inputs if n}, self.written
        )
        # device copies of host values, made where (and only if) a kernel or output reads one:
        # a copy costs a host-device transfer per call, and cannot be captured in a CUDA graph
        self.read = set(out_bufs)
        for step in program:
            self.read |= {a.name for a in step.args} if isinstance(step, Kernel) else step.reads
        # inputs whose strides something here bakes in: read by a kernel (which also
        # assumes the pointer's alignment), or re-viewed with fixed strides; the others only
        # reach library calls whole
        self.baked: set[str] = set()
        self.kernel_read: set[str] = set()
        self.input_names = {n for n, _ in L.inputs if n}
        # buffers whose storage offset at run time is their layout's: inputs (Dynamo guards
        # it) and what the kernels write (the memory plan places them)
        self.placed = self.input_names | {
            a.name for k in program if isinstance(k, Kernel) for a in k.args if a.role != "in"
        }
        self.lines = ["def call(args):"]
        #: the same program as data, for the native runner (``why`` says when it has none)
        self.sw = StepWriter(L, layouts, self.placed, self.input_names, self.copy_of)
        self.steps = self.sw.steps

    def write(self) -> Wrapper:
        """The wrapper: its prologue, each step between the memory plan's lines, the return."""
        self._prologue()
        position = {name: k for k, (name, _) in enumerate(self.L.inputs) if name}
        written: set[int] = set()
        for i, step in enumerate(self.program):
            self._emit(self.mem.before.get(i, []))
            if isinstance(step, Kernel):
                self._launch(step)
            else:
                self._call_extern(i, step)
            now = {position[b] for b in _inputs_written_by(step, self.written)} - written
            if now:
                # inputs are written: a failure from here on may not run the graph again
                # through ATen (that would write them twice), and its error names them. (A
                # step that raised before it returned wrote nothing: a launch or a compile
                # that failed.)
                written |= now
                self.lines.append(f"    _writes.begun = {tuple(sorted(written))}")
                self.steps.add(st.WRITES, sorted(written))
            self._emit(self.mem.after.get(i, []))
        if written:
            self.lines.append("    _writes.begun = ()")
        self._return_outputs()
        return self._wrapper()

    def _emit(self, entries: list[Entry]) -> None:
        """The memory plan's entries (allocations, frees), as lines and as steps."""
        for e in entries:
            self.lines.append("    " + source_line(e))
            self.sw.record(self.sw.plan, e)

    def _const(self, x: Any) -> str:
        """The name the source calls ``x`` by (an object it cannot spell: a kernel, an op, a
        tensor, ``inf``); one name per object, numbered in the order first used."""
        key = id(x)
        if key not in self._consts:
            self._consts[key] = f"_c{len(self._consts)}"
            self.named[self._consts[key]] = x
        return self._consts[key]

    def _device_copy(self, host: str) -> list[str]:
        """The line that copies host value ``host`` to the device, if anything reads the copy."""
        dev = self.copy_of.get(host)
        if dev not in self.read:
            return []
        if host in self.L.constants:
            return [f"    {dev} = {host}_src.get(_dev)"]
        return [f"    {dev} = {host}.to(_dev).contiguous()"]

    def _prologue(self) -> None:
        """Everything before the first step: the allocator, the inputs (and their device
        copies), the RNG seed, and the size symbols' values for this call."""
        L, lines = self.L, self.lines
        _, empty_fast, _, is_current = buffer_ops(L.device)
        if empty_fast is not None and is_current is not None:
            # the fast allocator allocates on the current device: another may be current
            lines.append("    _empty = _empty_fast if _is_current() else _empty_any")
        sw = self.sw
        for i, (name, _spec) in enumerate(L.inputs):
            if name:
                lines.append(f"    {name} = args[{i}]")
                sw.record(sw.input, name, i)
                copy = self._device_copy(name)
                lines += copy
                if copy:
                    sw.record(sw.device_copy, name)
        for name in L.constants:
            sw.record(sw.constant, name)
            copy = self._device_copy(name)
            lines += copy
            if copy:
                sw.record(sw.constant_copy, name)
        if L.needs_seed:
            lines.append(f"    {SEED_BUFFER} = _seed(_dev)")
            sw.record(sw.seed)
        if is_symbolic(L.specs):
            # the size symbols' values, read from the inputs (the guard checked they fit)
            for sym, src in size_bindings(L.specs).items():
                lines.append(f"    {sym.name} = {src}")
            sw.record(sw.bind_sizes)

    def _restrided(self, buf: str, layout: Layout, *, result: bool = False) -> str:
        """A view of ``buf``. An intermediate is reinterpreted in place (no autograd view
        record); a result is a real view, as eager's would be."""
        delta = static(sympy.expand(sympy.sympify(layout.offset) - self.layouts[buf].offset))
        sizes, strides = print_sizes(layout.sizes), print_sizes(layout.strides)
        if buf in self.placed and not result:
            return f"_view({buf}, {sizes}, {strides}, {print_size(delta)})"
        offset = print_size(layout.offset)
        if buf in self.input_names:
            offset = f"{buf}.storage_offset()" + (f" + {print_size(delta)}" if delta != 0 else "")
        return f"_as_strided({buf}, {sizes}, {strides}, {offset})"

    def _arg(self, x: Any) -> str:
        """A library call's argument as source: a buffer (viewed where its layout is not the
        buffer's), a literal, a symbolic size, or a named object."""
        if isinstance(x, StorageView):
            base = self.layouts[x.buffer]
            if x.layout == base:
                return x.buffer
            self.baked.add(x.buffer)
            return self._restrided(x.buffer, x.layout)
        if isinstance(x, (list, tuple)):
            inner = ", ".join(self._arg(y) for y in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
        if isinstance(x, sympy.Expr):  # a symbolic size handed to a library call
            return print_size(x)
        if isinstance(x, (bool, int, float)) or x is None:
            return (
                repr(x)
                if not (isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))))
                else self._const(x)
            )
        return self._const(x)

    def _launch(self, step: Kernel) -> None:
        """A kernel's launch: its buffers, then its size arguments. A kernel bakes in the
        strides (and alignment) of every input it reads."""
        self.baked.update(a.name for a in step.args)
        self.kernel_read.update(a.name for a in step.args)
        fn = self.compiled[step.name]
        fname = self._const(fn)
        call_args = [a.name for a in step.args] + [s.name for s in step.size_args]
        self.lines.append(f"    {fname}({', '.join(call_args)})")
        self.sw.record(self.sw.launch, step, fn)

    def _call_extern(self, i: int, step: ExternNode) -> None:
        """A library call, or its in-place form where the memory plan chose one (the report
        then names the in-place op that runs)."""
        L = self.L
        in_place = self.mem.extern_in_place.get(i)
        if in_place is not None and step.name in L.extern_report:
            at = L.extern_report[step.name]
            L.externs[at] = ExternReport(op_name(in_place), L.externs[at].node)
        if step.vendor is not None:
            self._call_vendor(step)
            return
        self.sw.record(self.sw.call, step, in_place)
        op = self._const(_callable(step) if in_place is None else in_place)
        call_args = ", ".join(self._arg(a) for a in step.args)
        kw = ", ".join(f"{k}={self._arg(v)}" for k, v in step.kwargs.items())
        call = f"{op}({call_args}{', ' if call_args and kw else ''}{kw})"
        names = [o[0] if o else "_" for o in step.outputs]
        if in_place is not None:
            # its output is its first argument, in the layout planned for it; a host output
            # still gets its device copy (a CPU scalar's op run in place, read on the device)
            self.lines.append(f"    {call}  # {in_place}")
            for out in step.outputs:
                if out and out[0] in self.copy_of:
                    copy = self._device_copy(out[0])
                    self.lines += copy
                    if copy:
                        self.sw.record(self.sw.device_copy, out[0])
            return
        if step.multi_output:
            self.lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = {call}")
        else:
            self.lines.append(f"    {names[0]} = {call}")
        self._check_extern_outputs(step)

    def _call_vendor(self, step: ExternNode) -> None:
        """A library call through the plugin's own function (``sdk_extern``), named once per
        call site (the whole-graph cache asks the plugin for it again by its call node).
        Each tensor it returns is checked against the op's shape, dtype and device, and
        put in the strides the graph reads it in."""
        call, fn = step.vendor
        node = step.origins[0].split(":")[0]
        op = f"_x{len(self.vendor)}"
        self.named[op], self.vendor[op] = fn, call
        call_args = ", ".join(self._arg(a) for a in step.args)
        kw = ", ".join(f"{k}={self._arg(v)}" for k, v in step.kwargs.items())
        call = f"{op}({call_args}{', ' if call_args and kw else ''}{kw})"
        who = (
            f"sdk:{self.L.ctx.plugin}'s sdk_extern function for {op_name(step.target)} "
            f"(node {node})"
        )
        expected = []
        for out in step.outputs:
            if not out:
                expected.append("None")
                continue
            lay = out[1]
            expected.append(
                f"({print_sizes(lay.sizes)}, {print_sizes(lay.strides)}, "
                f"{self._const(lay.dtype)}, {lay.device!r})"
            )
        specs = f"({', '.join(expected)}{',' if len(expected) == 1 else ''})"
        names = [o[0] if o else "_" for o in step.outputs]
        multi = step.multi_output
        self.lines.append(
            f"    {', '.join(names)}{',' if len(names) == 1 else ''} = "
            f"_vendor_result({call}, {specs}, {multi}, {who!r})"
        )
        self.sw.record(self.sw.vendor, step, op, who)
        for out in step.outputs:  # host outputs: the device copy
            if out and out[0] in self.copy_of:
                copy = self._device_copy(out[0])
                self.lines += copy
                if copy:
                    self.sw.record(self.sw.device_copy, out[0])

    def _check_extern_outputs(self, step: ExternNode) -> None:
        """After a library call: copy its host outputs to the device, and give each output
        read later the strides the kernels index it with (the op may have chosen others)."""
        lines = self.lines
        for out in step.outputs:
            if out and out[0] in self.copy_of:
                copy = self._device_copy(out[0])
                lines += copy
                if copy:
                    self.sw.record(self.sw.device_copy, out[0])
                continue
            if not out or out[0] not in self.read:
                continue  # unused (an attention op may even return None for it)
            if step.target in COLLECTIVE_OPS:
                continue  # not ready until its wait: the wait's output is checked
            # (a size symbol is >= 2)
            dims = [d for d, n in enumerate(out[1].sizes) if not is_static(n) or n > 1]
            if dims:
                # kernels index this buffer with the strides the trace gave it; an
                # op that chose others (they may follow its inputs') is copied into them
                name, lay = out
                got = ", ".join(f"{name}.stride({d})" for d in dims)
                want = ", ".join(print_size(lay.strides[d]) for d in dims)
                lines.append(f"    if {name} is not None and ({got},) != ({want},):")
                lines.append(f"        {name} = _restride({name}, {print_sizes(lay.strides)})")
                self.sw.record(self.sw.restride, name, dims, lay)

    def _return_outputs(self) -> None:
        """The return: each graph output as a buffer, a view of one, a size or a constant."""
        rets = []
        for kind, buf, layout in self.outputs:
            if kind == "buf":
                rets.append(buf)
            elif kind == "view":
                base = self.layouts[buf]
                if layout != base:
                    self.baked.add(buf)
                rets.append(buf if layout == base else self._restrided(buf, layout, result=True))
            elif isinstance(buf, sympy.Expr):  # a symbolic size (saved for the backward)
                rets.append(print_size(buf))
            else:
                rets.append(self._const(buf))
        self.lines.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
        self.sw.record(self.sw.returns, self.outputs)

    def _wrapper(self) -> Wrapper:
        """The source with what it names, and what the per-call guard needs: the inputs
        whose layout nothing here bakes in (``layout_free``: their sizes alone are checked)
        and those a kernel reads (``kernel_read``: their alignment is checked too)."""
        L = self.L
        return Wrapper(
            "\n".join(self.lines),
            self.named,
            dict(L.constants),
            tuple(n for n in L.constants if n in self.copy_of),
            str(L.device),
            vendor=dict(self.vendor),
            layout_free=frozenset(
                i
                for i, (name, _) in enumerate(L.inputs)
                if name and name not in self.baked and name not in self.copy_of
            ),
            kernel_read=frozenset(
                i for i, (name, _) in enumerate(L.inputs) if name and name in self.kernel_read
            ),
            steps=None if self.steps.why is not None else self.steps.steps,
            n_slots=len(self.steps.slots),
            n_regs=len(self.steps.regs),
            native_why=self.steps.why,
        )


#: per thread: whether the program running (or the one that just raised) has begun writing
#: graph inputs in place (its wrapper sets it before the first such step, and clears it
#: when it returns)
_WRITES = threading.local()


def _mark_writes(positions: list[int]) -> None:
    """The native runner's call when a step after the program began writing inputs raised:
    the positions of the graph inputs written by then."""
    _WRITES.begun = tuple(positions)


def inputs_written() -> tuple[int, ...]:
    """The positions of the graph inputs that the program that raised on this thread had
    written in place before it raised (then running the graph again through ATen would
    apply those writes twice; the caller's values are changed). Clears the mark."""
    begun = getattr(_WRITES, "begun", ())
    _WRITES.begun = ()
    return begun


def _inputs_written_by(step: Kernel | ExternNode, written: dict[str, str]) -> set[str]:
    """The graph inputs (buffer names) ``step`` writes in place."""
    if isinstance(step, ExternNode):
        return {step.into} if step.into is not None else set()
    return {written[a.name] for a in step.args if a.role != "in" and a.name in written}


def _runner(fn: Callable, wrapper: Wrapper) -> str:
    """GraphReport.runner for a materialized program."""
    if hasattr(fn, "cross_checked"):
        return "check: the native runner against the step interpreter, bit for bit"
    if getattr(fn, "not_checked", None):
        return f"python: not checked by runner='check': {fn.not_checked}"
    if hasattr(fn, "steps"):
        return "native"
    if wrapper.native_why:
        return f"python: {wrapper.native_why}"
    if wrapper.steps is None:
        return "python"
    from . import native

    why = native.why_not()
    return f"python: {'the native runner could not be built' if why else 'runner=python'}"


def _kind_of(step: tuple) -> str:
    """A runner step's kind: its opcode's name, an ATen op's name for a library call."""
    if step[0] == st.CALL:
        return f"call {step[1]}.{step[2]}" if step[2] else f"call {step[1]}"
    return st.NAMES[step[0]]


def _callable(step: ExternNode) -> Any:
    """What the wrapper calls for an extern: the public function where one is equivalent."""
    entry = _PUBLIC_FUNCTIONS.get(str(step.target))
    if entry is None or not set(step.kwargs) <= entry[1]:
        return step.target
    return getattr(torch, entry[0])


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def _vendor_result(result: Any, specs: tuple, multi: bool, who: str) -> tuple:
    """What a plugin's library function returned, as the outputs of its call: each tensor
    checked against ``specs`` (sizes, strides, dtype, device type per output; None: not a
    tensor) and put in those strides where it is in others. Raises :class:`SDKError` naming
    the function, what it returned and what the op gives."""
    outs = tuple(result) if multi and isinstance(result, (tuple, list)) else (result,)
    if len(outs) != len(specs):
        raise SDKError(
            f"{who} returned {len(outs)} value(s) where the op returns {len(specs)}; "
            "return what the ATen op returns (a tuple where it returns several)"
        )
    checked = []
    for i, (t, spec) in enumerate(zip(outs, specs)):
        if spec is None:
            checked.append(t)
            continue
        sizes, strides, dtype, device = spec
        if (
            not isinstance(t, torch.Tensor)
            or tuple(t.shape) != tuple(sizes)
            or t.dtype != dtype
            or t.device.type != device
        ):
            got = (
                f"a tensor of shape {tuple(t.shape)}, {t.dtype} on {t.device.type}"
                if isinstance(t, torch.Tensor)
                else f"a {type(t).__name__}"
            )
            raise SDKError(
                f"{who} returned {got} as output {i}, where the op gives shape "
                f"{tuple(sizes)}, {dtype} on {device}; fix that function (or answer None "
                "from sdk_extern for such calls, to let ATen run them)"
            )
        if any(n != 1 and t.stride(d) != s for d, (n, s) in enumerate(zip(sizes, strides))):
            t = _restride(t, tuple(strides))
        checked.append(t)
    return tuple(checked)


def _make_seed(device: torch.device) -> torch.Tensor:
    """A fresh seed per call, drawn from the device's generator (so manual_seed reproduces
    runs). Drawn on the device: no host-device copy, and a CUDA graph replay draws anew."""
    return torch.randint(0, SEED_HIGH, (1,), dtype=torch.int64, device=device)


class _OnDevice:
    """A constant from another device (a CPU scalar), copied to the graph's device once."""

    def __init__(self, tensor: torch.Tensor, cache: dict[str, Any], name: str) -> None:
        self.tensor, self.cache, self.name = tensor, cache, name

    def get(self, device: torch.device) -> torch.Tensor:
        t = self.cache.get(self.name)
        if t is None:
            t = self.cache[self.name] = self.tensor.to(device).contiguous()
        return t


def _restride(t: torch.Tensor, strides: tuple[int, ...]) -> torch.Tensor:
    """``t``'s values in a tensor of these strides."""
    out = torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out
