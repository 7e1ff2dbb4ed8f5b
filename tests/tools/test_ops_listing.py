"""``python -m sdk ops``: what becomes of each ATen op, read from the core's tables (and, with
``--plugin``, a plugin's decompositions, kept ops, refusals and lowerings), run in-process as a
user runs it."""

from __future__ import annotations

import re

import pytest

from sdk import cli
from sdk.core.adapters import torch_private as tp
from sdk.core.fallback import op_name
from sdk.core.lowering.optable import EXTERN_OPS, LIBRARY_OPS, LOWERINGS

#: ops a vendor found by probing that the core does not lower (issue 29)
NOT_LOWERED = ("erfinv", "lgamma", "digamma", "i0", "hypot")


def sections(out: str) -> dict[str, dict[str, str]]:
    """{place: {op: the rest of its line}} from the listing."""
    found: dict[str, dict[str, str]] = {}
    current = None
    for line in out.splitlines():
        head = re.match(r"^(lowered|decomposed|library|fallback) \((\d+)\): ", line)
        if head:
            current = found.setdefault(head[1], {})
            continue
        row = re.match(r"^  (\S+)\s*(.*)$", line)
        if row and current is not None:
            current[row[1]] = row[2]
    return found


def run(capsys, *argv: str) -> str:
    assert cli.main(["ops", *argv]) == 0
    return capsys.readouterr().out


def test_the_listing_is_the_core_tables(capsys):
    got = sections(run(capsys))
    for name in NOT_LOWERED:  # ATen runs them, unless torch decomposes them some day
        op = f"aten.{name}.default"
        assert op in got["decomposed"] or "no IR lowering" in got["fallback"][op], name
    # every lowering of the table is listed as lowered, with the IR ops its lowering made
    table = tp.default_decompositions()
    lowered = {
        op_name(op)
        for op in LOWERINGS
        if tp.tensor_op(op) and op not in table and op not in EXTERN_OPS | LIBRARY_OPS
    }
    assert lowered == set(got["lowered"]), lowered ^ set(got["lowered"])
    # a lowered op the default table decomposes is decomposed (a plugin may keep it)
    for op in set(LOWERINGS) & set(table) - EXTERN_OPS - LIBRARY_OPS:
        if tp.tensor_op(op):
            assert "sdk_keep_ops keeps it" in got["decomposed"][op_name(op)], op
    assert got["lowered"]["aten.sin.default"] == "sin"
    assert got["lowered"]["aten.sum.dim_IntList"] == "reduce:sum"
    assert got["lowered"]["aten.where.self"] == "where"
    assert got["lowered"]["aten.view.default"] == "(loads and stores only)", "a view: no IR op"
    assert {op_name(op) for op in EXTERN_OPS if tp.tensor_op(op)} <= set(got["library"])
    for op in LIBRARY_OPS:
        assert "sdk_extern" in got["library"][op_name(op)], op
    assert "sdk_extern" not in got["library"]["aten.cumsum.default"]
    decomposed = {op_name(op) for op in table if tp.tensor_op(op) and op not in EXTERN_OPS}
    assert decomposed == set(got["decomposed"]), decomposed ^ set(got["decomposed"])
    assert "aten.gelu.default" in got["decomposed"]
    # every op is in one place
    names = [op for rows in got.values() for op in rows]
    assert len(names) == len(set(names))
    # and every row says what its lowering made: no sample it refused (an image op given
    # a matrix once printed "IR ops not probed (RuntimeError: Expected 3D or 4D tensor")
    assert_every_row_probed(got)
    assert got["lowered"]["aten._adaptive_avg_pool2d.default"] == "reduce:sum truediv"
    assert "where" in got["lowered"]["aten.max_pool2d_with_indices.default"]
    assert got["lowered"]["aten.clamp.default"] == "maximum minimum"
    assert got["lowered"]["aten.scatter.src"] == "eq isnan where"


def assert_every_row_probed(got: dict[str, dict[str, str]]) -> None:
    unprobed = {
        op: rest
        for rows in got.values()
        for op, rest in rows.items()
        if "not probed" in rest or "Error" in rest
    }
    assert not unprobed, unprobed
    for op, rest in got["lowered"].items():  # IR ops, or a view's "loads and stores only"
        assert rest and (not rest.startswith("(") or "loads and stores only" in rest), op


