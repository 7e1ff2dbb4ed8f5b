"""The kernel suite's workloads (``python -m sdk bench``): elementwise chains, softmax, layer
norm and MLPs; on a GPU also a GPT-2 training step and resnet18.

:func:`_cpu_suite` and :func:`_gpu_suite` map each row's name to the function that builds its
:class:`~sdk.tools.bench_timing.Case` on a device.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

from sdk.tools.bench_check import _named
from sdk.tools.bench_timing import Case, Skip

# ---------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------


def _pw(x: Any, y: Any) -> Any:
    import torch

    return (x * torch.sigmoid(x) + y).relu() * 0.5 - torch.tanh(y)


def _softmax(x: Any) -> Any:
    return x.softmax(dim=-1)


def _layer_norm(x: Any, w: Any, b: Any) -> Any:
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), w, b)


def _one(r: Any) -> list[tuple[str, Any]]:
    return [("out", r)]


def _pw_case(dev: Any, m: int, n: int) -> Case:
    import torch

    x, y = (torch.randn(m, n, device=dev) for _ in range(2))
    return Case(
        _pw,
        lambda f: f(x, y),
        _one,
        f"{m}x{n} fp32, x*sigmoid(x)+y, relu, *0.5 - tanh(y)",
        min_bytes=3 * m * n * 4,
    )


def _softmax_case(dev: Any, m: int, n: int) -> Case:
    import torch

    x = torch.randn(m, n, device=dev)
    return Case(_softmax, lambda f: f(x), _one, f"{m}x{n} fp32, last dim", min_bytes=2 * m * n * 4)


def _layer_norm_case(dev: Any, m: int, n: int, dtype: Any) -> Case:
    import torch

    x = torch.randn(m, n, device=dev, dtype=dtype)
    w = torch.randn(n, device=dev, dtype=dtype)
    b = torch.randn(n, device=dev, dtype=dtype)
    size = torch.finfo(dtype).bits // 8
    return Case(
        _layer_norm,
        lambda f: f(x, w, b),
        _one,
        f"{m}x{n} {_dt(dtype)}, affine",
        min_bytes=(2 * m * n + 2 * n) * size,
    )


def _dt(dtype: Any) -> str:
    return str(dtype).replace("torch.", "").replace("float32", "fp32").replace("bfloat16", "bf16")


def _mlp(sizes: list[int], act: Callable[[], Any]) -> Any:
    import torch

    layers: list[Any] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        if i:
            layers.append(act())
        layers.append(torch.nn.Linear(a, b))
    return torch.nn.Sequential(*layers)


def _mlp_inference_case(dev: Any, batch: int, sizes: list[int], act: Any, dtype: Any) -> Case:
    import torch

    model = _mlp(sizes, act).to(device=dev, dtype=dtype).eval()
    x = torch.randn(batch, sizes[0], device=dev, dtype=dtype)

    def step(f: Callable[..., Any]) -> Any:
        with torch.no_grad():
            return f(x)

    arrows = " -> ".join(map(str, sizes))
    return Case(
        model, step, _one, f"batch {batch}, {arrows}, {act.__name__}, {_dt(dtype)}, no_grad"
    )


def _mlp_train_case(dev: Any) -> Case:
    import torch

    model = _mlp([512, 2048, 512], torch.nn.GELU).to(dev)
    x = torch.randn(256, 512, device=dev, requires_grad=True)
    params = list(model.named_parameters())

    def loss_fn(inp: Any) -> Any:
        return model(inp).pow(2).mean()

    def step(f: Callable[..., Any]) -> Any:
        model.zero_grad(set_to_none=True)
        x.grad = None
        loss = f(x)
        loss.backward()
        return loss

    def outputs(loss: Any) -> list[tuple[str, Any]]:
        return (
            [("loss", loss)] + [(f"grad {n}", p.grad) for n, p in params] + [("grad input", x.grad)]
        )

    return Case(
        loss_fn,
        step,
        outputs,
        "batch 256, 512 -> 2048 -> 512, GELU, fp32; fwd + pow(2).mean() + bwd",
    )


def _gpt2_train_case(dev: Any) -> Case:
    import torch

    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        raise Skip(f"transformers is not installed ({e})") from e
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=4, n_embd=768, n_head=12, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    model = GPT2LMHeadModel(cfg).to(dev).train()
    model64 = copy.deepcopy(model).double()
    model = model.to(torch.bfloat16)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device=dev)

    def run(m: Any, f: Callable[..., Any]) -> Any:
        m.zero_grad(set_to_none=True)
        loss = f(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    def collect(m: Any, loss: Any) -> list[tuple[str, Any]]:
        return [("loss", loss)] + [(f"grad {n}", p.grad) for n, p in m.named_parameters()]

    def fp64_outputs() -> list[tuple[str, Any]]:
        out = _named(collect(model64, run(model64, model64)))
        model64.zero_grad(set_to_none=True)
        return out

    return Case(
        model,
        lambda f: run(model, f),
        lambda loss: collect(model, loss),
        "HF GPT2LMHeadModel n_layer=4 n_embd=768 n_head=12, random weights, "
        "dropout 0, bf16, 8x512 tokens, loss(labels=input_ids) + bwd",
        fp64_outputs=fp64_outputs,
        rule_tol=1e-2,
    )


def _resnet18_case(dev: Any) -> Case:
    import torch

    try:
        import torchvision
    except ImportError as e:
        raise Skip(f"torchvision is not installed ({e})") from e
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(dev).eval()
    model64 = copy.deepcopy(model).double()
    model = model.to(torch.bfloat16)
    x = torch.randn(64, 3, 224, 224, device=dev)
    x64, x = x.double(), x.to(torch.bfloat16)

    def step(f: Callable[..., Any]) -> Any:
        with torch.no_grad():
            return f(x)

    def fp64_outputs() -> list[tuple[str, Any]]:
        with torch.no_grad():
            return [("out", model64(x64))]

    return Case(
        model,
        step,
        _one,
        "torchvision resnet18, weights=None, bs 64, 224x224, bf16, no_grad",
        fp64_outputs=fp64_outputs,
        rule_tol=1e-4,
    )


def _cpu_suite() -> dict[str, Callable[[Any], Case]]:
    import torch

    return {
        "pw_chain": lambda d: _pw_case(d, 2048, 4096),
        "softmax": lambda d: _softmax_case(d, 2048, 4096),
        "layer_norm": lambda d: _layer_norm_case(d, 4096, 1024, torch.float32),
        "mlp_inference": lambda d: _mlp_inference_case(
            d, 256, [512, 2048, 512], torch.nn.GELU, torch.float32
        ),
        "mlp_train_step": _mlp_train_case,
    }


def _gpu_suite() -> dict[str, Callable[[Any], Case]]:
    import torch

    return {
        "pw_chain": lambda d: _pw_case(d, 8192, 8192),
        "softmax": lambda d: _softmax_case(d, 8192, 8192),
        "layer_norm": lambda d: _layer_norm_case(d, 16384, 4096, torch.bfloat16),
        "mlp_inference": lambda d: _mlp_inference_case(
            d, 8192, [4096, 16384, 4096], torch.nn.GELU, torch.bfloat16
        ),
        "mlp_bs1": lambda d: _mlp_inference_case(
            d, 1, [512, 512, 512, 10], torch.nn.ReLU, torch.float32
        ),
        "gpt2_train_step": _gpt2_train_case,
        "resnet18_inference": _resnet18_case,
    }
