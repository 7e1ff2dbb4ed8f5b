"""Reduction strategies for the Triton renderer: the bodies of reduction kernels, on top of
:class:`.expressions.ExpressionWriter`.

Reduction kernels use ``[XBLOCK, R]`` blocks (rows on axis 0), in one of the plan's modes:

* ``persistent``: a whole row in one block; each reduction is one ``tl.reduce`` (argmax
  and argmin with their index);
* ``looped``: each stage with inner ranges is a loop over ``RBLOCK`` chunks that folds
  into a per-lane accumulator, reduced across lanes after the loop; softmax's ``max`` and
  ``sum(exp(v - max))`` run in one loop (online softmax);
* ``split``: in :mod:`.split`, on top of this module's looped stages.
"""

from __future__ import annotations

import torch

from sdk import ir

from .expressions import ExpressionWriter, py_size
from .ops import HALF_TYPES, REDUCE, cast_to, highest, lowest, tl_type
from .planning import StagePlan


class ReductionWriter(ExpressionWriter):
    """Writes the bodies of reduction kernels (see the module doc)."""

    # -- reductions ------------------------------------------------------

    def _acc_dtype(self, op: str, value: ir.Expr, dtype: torch.dtype) -> torch.dtype:
        if op in ("any", "all"):
            return torch.int32
        if op in ("argmax", "argmin"):
            dt = value.dtype
        else:
            dt = dtype
        if dt in HALF_TYPES:
            return torch.float32
        if dt == torch.bool:
            return torch.int32
        return dt

    def _red_value(self, op: str, value: ir.Expr, acc: torch.dtype) -> str:
        v = self.emit(value)
        if op in ("any", "all"):
            return f"({v} != 0).to(tl.int32)" if value.dtype != torch.bool else f"{v}.to(tl.int32)"
        return v if value.dtype == acc else cast_to(acc, v, value.dtype)

    def _arg_identity(self, op: str, acc: torch.dtype) -> tuple[str, str]:
        """argmax/argmin: the accumulator's identity and its combine helper (needed now)."""
        helper = f"_{op}_combine"
        self._need(helper)
        return (lowest(acc) if op == "argmax" else highest(acc)), helper

    def _finish(self, local: str, text: str, op: str, dtype: torch.dtype, acc: torch.dtype) -> str:
        """``local = text[:, None]`` cast to the reduction's dtype."""
        if op in ("any", "all"):
            return f"{local} = ({text} != 0)[:, None]"
        if op in ("argmax", "argmin"):
            return f"{local} = {text}[:, None]" + (
                "" if dtype == torch.int64 else f".to({tl_type(dtype)})"
            )
        if dtype != acc:
            return f"{local} = {cast_to(dtype, text + '[:, None]', acc)}"
        return f"{local} = {text}[:, None]"

    def _full_shape(self, v: str, deps: frozenset[str]) -> str:
        """``v`` (a value masked by the stage's row mask) in the full ``[XBLOCK, R]`` shape."""
        if self.rmask:
            deps = deps | {"r"}
        if {"x", "r"} <= deps:
            return v
        return f"tl.broadcast_to({v}, [XBLOCK, {self.rb}])"

    def _reduction_persistent(
        self, local: str, op: str, value: ir.Expr, dtype: torch.dtype
    ) -> None:
        acc = self._acc_dtype(op, value, dtype)
        deps = self._deps(value, self.depmemo)
        v = self._red_value(op, value, acc)
        if op in ("argmax", "argmin"):
            init, helper = self._arg_identity(op, acc)
            masked = f"tl.where({self.rmask}, {v}, {init})" if self.rmask else v
            vals = self._full_shape(masked, deps)
            idx = f"tl.broadcast_to(rindex{self.cur_group}.to(tl.int64), [XBLOCK, {self.rb}])"
            t = self._tmp()
            self.body.append(f"{t}, {local}_idx = tl.reduce(({vals}, {idx}), 1, {helper})")
            self.body.append(self._finish(local, f"{local}_idx", op, dtype, acc))
            return
        red = REDUCE[op]
        masked = f"tl.where({self.rmask}, {v}, {red.init(acc)})" if self.rmask else v
        full = self._full_shape(masked, deps)
        text = red.final(acc, full)
        self._need_named(text)
        self.body.append(self._finish(local, text, op, dtype, acc))

    def _reduction_looped(
        self, local: str, op: str, value: ir.Expr, dtype: torch.dtype, post: list[str]
    ) -> None:
        acc = self._acc_dtype(op, value, dtype)
        v = self._red_value(op, value, acc)
        shape = f"[XBLOCK, {self.rb}]"
        if op in ("argmax", "argmin"):
            init, helper = self._arg_identity(op, acc)
            self.pre.append(f"{local}_acc = tl.full({shape}, {init}, {tl_type(acc)})")
            self.pre.append(
                f"{local}_accidx = tl.broadcast_to(({self.rfirst}).to(tl.int64), {shape})"
            )
            cmp = ">" if op == "argmax" else "<"
            t = self._tmp()
            self.body.append(f"{t} = tl.where({self.rmask}, {v}, {init})")
            # strictly better only: equal values keep the earlier (smaller) index
            self.body.append(
                f"{t}_take = ({t} {cmp} {local}_acc) | "
                f"(({t} != {t}) & ({local}_acc == {local}_acc))"
            )
            self.body.append(f"{local}_acc = tl.where({t}_take, {t}, {local}_acc)")
            self.body.append(
                f"{local}_accidx = tl.where({t}_take, rindex.to(tl.int64), {local}_accidx)"
            )
            post.append(
                f"{local}_val, {local}_idx = tl.reduce(({local}_acc, {local}_accidx), 1, {helper})"
            )
            if not self.partial:
                post.append(self._finish(local, f"{local}_idx", op, dtype, acc))
            return
        red = REDUCE[op]
        init = red.init(acc)
        self.pre.append(f"{local}_acc = tl.full({shape}, {init}, {tl_type(acc)})")
        combined = red.combine(acc, f"{local}_acc", f"tl.where({self.rmask}, {v}, {init})")
        self.body.append(f"{local}_acc = {combined}")
        final = red.final(acc, f"{local}_acc")
        self._need_named(combined + final)
        if self.partial:
            post.append(f"{local}_part = {final}[:, None]")
        else:
            post.append(self._finish(local, final, op, dtype, acc))

    # -- kernel bodies ---------------------------------------------------

    def _persistent(self) -> list[str]:
        self._begin()
        self.rb = str(self.plan.rblock)
        head: list[str] = []
        self._xheader(head)
        rtype = ".to(tl.int64)" if self.int64 else ""
        head.append(f"rbase = tl.arange(0, {self.rb})[None, :]{rtype}")
        defined: set[int] = set()
        for st in self.stages:
            if st.group < 0:
                self.rmask = None
                self._stores(st)
                continue
            g = st.group
            self.cur_group = g
            self.rmask = f"rmask{g}" if st.numel != self.plan.rblock else None
            if g not in defined:
                defined.add(g)
                self.pre.append(f"rindex{g} = rbase")
                if self.rmask:
                    self.pre.append(f"rmask{g} = rindex{g} < {py_size(st.numel)}")
                self._decompose(self.pre, f"rindex{g}", self._stage_vars(st))
            self._stores(st)
            for local, op, value, dtype in st.reductions:
                self._reduction_persistent(local, op, value, dtype)
        return head + self.consts + self.pre

    def _looped_stage(
        self, st: StagePlan, out: list[str], split: bool = False, second: StagePlan | None = None
    ) -> None:
        """One stage with inner ranges as a loop over RBLOCK chunks, appended to ``out``;
        with ``second`` (see :meth:`_online_pairs`), that stage's sum in the same loop."""
        self.pre, self.body, self.memo_r = [], [], {}
        self.rmask = "rmask"
        self.cur_group = st.group
        post: list[str] = []
        self.looping = True
        if second is not None:
            self._reduction_online(st, second, post)
        else:
            for local, op, value, dtype in st.reductions:
                self._reduction_looped(local, op, value, dtype, post)
        self._stores(st)
        self.looping = False
        body_head: list[str] = []
        if split:
            header = f"for roffset in range(0, {self.plan.chunk}, RBLOCK):"
            body_head.append("rlocal = roffset + rbase")
            body_head.append(f"rindex = split * {self.plan.chunk} + rlocal")
            body_head.append(
                f"rmask = (rlocal < {self.plan.chunk}) & (rindex < {py_size(st.numel)})"
            )
        else:
            header = f"for roffset in range(0, {py_size(st.numel)}, RBLOCK):"
            body_head.append("rindex = roffset + rbase")
            body_head.append(f"rmask = rindex < {py_size(st.numel)}")
        self._decompose(body_head, "rindex", self._stage_vars(st))
        out += self.pre
        out.append(header)
        out += ["    " + line for line in body_head + self.body]
        out += post
        self.pre = self.body = out
        self.memo_r = self.memo_x

    def _reduction_online(self, st: StagePlan, second: StagePlan, post: list[str]) -> None:
        """``m = max(v)`` (``st``) and ``s = sum(exp(v - m))`` (``second``) in one loop: a
        running maximum per lane, and a running sum rescaled by ``exp(m_old - m_new)``
        when the maximum grows. Lanes (and elements) at -inf add nothing; NaN and +inf
        propagate to NaN, as the two passes give."""
        m, _op, value, dtype = st.reductions[0]
        s = second.reductions[0][0]
        acc = self._acc_dtype("max", value, dtype)
        v = self._red_value("max", value, acc)
        shape, ty, ninf = f"[XBLOCK, {self.rb}]", tl_type(acc), 'float("-inf")'
        for h in ("_maximum", "_sum"):
            self._need(h)
        self.pre.append(f"{m}_acc = tl.full({shape}, {ninf}, {ty})")
        self.pre.append(f"{s}_acc = tl.full({shape}, 0, {ty})")
        t = self._tmp()
        self.body += [
            f"{t} = tl.where(rmask, {v}, {ninf})",
            f"{t}_max = _maximum({m}_acc, {t})",
            (
                f"{s}_acc = {s}_acc * tl.where({m}_acc == {ninf}, 0.0, tl.exp({m}_acc - {t}_max)) "
                f"+ tl.where({t} == {ninf}, 0.0, tl.exp({t} - {t}_max))"
            ),
            f"{m}_acc = {t}_max",
        ]
        post.append(f"{m}_row = tl.reduce({m}_acc, 1, _maximum)")
        post.append(
            f"{s}_row = tl.reduce(tl.where({m}_acc == {ninf}, 0.0, "
            f"{s}_acc * tl.exp({m}_acc - {m}_row[:, None])), 1, _sum)"
        )
        post.append(self._finish(m, f"{m}_row", "max", dtype, acc))
        post.append(self._finish(s, f"{s}_row", "sum", dtype, acc))

    def _looped(self) -> list[str]:
        self._begin()
        out: list[str] = []
        self._xheader(out)
        rtype = ".to(tl.int64)" if self.int64 else ""
        out.append(f"rbase = tl.arange(0, RBLOCK)[None, :]{rtype}")
        self.pre = self.body = out
        merged = set(self.online.values())
        for i, st in enumerate(self.stages):
            if i in merged:
                continue  # computed with its maximum, in one loop
            if st.group < 0:
                self.rmask = None
                self._stores(st)
            else:
                second = self.stages[self.online[i]] if i in self.online else None
                self._looped_stage(st, out, second=second)
        return self.consts + out
