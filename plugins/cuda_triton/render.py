"""Render a loop-IR :class:`sdk.ir.Kernel` to Triton source.

The renderer is mostly data, kept in :mod:`.ops`: ``TYPE_MAP`` (torch dtype
-> Triton type), ``CODE_FOR_OP`` (IR op -> function of the operand strings
returning a Triton expression, with ``CODE_FOR_OP_F64`` and
``CODE_FOR_OP_INT`` overriding entries for float64 and integer operands),
``REDUCE`` (IR reduction -> identity, elementwise combine and final
cross-lane reduce), and ``HELPERS`` (small ``@triton.jit`` functions a
kernel's source includes when it uses them). The walk of the kernel is one writer per
kernel, built in layers, each on the one before: :mod:`.planning` (names, stages, the block
plan, 2D tiles, index width: analysis only), :mod:`.expressions` (expressions, loads and
stores as lines), :mod:`.reductions` (the persistent, looped and online-softmax bodies),
:mod:`.split` (the chain of kernels of a split reduction) and this module (the pointwise bodies, and the source with its launch meta).

How a kernel becomes Triton (shapes are in :mod:`.heuristics`):

* The outer ranges are flattened to ``xindex`` and decomposed back into
  ``x0, x1, ...`` with ``//`` and ``%``; inner ranges of a stage likewise into
  ``r<g>_0, ...`` from ``rindex`` (``g`` numbers the distinct inner shapes, so
  a persistent kernel shares one ``rindex`` and its loads across stages).
  Reduction kernels use ``[XBLOCK, R]`` blocks (rows on axis 0). A transposing
  pointwise kernel splits its outer ranges into rows (``yindex``, up to the
  variable a load is contiguous along) and columns (``xindex``) of a
  ``[YBLOCK, XBLOCK]`` tile, with the same two-axis machinery.
* Every expression node becomes one ``tmpN = ...`` line, memoised on the node
  (nodes are hashable), which is the common-subexpression elimination.
* Each node knows the axes it depends on (``x``, ``r`` or none): a load is
  masked by exactly those axes' masks, and in a looped stage nodes without
  ``r`` are computed once before the loop.
* Loads and stores keep their dtype (bf16/fp16 in memory); the IR already
  casts to float32 for compute, and an op the IR leaves in half precision is
  computed in float32 and cast back.
* Index arithmetic is int32 when every index the kernel forms is below 2**31,
  int64 otherwise.

The source needs ``triton``, ``triton.language as tl`` and
``triton.language.extra.libdevice`` (``from triton.language.extra import
libdevice``; Triton >= 3.0).
"""

from __future__ import annotations

import math

import sdk
from sdk import ir

from . import heuristics
from .expressions import py_size, settle_evictions
from .ops import HELPERS, PRELUDE
from .split import FIRST, FLAT, SplitWriter


def _json_size(x: object) -> int | str:
    """A size in plain JSON meta: an int, or its Python expression over the size arguments."""
    return int(x) if ir.is_static(x) else ir.print_size(x, "python")  # type: ignore[arg-type]