def test_a_codegen_plugins_listing_has_a_verdict_on_every_row(capsys):
    """cpu_cpp has no sdk_lower_op: an op the core does not lower falls back, and is not
    probed (whatever sample it would refuse)."""
    got = sections(run(capsys, "--plugin", "cpu_cpp"))
    assert_every_row_probed(got)
    assert got["fallback"]["aten.max_pool3d_with_indices.default"] == "(no IR lowering for this op)"
    assert got["lowered"]["aten._adaptive_avg_pool2d.default"] == "reduce:sum truediv"


def test_named_ops_and_what_a_decomposition_becomes(capsys):
    got = sections(run(capsys, "gelu", "hypot", "aten.mm.default", "sin"))
    assert set(got) == {"decomposed", "fallback", "library", "lowered"}, got
    # gelu: the ops its decomposition calls (whatever torch's decomposition is) and the IR
    # ops those become, as the listing of those ops says
    gelu = re.match(r"-> (.*)  \(IR ops: ([^;)]*)", got["decomposed"]["aten.gelu.default"])
    assert gelu, got["decomposed"]
    parts = sections(run(capsys, *gelu[1].split(", ")))
    assert not parts.get("decomposed"), "a decomposition is traced to the end"
    ir = {i for rest in parts.get("lowered", {}).values() for i in rest.split("(")[0].split()}
    assert ir and ir == set(gelu[2].split()), (ir, gelu[2])
    assert list(got["fallback"]) == ["aten.hypot.default"], "only the overloads a graph holds"
    assert list(got["library"]) == ["aten.mm.default"]
    assert cli.main(["ops", "no_such_op_q"]) == 2
    assert "no ATen op named no_such_op_q" in capsys.readouterr().err


VENDOR = """
import torch

import sdk
from sdk.ir import Const, Op

aten = torch.ops.aten


def elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    return torch.where(x > 0, x * scale, alpha * scale * (torch.exp(x * input_scale) - 1))


@sdk.hookimpl
def sdk_decompositions(ctx):
    return {aten.elu.default: elu}


@sdk.hookimpl
def sdk_keep_ops(ctx):
    return [aten.gelu.default, aten.hardsigmoid.default]


@sdk.hookimpl
def sdk_op_support(ctx, op, node):
    if op == aten.tan.default:
        return sdk.Support.no("no tan unit")
    return None


@sdk.hookimpl
def sdk_lower_op(ctx, op, args, kwargs, builder):
    if op != aten.gelu.default:
        return None
    x = args[0]

    def gelu(i):
        v = x.load(i)
        half = Op("mul", (v, Const(0.5, v.dtype)), v.dtype)
        e = Op("erf", (Op("mul", (v, Const(0.7071067811865476, v.dtype)), v.dtype),), v.dtype)
        return Op("mul", (half, Op("add", (e, Const(1.0, v.dtype)), v.dtype)), v.dtype)

    return builder.pointwise(x.sizes, x.dtype, gelu)
"""


@pytest.fixture
def vendor(make_plugin, fake_dist, use_registry):
    module = make_plugin(VENDOR, name="tablevendor")
    use_registry(fake_dist("tablevendor-sdk-plugin", {"tablevendor": module}))


def test_a_plugins_decompositions_kept_ops_refusals_and_lowerings(capsys, vendor):
    out = run(capsys, "--plugin", "tablevendor", "elu", "gelu", "hardsigmoid", "tan", "sin")
    got = sections(out)
    assert "a compile by sdk:tablevendor" in out
    elu = got["decomposed"]["aten.elu.default"]
    assert "exp" in elu and "where" in elu, elu
    gelu = got["lowered"]["aten.gelu.default"]
    assert gelu.startswith("add erf mul") and "sdk:tablevendor's sdk_lower_op" in gelu, gelu
    hardsigmoid = got["fallback"]["aten.hardsigmoid.default"]
    assert "kept whole by the plugin's sdk_keep_ops" in hardsigmoid, hardsigmoid
    assert "refused by sdk:tablevendor: no tan unit" in got["fallback"]["aten.tan.default"]
    assert got["lowered"]["aten.sin.default"] == "sin"
    # the core alone: the default table again
    got = sections(run(capsys, "elu", "gelu"))
    assert "aten.elu.default" in got["lowered"] and "aten.gelu.default" in got["decomposed"]
