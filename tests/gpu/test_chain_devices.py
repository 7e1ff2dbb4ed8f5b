"""Chains on CUDA tensors: partitions of plugins on other devices (issue 26).

* ``sdk:iree_cpu`` (llvm-cpu, a graph-level plugin) as the backend of a CUDA graph: its
  partitions get CPU copies of their inputs and their outputs go back to the GPU; what IREE
  refuses goes to cuda_triton on the GPU.
* ``sdk:cuda_triton`` chained with cpu_cpp: cpu_cpp (kernel-level, CPU only) claims nothing of a
  CUDA graph, so no C++ kernel is handed CUDA pointers.
Training steps against eager, forward and gradients.
"""

from __future__ import annotations

import pytest
import torch

import sdk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def step(x, w, v):
    h = torch.nn.functional.scaled_dot_product_attention(x @ w, x, x).sin()
    return (h * v).sum()


def _run(backend):
    torch.manual_seed(0)
    x = torch.randn(1, 2, 16, 32, device="cuda")
    w = torch.randn(32, 32, device="cuda", requires_grad=True)
    v = torch.randn(1, 2, 16, 32, device="cuda", requires_grad=True)
    report = sdk.explain(step, x, w, v, backend=backend)
    out = torch.compile(step, backend=backend)(x, w, v)
    grads = torch.autograd.grad(out, (w, v))
    ref = step(x, w, v)
    ref_grads = torch.autograd.grad(ref, (w, v))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    for g, r in zip(grads, ref_grads, strict=True):
        assert g.device.type == "cuda"
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
    return report


def test_iree_cpu_partitions_of_a_cuda_graph_get_device_copies():
    pytest.importorskip("iree_sdk_plugin", reason="the IREE plugin wheel is not installed")
    report = _run(sdk.backend("iree_cpu", chain=["cuda_triton"]))
    parts = [p for g in report.graphs for p in g.partitions]
    assert any(p.compiled_by == "iree_cpu" for p in parts), str(report)
    assert {g.kind for g in report.graphs if g.partitions} == {"forward", "backward"}


def test_cpu_cpp_in_the_chain_of_a_cuda_graph_claims_nothing():
    report = _run(sdk.backend("cuda_triton", chain=["cpu_cpp"]))
    assert all(k.plugin == "cuda_triton" for k in report.kernels), str(report)


def _with_cpu_values(x, w):
    # index arithmetic on the CPU beside a CUDA model (as HF models build position buckets
    # and masks), a CPU scalar, and a value moved to the GPU
    pos = torch.arange(x.shape[-1])
    bucket = ((pos * 3) % 7).float().to(x.device)
    scale = torch.tensor(0.5)
    return ((x @ w).relu() * scale + bucket).sum(), pos.sum()


def test_cpu_values_in_a_cuda_graph_leave_the_rest_compiled():
    """A CUDA graph with values on the CPU ran entirely in ATen (T5's training step on an
    H100: its forward graph, 1474 ops): now what computes on the CPU, or moves a CPU tensor
    to the GPU, runs through ATen, the rest in cuda_triton's kernels, through the runner."""
    torch.manual_seed(0)
    x = torch.randn(8, 32, device="cuda")
    w = torch.randn(32, 32, device="cuda", requires_grad=True)
    report = sdk.explain(_with_cpu_values, x, w, backend="sdk:cuda_triton")
    out, n = torch.compile(_with_cpu_values, backend="sdk:cuda_triton")(x, w)
    (grad,) = torch.autograd.grad(out, (w,))
    ref, ref_n = _with_cpu_values(x, w)
    (ref_grad,) = torch.autograd.grad(ref, (w,))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-4)
    assert n.device.type == "cpu" and n == ref_n
    forward = next(g for g in report.graphs if g.kind == "forward")
    assert forward.kernels, str(report)
    reasons = {f.reason for f in forward.fallbacks}
    assert reasons <= {
        "computes on cpu, where the graph's kernels run on cuda",
        "copies a cpu tensor to cuda",
    }, reasons
    assert reasons, str(report)
    assert all(g.runner == "native" for g in report.graphs), [g.runner for g in report.graphs]