class _Writer(SplitWriter):
    """Renders one kernel; one instance per kernel: the pointwise bodies, and the assembly of
    the source and its launch meta."""

    # -- kernel bodies ---------------------------------------------------

    def _pointwise(self) -> list[str]:
        self._begin()
        head: list[str] = []
        self._xheader(head)
        for st in self.stages:
            self._stores(st)
        return head + self.consts + self.pre

    def _pointwise2d(self) -> list[str]:
        assert self.tile is not None
        rows, cols, _cfg = self.tile
        self._begin()
        self.rmask, self.rb = "xmask", "XBLOCK"
        to64 = ".to(tl.int64)" if self.int64 else ""
        head = [
            f"yindex = tl.program_id(1){to64} * YBLOCK + tl.arange(0, YBLOCK)[:, None]",
            f"ymask = yindex < {math.prod(s for _, s in rows)}",
            f"xindex = tl.program_id(0){to64} * XBLOCK + tl.arange(0, XBLOCK)[None, :]",
            f"xmask = xindex < {math.prod(s for _, s in cols)}",
        ]
        self._decompose(head, "yindex", rows)
        self._decompose(head, "xindex", cols)
        for st in self.stages:
            self._stores(st)
        return head + self.consts + self.pre

    # -- assembly --------------------------------------------------------

    def _header(self) -> str:
        k = self.k
        ints = "int64" if self.int64 else "int32"
        lines = [f"# kernel {k.name}: {self.plan.mode}, {ints} indices"]
        for o in k.origins:
            lines.append(f"#   from {o}")
        outer = ", ".join(f"{n} < {s}" for n, s in self.xvars) or "one point"
        lines.append(f"# outer: {outer} (xnumel {self.xnumel})")
        if self.plan.mode == "split":
            lines.append(
                f"# split: {len(self.chain)} kernels ({', '.join(self.chain)}), each stage "
                f"with inner ranges in {self.plan.split} chunks of {self.plan.chunk}"
            )
            if self.flat:
                lines.append(f"# flat: {', '.join(self.flat)}: one tile a program, no chunks")
        for i, st in enumerate(self.stages):
            what = [f"{op} -> {loc}" for loc, op, _v, _d in st.reductions]
            what += [f"store {b}" for b, _i, _v in st.stores]
            rng = ", ".join(f"{n} < {s}" for n, s in zip(st.vars, st.sizes)) or "no inner range"
            lines.append(f"# stage {i}: {rng}: {'; '.join(what)}")
        return "\n".join(lines) + "\n"

    def _fn(self, name: str, params: list[str], body: list[str]) -> str:
        sig = ", ".join(params)
        body = settle_evictions(body)
        return f"@triton.jit\ndef {name}({sig}):\n" + "".join(f"    {ln}\n" for ln in body)

    def _split_grid(self, rows_first: bool, along: list) -> list[list]:
        """A split chain's grid: its blocks of rows and ``along`` (chunks, or blocks of inner
        indices), the rows first where ``rows_first`` (as the kernel reads its program ids)."""
        rows = [self.xnumel, "XBLOCK"]
        return [rows, along] if rows_first else [along, rows]

    def render(self) -> sdk.KernelSource:
        ptrs = [self.ptr[a.name] for a in self.k.args] + self.sizes
        mode = self.plan.mode
        fns: list[str] = []
        meta: dict = {
            "mode": mode,
            "xnumel": _json_size(self.xnumel),
            "rnumel": self.plan.rnumel,
            "int64": self.int64,
            "config": dict(self.plan.config),
            "grid": [[_json_size(self.xnumel), "XBLOCK"]],
            "args": [
                [
                    a.name,
                    _json_size(a.layout.storage_size),
                    str(a.layout.dtype).replace("torch.", ""),
                    a.role,
                ]
                for a in self.k.args
            ],
            "scratch": [],
        }
        if self.sizes:
            # symbolic sizes: the kernel takes them after the buffers; a grid entry or
            # storage size that is a string is a Python expression over them
            meta["sizes"] = list(self.sizes)

        def fn(name: str, params: list[str], consts: list[str], body: list[str]) -> str:
            return self._fn(name, params + [f"{c}: tl.constexpr" for c in consts], body)

        if mode == "pointwise":
            meta["constexprs"] = ["XBLOCK"]
            fns.append(fn(self.name, ptrs, meta["constexprs"], self._pointwise()))
        elif mode == "pointwise2d":
            assert self.tile is not None
            rows, cols, _ = self.tile
            meta["grid"] = [
                [math.prod(s for _, s in cols), "XBLOCK"],
                [math.prod(s for _, s in rows), "YBLOCK"],
            ]
            meta["constexprs"] = ["XBLOCK", "YBLOCK"]
            fns.append(fn(self.name, ptrs, meta["constexprs"], self._pointwise2d()))
        elif mode == "persistent":
            meta["constexprs"] = ["XBLOCK"]
            meta["rblock"] = self.plan.rblock
            fns.append(fn(self.name, ptrs, meta["constexprs"], self._persistent()))
        elif mode == "looped":
            meta["constexprs"] = ["XBLOCK", "RBLOCK"]
            fns.append(fn(self.name, ptrs, meta["constexprs"], self._looped()))
            if self.alt_plan is not None:
                looped, self.plan = self.plan, self.alt_plan
                rows = [py_size(st.numel) for st in self.stages if st.group >= 0]
                name = self.name + "_rows"
                meta["alt"] = {
                    "fn": name,
                    "rblock": self.plan.rblock,
                    "config": dict(self.plan.config),
                    "grid": [[_json_size(self.xnumel), "XBLOCK"]],
                    "constexprs": ["XBLOCK"],
                    "when": " and ".join(f"{r} <= {self.plan.rblock}" for r in rows),
                }
                fns.append(fn(name, ptrs, ["XBLOCK"], self._persistent()))
                self.plan = looped
        else:
            kernels, scratch = self.split_kernels()
            names = [n for n, _, _ in scratch]
            meta["pre"] = {
                "grid": self._split_grid(self.pre_rows_first, [self.plan.split, None]),
                "constexprs": ["XBLOCK", "RBLOCK"],
            }
            meta["constexprs"] = ["XBLOCK"]
            meta["chain"] = [[name, kind] for name, kind, _ in kernels]
            if any(kind == FLAT for _n, kind, _b in kernels):
                meta["flat"] = {
                    "grid": self._split_grid(self.flat_rows_first, [self.plan.rnumel, "RBLOCK"]),
                    "constexprs": ["XBLOCK", "RBLOCK"],
                }
                meta["config"]["flat"] = heuristics.flat_config(self.plan)
            for name, kind, body in kernels:
                consts = {FIRST: meta["pre"], FLAT: meta.get("flat")}.get(kind, meta)["constexprs"]
                fns.append(fn(name, ptrs + names, consts, body))
            meta["split"] = self.plan.split
            meta["chunk"] = self.plan.chunk
            meta["scratch"] = [[n, str(dt).replace("torch.", "")] for _, n, dt in scratch]
            meta["config"]["pre"] = dict(self.plan.pre_config)
        if self.debug or self.asserts:
            meta["debug"] = True  # compile with device-side asserts
        meta["clamped"] = self.clamped
        helpers = [HELPERS[h].strip() + "\n" for h in HELPERS if h in self.helpers]
        source = "\n\n".join([self._header() + PRELUDE.rstrip() + "\n", *helpers, *fns])
        return sdk.KernelSource(
            self.name, "triton", source, self.name, meta, requires=self.requires
        )


