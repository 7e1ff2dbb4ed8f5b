"""The program of one compiled graph, as data.

:class:`_WrapperWriter` writes the program's steps (core/steps.py, by core/stepwriter.py):
bind the inputs, run every kernel and library call in order over the memory plan, return
the outputs. It is the one emitter: the native runner (core/native.py) and the step
interpreter (core/interp.py) execute the same steps. :class:`Wrapper` is the result: plain
data the whole-graph cache keeps, which :meth:`Wrapper.materialize` turns into the callable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from sdk.errors import SDKError
from sdk.report import ExternReport

from . import crosscheck, interp, isa
from . import steps as st
from .fallback import op_name
from .guards import is_symbolic
from .ir.graph import ExternNode, StorageView
from .ir.index import is_static
from .ir.kernel import Kernel, Layout
from .lowering import (
    COLLECTIVE_OPS,
    Lowerer,
)
from .memory import Entry, plan_memory
from .stepwriter import StepWriter


@dataclass
class Wrapper:
    """The program: its steps and what they name. Plain data, so the whole-graph cache can
    keep it."""

    #: the program (core/steps.py: kernels as their functions, ops as OpOverloads,
    #: constants by name)
    steps: list[tuple]
    n_slots: int
    n_regs: int  # the steps' int64 registers (sizes of a graph of symbolic sizes)
    named: dict[str, Any]  # the Python functions CALL_PY steps call, by name
    constants: dict[str, torch.Tensor]  # the graph's constant tensors, by buffer name
    device: str
    layout_free: frozenset[int]
    kernel_read: frozenset[int]
    #: the names in ``named`` of the plugin's own library functions, and their calls
    vendor: dict[str, str] = field(default_factory=dict)
    #: why the native runner cannot take the steps, known when they were written (the
    #: interpreter runs them; the whole-graph cache keeps it), or None
    native_why: str | None = None
    #: why the runner refused the steps when they were loaded here (not kept: another
    #: process tries the runner again)
    refused: str | None = None
    #: the ISA version (core/isa.py) the steps were written for: the runner refuses another
    isa_version: int = isa.VERSION
    #: the sizes the kernels are right for (their sources' ``requires``), which the per-call
    #: guard checks: a call that breaks one runs a variant compiled for its sizes
    requires: tuple[tuple[str, int], ...] = ()

    def materialize(self, graph_name: str, runner: str = "python") -> Callable:
        """The program as a function ``call(args)``: the native runner's program
        (core/native.py) with ``runner="native"`` where the runner builds and takes the
        steps, else the step interpreter's (core/interp.py); ``runner="check"``: both, each
        call compared bit for bit (core/crosscheck.py)."""
        native = None
        if runner in ("native", "check") and self.native_why is None:
            try:
                native = self._native()
            except Exception as exc:  # noqa: BLE001 - the interpreter runs, with the reason
                self.refused = f"the runner refused the program: {type(exc).__name__}: {exc}"
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
                call = crosscheck.cross_checked(native, call, torch.device(self.device), graph_name)
        if runner == "check" and not hasattr(call, "cross_checked"):
            call.not_checked = crosscheck.why_not(True, self.native_why or self.refused)
        # what the per-call guard must check (guards.make_check): only sizes of inputs
        # nothing bakes the layout of; only alignment where Dynamo already guards layouts
        call.layout_free = self.layout_free
        call.kernel_read = self.kernel_read
        call.requires = self.requires
        return call

    def _native(self) -> Any | None:
        """The runner's program for :attr:`steps` (kernels by their C entry points, ops by
        schema name, constants by value), or None where the runner cannot be built."""
        from . import native

        out: list[tuple] = []
        for step in self.steps:
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
                if step[3]:  # its device copy, made once, now
                    tensor = interp.device_copy(tensor, torch.device(self.device))
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
    """Writes the steps of one program: bind the inputs, run every kernel and library call
    in order over the memory plan, return the outputs.

    :meth:`write` calls one method per part of the program, in order. The parts share the
    names of the Python functions CALL_PY steps call (:meth:`_name`), the memory plan, and
    what the per-call guard must learn: the inputs whose strides the program bakes in, and
    those a kernel reads (:meth:`_wrapper`).
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
        self.sw = StepWriter(L, layouts, self.placed, self.input_names, self.copy_of, self._name)
        self.steps = self.sw.steps

    def write(self) -> Wrapper:
        """The program: its prologue, each step between the memory plan's entries, the
        return."""
        self._prologue()
        position = {name: k for k, (name, _) in enumerate(self.L.inputs) if name}
        written: set[int] = set()
        for i, step in enumerate(self.program):
            self._plan(self.mem.before.get(i, []))
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
                self.steps.add(st.WRITES, sorted(written))
            self._plan(self.mem.after.get(i, []))
        self._return_outputs()
        return self._wrapper()

    def _plan(self, entries: list[Entry]) -> None:
        """The memory plan's entries (allocations, frees)."""
        for e in entries:
            self.sw.plan(e)

    def _name(self, fn: Any) -> str:
        """The name a CALL_PY step calls Python function ``fn`` by, numbered in order."""
        name = f"_c{len(self.named)}"
        self.named[name] = fn
        return name

    def _device_copy(self, host: str) -> None:
        """Host value ``host``'s copy on the device, if anything reads the copy."""
        if self.copy_of.get(host) in self.read:
            self.sw.device_copy(host)

    def _prologue(self) -> None:
        """Everything before the first step: the inputs (and their device copies), the
        constants, the RNG seed, and the size symbols' values for this call."""
        L, sw = self.L, self.sw
        for i, (name, _spec) in enumerate(L.inputs):
            if name:
                sw.input(name, i)
                self._device_copy(name)
        for name in L.constants:
            sw.constant(name)
            if self.copy_of.get(name) in self.read:
                sw.constant_copy(name)
        if L.needs_seed:
            sw.seed()
        if is_symbolic(L.specs):
            # the size symbols' values, read from the inputs (the guard checked they fit)
            sw.bind_sizes()

    def _bake_views(self, x: Any) -> None:
        """Mark the buffers of a library call's arguments that are re-viewed with fixed
        strides (a view other than the buffer's own layout)."""
        if isinstance(x, StorageView):
            if x.layout != self.layouts[x.buffer]:
                self.baked.add(x.buffer)
        elif isinstance(x, (list, tuple)):
            for y in x:
                self._bake_views(y)
        elif isinstance(x, dict):
            for y in x.values():
                self._bake_views(y)

    def _launch(self, step: Kernel) -> None:
        """A kernel's launch: its buffers, then its size arguments. A kernel bakes in the
        strides (and alignment) of every input it reads."""
        self.baked.update(a.name for a in step.args)
        self.kernel_read.update(a.name for a in step.args)
        self.sw.launch(step, self.compiled[step.name])

    def _call_extern(self, i: int, step: ExternNode) -> None:
        """A library call, or its in-place form where the memory plan chose one (the report
        then names the in-place op that runs)."""
        L = self.L
        in_place = self.mem.extern_in_place.get(i)
        if in_place is not None and step.name in L.extern_report:
            at = L.extern_report[step.name]
            L.externs[at] = ExternReport(op_name(in_place), L.externs[at].node)
        self._bake_views((step.args, step.kwargs))
        if step.vendor is not None:
            self._call_vendor(step)
            return
        self.sw.call(step, in_place)
        self._check_extern_outputs(step, in_place=in_place is not None)

    def _call_vendor(self, step: ExternNode) -> None:
        """A library call through the plugin's own function (``sdk_extern``), named once per
        call site (the whole-graph cache asks the plugin for it again by its call node).
        Each tensor it returns is checked against the op's shape, dtype and device, and
        put in the strides the graph reads it in."""
        call, fn = step.vendor
        node = step.origins[0].split(":")[0]
        name = f"_x{len(self.vendor)}"
        self.named[name], self.vendor[name] = fn, call
        who = (
            f"sdk:{self.L.ctx.plugin}'s sdk_extern function for {op_name(step.target)} "
            f"(node {node})"
        )
        self.sw.vendor(step, name, fn, who)
        for out in step.outputs:  # host outputs: the device copy
            if out and out[0] in self.copy_of:
                self._device_copy(out[0])

    def _check_extern_outputs(self, step: ExternNode, in_place: bool = False) -> None:
        """After a library call: copy its host outputs to the device, and give each output
        read later the strides the kernels index it with (the op may have chosen others; an
        in-place call's output is its first argument, in the layout planned for it)."""
        for out in step.outputs:
            if out and out[0] in self.copy_of:
                self._device_copy(out[0])
                continue
            if in_place or not out or out[0] not in self.read:
                continue  # unused (an attention op may even return None for it)
            if step.target in COLLECTIVE_OPS:
                continue  # not ready until its wait: the wait's output is checked
            # (a size symbol is >= 2)
            dims = [d for d, n in enumerate(out[1].sizes) if not is_static(n) or n > 1]
            if dims:
                # kernels index this buffer with the strides the trace gave it; an
                # op that chose others (they may follow its inputs') is copied into them
                self.sw.restride(out[0], dims, out[1])

    def _return_outputs(self) -> None:
        """The return: each graph output as a buffer, a view of one, a size or a constant."""
        for kind, buf, layout in self.outputs:
            if kind == "view" and layout != self.layouts[buf]:
                self.baked.add(buf)
        self.sw.returns(self.outputs)

    def _wrapper(self) -> Wrapper:
        """The steps with what they name, and what the per-call guard needs: the inputs
        whose layout nothing here bakes in (``layout_free``: their sizes alone are checked)
        and those a kernel reads (``kernel_read``: their alignment is checked too)."""
        L = self.L
        return Wrapper(
            self.steps.steps,
            len(self.steps.slots),
            len(self.steps.regs),
            self.named,
            dict(L.constants),
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
            native_why=self.steps.why,
        )


