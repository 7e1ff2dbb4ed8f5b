"""Loop-IR kernels that more than one plugin's renderer tests build."""

from __future__ import annotations

import torch

from sdk import ir

F32, I64 = torch.float32, torch.int64


def window_kernel(top: int, device: str) -> ir.Kernel:
    """``out[i] = x[min(max((i + 1) // 2 - 1, 0), 4) + top]``, ``i < 12``, over ``x`` of 5
    elements: an index computed by integer ops (a pooling window's row), inside ``x`` for
    ``top`` 0 and one past its end at the top for ``top`` 1."""
    i, s = ir.var("i"), ir.var("s")
    x_lay = ir.Layout((5,), (1,), 0, F32, device)
    o_lay = ir.Layout((12,), (1,), 0, F32, device)
    row = ir.Op(
        "sub",
        (ir.Op("floordiv", (ir.IndexValue(i + 1), ir.Const(2, I64)), I64), ir.Const(1, I64)),
        I64,
    )
    row = ir.Op("minimum", (ir.Op("maximum", (row, ir.Const(0, I64)), I64), ir.Const(4, I64)), I64)
    row = ir.Op("add", (row, ir.Const(top, I64)), I64)
    value = ir.Load("x", s, F32, binds=((s, row, 5),))
    return ir.Kernel(
        "window",
        (i,),
        (12,),
        [ir.Stage((), (), [], [ir.Store("out", o_lay.linear((i,)), value)])],
        [ir.BufferArg("x", x_lay, "in"), ir.BufferArg("out", o_lay, "out")],
    )
