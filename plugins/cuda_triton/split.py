"""Split reductions for the Triton renderer: a reduction whose unsplit grid would be too small
for the GPU (``split`` in :func:`.heuristics.plan`) runs as a chain of kernels, written with
:class:`.reductions.ReductionWriter`'s looped stages.

* Each stage with inner ranges is a *first* kernel on a grid of (chunks, blocks of
  ``XBLOCK`` rows), a column reduction's axes swapped (:func:`.heuristics.columns_first`):
  program ``(s, b)`` runs the stage over chunk ``s`` of its rows (the
  plan's ``chunk`` consecutive inner indices, in ``RBLOCK`` steps), as a looped kernel runs
  the whole row, and stores each reduction's partial to scratch at ``s * xnumel + row``
  (contiguous along the rows: a column reduction's [XBLOCK, RBLOCK] tiles run along the
  columns, so its loads and its partials' stores coalesce). Its stores, if any, are the
  stage's own (BatchNorm's input gradient).
* Where that stage reduces, or stages without inner ranges follow it, each row's ``split``
  partials are combined with the reduction's own combine (a sum of the chunks' sums, a
  maximum of maxima, the first index of argmax's best), then those stages run per row. By
  default (``heuristics.SPLIT_LAST_PROGRAM_COMBINES``) the first kernel does it: each
  program counts itself in on its block of rows' counter once its partials are stored, and
  the last to arrive combines (:meth:`SplitWriter._last_program`). Otherwise a *second*
  kernel, one program per block of rows, does.
* A reduction that a later kernel reads (the mean in a two-pass variance, BatchNorm's sums
  in its backward's input gradient) is stored per row to scratch by the kernel that
  finished it, and loaded by each later kernel that reads it.

* A stage that only stores, last in the chain (BatchNorm's normalization, its input
  gradient), is a *flat* kernel (``heuristics.SPLIT_FLAT_STORES``): one [XBLOCK, RBLOCK]
  tile a program, no loop, on a grid of (blocks of RBLOCK inner indices, blocks of rows),
  swapped as the first kernels' are.

The stages run in order over the whole grid: each kernel sees every earlier stage done, the
order a one-kernel form keeps per row. The values are those of the looped form, reduced in
another order (chunks, then partials): BatchNorm's statistics stay the IR's two passes, a
sum, then the sum of squared deviations from the mean.

BatchNorm's forward (two reductions, two epilogues) is two kernels (four with second
kernels); its backward (both sums, their epilogue, then the input gradient) two (three).
The kernels all take every argument, then every scratch buffer (``meta["scratch"]``: numel
and dtype of each; the launcher allocates them zeroed, once per device), and launch in
``meta["chain"]`` order (``[fn, "pre"]``: a first kernel, grid ``meta["pre"]["grid"]``,
configuration ``config["pre"]``; ``[fn, "main"]``: a second, ``meta["grid"]`` and ``config``;
``[fn, "flat"]``: a flat one, ``meta["flat"]["grid"]`` and ``config["flat"]``).
"""

from __future__ import annotations

import torch

from . import heuristics
from .expressions import py_size
from .ops import REDUCE, tl_type
from .reductions import ReductionWriter

#: A first kernel's chain entry, a second's, a flat pointwise kernel's.
FIRST, SECOND, FLAT = "pre", "main", "flat"
#: The scratch counter, per block of rows, of the programs that stored their partials
#: (``SPLIT_LAST_PROGRAM_COMBINES``): int32, zero between launches.
COUNTS = "split_counts"
#: argmax/argmin partials' index where a chunk holds no element (larger than any index)
NO_INDEX = 2**62