def render(kernel: ir.Kernel, *, debug: bool = False) -> sdk.KernelSource:
    """Render ``kernel`` to Triton; ``debug`` compiles it with device-side asserts on
    (a kernel with indirect loads always is: its index checks are asserts).

    ``meta`` of the result is plain JSON data for :mod:`.launch`: ``mode``,
    ``xnumel``, ``config`` (default constexprs and ``num_warps``), ``constexprs``
    (the main kernel's, in parameter order), ``grid`` (per grid axis: numel and
    the constexpr that divides it, or None), ``args`` (name, storage size,
    dtype, role), ``debug`` (compile with asserts), ``clamped`` (direct loads whose
    index was clamped into the buffer), and for a split reduction ``chain`` (its kernels'
    functions in launch order, each ``[fn, "pre"]``, ``[fn, "main"]`` or ``[fn, "flat"]``),
    ``pre`` (the grid and constexprs of the "pre" kernels; their config is
    ``config["pre"]``; the "main" kernels' are ``grid``, ``constexprs`` and ``config``),
    ``flat`` where a kernel is flat (its grid and constexprs; its config ``config["flat"]``)
    and ``scratch`` (numel, dtype of each scratch buffer, passed after the arguments: see
    :mod:`.split`).
    """
    return _Writer(kernel, debug=debug).render()
