"""The whole-graph cache's key (``core.graph_cache.graph_key``) tells apart two graphs of one
code and one input layout that Dynamo traced under opposite guards."""

from __future__ import annotations

import torch
import torch.fx

from sdk.core import graph_cache
from sdk.plugin import CoreOptions, PluginOptions


class _Ctx:
    core_options, plugin_options = CoreOptions(), PluginOptions()
    plugin, graph_kind, device_type = "cpu_cpp", "inference", "cpu"


def _sliced(length: int) -> torch.fx.GraphModule:
    """``buf[:n].sum()``, the slice's traced length ``length``: ``n`` under the guard
    ``n <= buf.size(0)``, ``buf``'s size under its negation."""
    g = torch.fx.Graph()
    buf = g.placeholder("buf")
    n = g.placeholder("n")
    buf.meta["val"] = torch.empty(10, device="meta")
    sl = g.call_function(torch.ops.aten.slice.Tensor, (buf, 0, 0, n))
    sl.meta["val"] = torch.empty(length, device="meta")
    out = g.call_function(torch.ops.aten.sum.default, (sl,))
    out.meta["val"] = torch.empty((), device="meta")
    g.output((out,))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_graphs_of_one_code_traced_to_other_sizes_have_other_keys():
    short, whole = _sliced(4), _sliced(10)
    assert short.code == whole.code
    key = graph_cache.graph_key  # (specs: the same input layouts for both)
    assert key(short, ("specs",), _Ctx(), "1", "k") != key(whole, ("specs",), _Ctx(), "1", "k")
    assert key(short, ("specs",), _Ctx(), "1", "k") == key(_sliced(4), ("specs",), _Ctx(), "1", "k")