class SplitWriter(ReductionWriter):
    """Writes the kernels of a split reduction (see the module doc)."""

    def split_kernels(
        self,
    ) -> tuple[list[tuple[str, str, list[str]]], list[tuple[str, int, torch.dtype]]]:
        """The chain, in launch order: (function name, :data:`FIRST` or :data:`SECOND`,
        body) of each kernel; and the scratch buffers: (parameter, numel, dtype)."""
        phases = self.split_phases()
        split, xnumel = self.plan.split, self.xnumel
        flat_rows = heuristics.cdiv(self.plan.rnumel, heuristics.flat_config(self.plan)["RBLOCK"])
        #: whether the first kernels, and the flat one, take their blocks of rows from the
        #: grid's first axis (:func:`.heuristics.columns_first`; else chunks, or blocks of
        #: inner indices, come first)
        self.pre_rows_first = heuristics.columns_first(self.plan, split)
        self.flat_rows_first = heuristics.columns_first(self.plan, flat_rows)
        scratch: list[tuple[str, int, torch.dtype]] = []
        computed: dict[str, int] = {}  # a reduction's local -> its phase
        for p, (i, _tail) in enumerate(phases):
            for local, op, value, dtype in self.stages[i].reductions:
                acc = self._acc_dtype(op, value, dtype)
                if op in ("argmax", "argmin"):
                    scratch += [(f"{local}_pv", xnumel * split, acc)]
                    scratch += [(f"{local}_pi", xnumel * split, torch.int64)]
                else:
                    scratch.append((f"{local}_p", xnumel * split, acc))
                computed[local] = p
        # what each phase's kernels read of earlier phases' reductions
        reads = [
            (self.local_refs([i]), [r for r in self.local_refs(tail) if computed[r] < p])
            for p, (i, tail) in enumerate(phases)
        ]
        carried = {r for first, second in reads for r in first + second}
        dtypes = {
            local: dtype for i, _t in phases for local, _op, _v, dtype in self.stages[i].reductions
        }
        scratch += [(f"{r}_row", xnumel, dtypes[r]) for r in sorted(carried)]
        last = heuristics.SPLIT_LAST_PROGRAM_COMBINES
        if last and any(self.stages[i].reductions or tail for i, tail in phases):
            scratch.append((COUNTS, xnumel, torch.int32))
        kernels: list[tuple[str, str, list[str]]] = []
        for p, (i, tail) in enumerate(phases):
            first, second = reads[p]
            if p and self.flat_stage(i, tail):
                kernels.append((f"{self.name}_part{p}", FLAT, self._split_flat(i, first)))
                continue
            body = self._split_first(i, first)
            if self.stages[i].reductions or tail:
                keep = [r for r, _o, _v, _d in self.stages[i].reductions if r in carried]
                if last:
                    body += self._last_program(i, tail, second, keep)
                else:
                    combine = self._split_second(i, tail, second, keep)
                    kernels.append((f"{self.name}_part{p}", FIRST, body))
                    kernels.append((f"{self.name}_combine{p}", SECOND, combine))
                    continue
            kernels.append((f"{self.name}_part{p}", FIRST, body))
        kernels[-1] = (self.name, *kernels[-1][1:])
        self.chain = [name for name, _k, _b in kernels]
        self.flat = [name for name, kind, _b in kernels if kind == FLAT]
        return kernels, scratch

    @staticmethod
    def _axes(rows_first: bool) -> tuple[str, str]:
        """The program ids of a block of rows and of a chunk (or block of inner indices)."""
        return ("tl.program_id(0)", "tl.program_id(1)")[:: 1 if rows_first else -1]

    def flat_stage(self, i: int, tail: list[int]) -> bool:
        """Does stage ``i`` (followed by the stages ``tail``) run as a flat pointwise kernel
        (:data:`.heuristics.SPLIT_FLAT_STORES`)? It only stores: no reduction, nothing after."""
        return heuristics.SPLIT_FLAT_STORES and not self.stages[i].reductions and not tail

    def _split_flat(self, i: int, reads: list[str]) -> list[str]:
        """A flat kernel: stage ``i``, which only stores, one [XBLOCK, RBLOCK] tile a
        program, no loop (grid ``meta["flat"]["grid"]``: blocks of RBLOCK inner indices,
        blocks of rows). What depends on the inner index alone (a pooling window's
        arithmetic) is computed once per tile column, what depends on the row alone (the
        earlier kernels' reductions, per-row loads) once per tile row."""
        self._begin()
        st = self.stages[i]
        out: list[str] = []
        rows, inner = self._axes(self.flat_rows_first)
        self._xheader(out, pid=rows)
        to64 = ".to(tl.int64)" if self.int64 else ""
        self._load_rows(out, reads)
        self.pre, self.body, self.memo_r = [], [], {}
        self.rmask = "rmask"
        self.cur_group = st.group
        self._stores(st)
        head = [
            f"rindex = {inner}{to64} * RBLOCK + tl.arange(0, RBLOCK)[None, :]{to64}",
            f"rmask = rindex < {py_size(st.numel)}",
        ]
        self._decompose(head, "rindex", self._stage_vars(st))
        return self.consts + out + self.pre + head + self.body

    def _load_rows(self, out: list[str], locals_: list[str]) -> None:
        """Earlier kernels' reductions that this one reads, one value per row."""
        for local in locals_:
            out.append(f"{local} = tl.load({local}_row + xindex, xmask, other=0)")

    def _split_first(self, i: int, reads: list[str]) -> list[str]:
        """A first kernel: stage ``i`` over one chunk of a block of rows (grid: chunks,
        blocks), each reduction's partial to scratch."""
        self._begin()
        out: list[str] = []
        rows, chunk = self._axes(self.pre_rows_first)
        self._xheader(out, pid=rows)
        to64 = ".to(tl.int64)" if self.int64 else ""
        out.append(f"split = {chunk}{to64}")
        out.append(f"rbase = tl.arange(0, RBLOCK)[None, :]{to64}")
        self._load_rows(out, reads)
        self.pre = self.body = out
        self.partial = True
        self.rfirst = f"split * {self.plan.chunk} + rbase"
        st = self.stages[i]
        self._looped_stage(st, out, split=True)
        at = f"split * {py_size(self.xnumel)} + xindex"
        for local, op, _value, _dtype in st.reductions:
            if op in ("argmax", "argmin"):
                out.append(f"tl.store({local}_pv + ({at}), {local}_val[:, None], xmask)")
                out.append(f"tl.store({local}_pi + ({at}), {local}_idx[:, None], xmask)")
            else:
                out.append(f"tl.store({local}_p + ({at}), {local}_part, xmask)")
        return self.consts + out

    def _last_program(
        self, i: int, tail: list[int], reads: list[str], keep: list[str]
    ) -> list[str]:
        """The end of a first kernel that also combines (``SPLIT_LAST_PROGRAM_COMBINES``):
        each program counts itself in, once its partials are stored, on its block of rows'
        counter (:data:`COUNTS`); the program that arrives last reads the block's ``split``
        partials, in chunk order, and does what a second kernel would (combine, store the
        rows later kernels read, run the stages ``tail``), then sets the counter back to 0
        for the next launch. The release of the partials' stores before the count and the
        acquire after it are the atomic's (``acq_rel``, the GPU's scope), the block's
        threads ordered around it by barriers: the pattern of CUDA's threadFenceReduction
        sample, and of Inductor's cooperative reductions' ``x_grid_barrier``. No program
        waits for another, so no grid needs to be resident at once; the values do not
        depend on which program is last."""
        s = self.plan.split
        self._begin()
        rows = self._axes(self.pre_rows_first)[0]
        inner: list[str] = ["tl.debug_barrier()", f"tl.store({COUNTS} + {rows}, 0)"]
        self._load_rows(inner, reads)
        st = self.stages[i]
        sblock = min(heuristics.next_power_of_2(s), heuristics.SPLIT_COMBINE_BLOCK)
        at = f"sindex * {py_size(self.xnumel)} + xindex"
        loop: list[str] = [
            f"sindex = soffset + tl.arange(0, {sblock})[None, :]",
            f"smask = xmask & (sindex < {s})",
        ]
        post: list[str] = []
        for local, op, value, dtype in st.reductions:
            acc = self._acc_dtype(op, value, dtype)
            shape = f"[XBLOCK, {sblock}]"
            if op in ("argmax", "argmin"):
                init, helper = self._arg_identity(op, acc)
                inner.append(f"{local}_sv = tl.full({shape}, {init}, {tl_type(acc)})")
                inner.append(f"{local}_si = tl.full({shape}, {NO_INDEX}, tl.int64)")
                loop.append(
                    f"{local}_v = tl.load({local}_pv + ({at}), smask, other={init}, "
                    "cache_modifier='.cg')"
                )
                loop.append(
                    f"{local}_i = tl.load({local}_pi + ({at}), smask, other={NO_INDEX}, "
                    "cache_modifier='.cg')"
                )
                loop.append(
                    f"{local}_sv, {local}_si = "
                    f"{helper}({local}_sv, {local}_si, {local}_v, {local}_i)"
                )
                post.append(
                    f"{local}_rv, {local}_ri = tl.reduce(({local}_sv, {local}_si), 1, {helper})"
                )
                post.append(self._finish(local, f"{local}_ri", op, dtype, acc))
            else:
                red = REDUCE[op]
                init = red.init(acc)
                inner.append(f"{local}_s = tl.full({shape}, {init}, {tl_type(acc)})")
                loop.append(
                    f"{local}_v = tl.load({local}_p + ({at}), smask, other={init}, "
                    "cache_modifier='.cg')"
                )
                combined = red.combine(acc, f"{local}_s", f"{local}_v")
                loop.append(f"{local}_s = {combined}")
                final = red.final(acc, f"{local}_s")
                self._need_named(combined + final)
                post.append(self._finish(local, final, op, dtype, acc))
        if st.reductions:
            inner.append(f"for soffset in range(0, {s}, {sblock}):")
            inner += ["    " + line for line in loop]
            inner += post
        self._rows_then_tail(inner, keep, tail)
        ticket = f"tl.atomic_add({COUNTS} + {rows}, 1, sem='acq_rel', scope='gpu')"
        head = ["tl.debug_barrier()", f"ticket = {ticket}", f"if ticket == {s - 1}:"]
        return head + ["    " + line for line in self.consts + inner]

    def _split_second(
        self, i: int, tail: list[int], reads: list[str], keep: list[str]
    ) -> list[str]:
        """A second kernel: combine stage ``i``'s partials per row, store the reductions
        later kernels read (``keep``), run the stages ``tail``."""
        self._begin()
        out: list[str] = []
        self._xheader(out)
        self._load_rows(out, reads)
        s = self.plan.split
        st = self.stages[i]
        if st.reductions:
            out.append(f"sindex = tl.arange(0, {heuristics.next_power_of_2(s)})[None, :]")
            out.append(f"smask = xmask & (sindex < {s})")
        at = f"sindex * {py_size(self.xnumel)} + xindex"
        for local, op, value, dtype in st.reductions:
            acc = self._acc_dtype(op, value, dtype)
            if op in ("argmax", "argmin"):
                init, helper = self._arg_identity(op, acc)
                out.append(f"{local}_v = tl.load({local}_pv + ({at}), smask, other={init})")
                out.append(f"{local}_i = tl.load({local}_pi + ({at}), smask, other={NO_INDEX})")
                out.append(
                    f"{local}_rv, {local}_idx = tl.reduce(({local}_v, {local}_i), 1, {helper})"
                )
                out.append(self._finish(local, f"{local}_idx", op, dtype, acc))
            else:
                red = REDUCE[op]
                out.append(f"{local}_v = tl.load({local}_p + ({at}), smask, other={red.init(acc)})")
                final = red.final(acc, f"{local}_v")
                self._need_named(final)
                out.append(self._finish(local, final, op, dtype, acc))
        self._rows_then_tail(out, keep, tail)
        return self.consts + out

    def _rows_then_tail(self, out: list[str], keep: list[str], tail: list[int]) -> None:
        """After a combine, appended to ``out``: the rows' reductions later kernels read
        (``keep``) stored to scratch, then the stages ``tail``."""
        for local in keep:
            out.append(f"tl.store({local}_row + xindex, {local}, xmask)")
        self.pre = self.body = out
        for t in tail:
            self._stores(self.stages[t])
