"""The worked examples of docs/vendor-guide.md run as written.

"Lowering an op yourself": the guide's ``sdk_keep_ops`` and ``sdk_lower_op`` for ``aten.gelu``,
put beside the ``--c-like`` scaffold's other hooks as a vendor would, lower gelu into the
plugin's own kernel (seen through ``sdk.explain``), both ``approximate`` forms, in fp32 and
bf16 and under symbolic sizes, matching eager."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import sdk
from sdk.scaffold import generate, module_name
from tests.contract.test_clike_scaffold import TOL, _has_compiler

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "vendor-guide.md"
NAME = "guidegelu"
#: the scaffold's hooks the guide's block goes beside (its own sdk_lower_op is replaced)
SCAFFOLD_HOOKS = (
    "sdk_plugin_info",
    "sdk_plugin_status",
    "sdk_op_support",
    "sdk_render_kernel",
    "sdk_compile_kernels",
    "sdk_cache_key",
)

pytestmark = pytest.mark.skipif(not _has_compiler(), reason="no C compiler")


def lower_op_example() -> str:
    """The python block under the guide's "Lowering an op yourself" heading."""
    section = GUIDE.read_text().split("## Lowering an op yourself", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section has one example, which this test runs"
    return blocks[0]


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The --c-like scaffold, with the guide's block as module ``guide`` of its package."""
    root = generate(NAME, tmp_path_factory.mktemp("guide"), c_like=True)
    pkg = root / module_name(NAME)
    hooks = ", ".join(SCAFFOLD_HOOKS)
    (pkg / "guide.py").write_text(f"from . import {hooks}  # noqa: F401\n\n{lower_op_example()}")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for mod in [m for m in sys.modules if m.startswith(module_name(NAME))]:
        del sys.modules[mod]


@pytest.fixture
def backend(package, fake_dist, use_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    plugin = f"{module_name(NAME)}.guide"
    importlib.import_module(plugin)
    use_registry(fake_dist(f"{NAME}-sdk-plugin", {NAME: plugin}))
    return sdk.backend(NAME)


def _net(approximate: str):
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x * 1.5, approximate=approximate) + x

    return f


def _lowered_by_plugin(report: sdk.ExplainReport) -> bool:
    """A generated kernel covers the gelu call itself (the core would have decomposed it)."""
    return any("aten.gelu.default" in k.ops for k in report.kernels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_guide_gelu_lowering_is_used_and_matches_eager(backend, approximate, dtype):
    f = _net(approximate)
    x = torch.randn(8, 48, dtype=dtype) * 3
    report = sdk.explain(f, x, backend=backend)
    assert _lowered_by_plugin(report) and not report.fallbacks, str(report)
    compiled = torch.compile(f, backend=backend)
    for _ in range(2):
        x = torch.randn(8, 48, dtype=dtype) * 3
        torch.testing.assert_close(compiled(x), f(x), **TOL[dtype])


def test_guide_gelu_lowering_takes_symbolic_sizes(backend, graph_reports):
    f = _net("tanh")
    compiled = torch.compile(f, backend=backend, dynamic=True)
    for n in (7, 40, 301):
        x = torch.randn(2, n)
        torch.testing.assert_close(compiled(x), f(x), **TOL[torch.float32])
    assert len(graph_reports) == 1, [r.sizes for r in graph_reports]
    report = graph_reports[0]
    assert report.sizes.startswith("symbolic: "), report.sizes
    assert any("aten.gelu.default" in k.ops for k in report.kernels), report.kernels
    assert not report.fallbacks, report.fallbacks