#: per thread: the graph inputs the program that just raised had begun writing in place
#: (set by the executor's ``mark_writes`` when a step after a WRITES step raises)
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
    if wrapper.native_why or wrapper.refused:
        return f"python: {wrapper.native_why or wrapper.refused}"
    from . import native

    why = native.why_not()
    return f"python: {'the native runner could not be built' if why else 'runner=python'}"


def python_launches(fn: Callable, wrapper: Wrapper) -> tuple[str, ...]:
    """GraphReport.python_launches: the kernels the native runner of ``fn`` launches
    through Python (a launcher without a C entry point, ``sdk.NativeEntry``), by name, once
    each; none where the runner does not run the program."""
    if not hasattr(fn, "steps"):
        return ()
    names = (
        s[4] for s in wrapper.steps if s[0] == st.LAUNCH and getattr(s[1], "native", None) is None
    )
    return tuple(dict.fromkeys(names))


def _kind_of(step: tuple) -> str:
    """A runner step's kind: its opcode's name, an ATen op's name for a library call."""
    if step[0] == st.CALL:
        return f"call {step[1]}.{step[2]}" if step[2] else f"call {step[1]}"
    return st.NAMES[step[0]]


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


def _restride(t: torch.Tensor, strides: tuple[int, ...]) -> torch.Tensor:
    """``t``'s values in a tensor of these strides."""
    out = torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out
