"""Does each of torch's fused attention kernels repeat its gradients, and how fast is it?

For a few q/k/v shapes (bf16, causal, on a GPU): the forward and backward of
``scaled_dot_product_attention`` under one backend at a time (cuDNN's, flash), run twice on the
same inputs and gradients, compared bit for bit, then timed with ``triton.testing.do_bench``
(median). With ``det``, under ``torch.use_deterministic_algorithms(True)``.

    python benchmarks/attention_determinism.py [det]
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(8, 12, 512, 64), (4, 4, 128, 64), (16, 16, 1024, 64)]


def measure(backend: SDPBackend, shape: tuple[int, ...]) -> str:
    q, k, v = (
        torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)

    try:
        runs = []
        for _ in range(2):
            q.grad = k.grad = v.grad = None
            step()
            runs.append([t.grad.clone() for t in (q, k, v)])
        same = all(torch.equal(a, b) for a, b in zip(*runs, strict=True))
        ms = triton.testing.do_bench(step, warmup=50, rep=300, return_mode="median")
    except RuntimeError as exc:
        return f"{backend.name}: {type(exc).__name__} {str(exc)[:80]}"
    return f"{backend.name}: {ms * 1000:.0f} us fwd+bwd, repeats={same}"


def main() -> None:
    if sys.argv[1:] == ["det"]:
        torch.use_deterministic_algorithms(True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for shape in SHAPES:
        backends = (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION)
        print(shape, " | ".join(measure(b, shape) for b in backends))


if __name__ == "__main__":
    main()
