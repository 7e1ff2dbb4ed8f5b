"""Vision models of HF transformers that the sdk was not tuned for: one training step each,
compared with eager and with a float64 copy by Dynamo's accuracy rule (``same`` with an
fp64 reference: the compiled result's RMSE against fp64 within a multiple of eager's).

    python benchmarks/hf_vision_sweep.py [--backend sdk:cpu_cpp] [--dtype fp32,bf16]
        [--models resnet,vit,...] [--batch 8] [--size 64] [--seeds 0,1] [--options JSON]

``--backend inductor`` runs the same check for Inductor: where both fail, the case is
ill-conditioned, not the backend wrong (a ReLU input within float32 noise of 0 flips its
mask, and the gradient of everything before it moves). Small configs of each family
(random init, 10 labels, dropout and drop-path 0), training mode; the loss, the logits and
every parameter gradient are checked. Runs on the CPU or a GPU (``--device``).

Small batches of small images make such flips likely: at batch 2 of 32x32 images the last
stage of a ResNet normalizes 2 values per channel, and ResNet and RegNet failed the rule for
the sdk and for Inductor alike. At batch 8 of 64x64 (the default) one case still does:
RegNet fp32, seed 0, through sdk:cpu_cpp. A BatchNorm output of its last stage is 1.0e-7
from 0 in float64 (found with forward hooks on an fp64 copy); the error starts at that
BatchNorm's bias gradient (its weight gradient, where the value is multiplied by about 0,
is right), and every gradient before it moves by 3e-4 of its largest element. Its last stage
alone, from eager's input, passes; so do seeds 1 to 3, and Inductor on seed 0.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch


def _cases(tf: Any) -> dict[str, Callable[[], Any]]:
    c = tf
    return {
        "resnet": lambda: c.ResNetForImageClassification(
            c.ResNetConfig(
                embedding_size=16,
                hidden_sizes=[16, 32, 64, 128],
                depths=[1, 1, 1, 1],
                num_labels=10,
            )
        ),
        "regnet": lambda: c.RegNetForImageClassification(
            c.RegNetConfig(
                embedding_size=16,
                hidden_sizes=[16, 32, 64, 128],
                depths=[1, 1, 1, 1],
                groups_width=8,
                num_labels=10,
            )
        ),
        "vit": lambda: c.ViTForImageClassification(
            c.ViTConfig(
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=128,
                image_size=64,
                patch_size=8,
                num_labels=10,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            )
        ),
        "swin": lambda: c.SwinForImageClassification(
            c.SwinConfig(
                image_size=64,
                patch_size=4,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[1, 2],
                window_size=4,
                num_labels=10,
                drop_path_rate=0.0,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
            )
        ),
        "mobilenet_v2": lambda: c.MobileNetV2ForImageClassification(
            c.MobileNetV2Config(
                image_size=64, depth_multiplier=0.35, num_labels=10, classifier_dropout_prob=0.0
            )
        ),
        "efficientnet": lambda: c.EfficientNetForImageClassification(
            c.EfficientNetConfig(
                image_size=64,
                width_coefficient=1.0,  # (the config's defaults are B7's)
                depth_coefficient=0.25,
                hidden_dim=1280,
                num_labels=10,
                dropout_rate=0.0,
                drop_connect_rate=0.0,
            )
        ),
        "convnext": lambda: c.ConvNextForImageClassification(
            c.ConvNextConfig(
                hidden_sizes=[16, 32, 64, 128],
                depths=[1, 1, 2, 1],
                num_labels=10,
                drop_path_rate=0.0,
            )
        ),
        "convnextv2": lambda: c.ConvNextV2ForImageClassification(
            c.ConvNextV2Config(
                hidden_sizes=[16, 32, 64, 128],
                depths=[1, 1, 1, 1],
                num_labels=10,
                drop_path_rate=0.0,
            )
        ),
    }


def _step(model: Any, x: torch.Tensor, y: torch.Tensor) -> list[Any]:
    out = model(pixel_values=x, labels=y)
    out.loss.backward()
    return [out.loss, out.logits, *(p.grad for p in model.parameters())]


def _one(make: Callable[[], Any], args: argparse.Namespace, dtype: torch.dtype, seed: int):
    from torch._dynamo.utils import same

    import sdk

    dev = torch.device(args.device)
    torch.manual_seed(seed)
    model = make().train()
    ref = make().train()
    ref.load_state_dict(model.state_dict())
    f64 = make().train()
    f64.load_state_dict(model.state_dict())
    model, ref, f64 = model.to(dev, dtype), ref.to(dev, dtype), f64.to(dev, torch.float64)
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    torch._dynamo.reset()
    if args.backend == "inductor":
        compiled = torch.compile(model, backend="inductor")
    else:
        name = args.backend.removeprefix("sdk:")
        compiled = torch.compile(model, backend=sdk.backend(name, **args.options))
    start = time.perf_counter()
    got = _step(compiled, x.to(dtype), y)
    seconds = time.perf_counter() - start
    want, ref64 = _step(ref, x.to(dtype), y), _step(f64, x.double(), y)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-4
    bad = [
        i
        for i, (a, b, r) in enumerate(zip(got, want, ref64, strict=True))
        if a is not None
        and not same(b, a, r, tol=tol, use_larger_multiplier_for_smaller_tensor=True)
    ]
    return len(got), bad, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="sdk:cpu_cpp")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="fp32,bf16")
    ap.add_argument("--models", default="")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--options", type=json.loads, default={}, help="backend options, JSON")
    args = ap.parse_args(argv)
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cases = _cases(transformers)
    names = args.models.split(",") if args.models else list(cases)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    failed = 0
    for name in names:
        for dt in args.dtype.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                label = f"{name:14s} {dt} seed {seed} {args.backend}"
                try:
                    n, bad, seconds = _one(cases[name], args, dtypes[dt], seed)
                except Exception as exc:  # noqa: BLE001 - reported, and the sweep goes on
                    failed += 1
                    print(f"{label}: RAISED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                    traceback.print_exc(limit=4)
                    continue
                failed += bool(bad)
                verdict = "ok" if not bad else f"MISMATCH at tensors {bad[:8]}"
                print(f"{label}: {n} tensors {verdict}, compile + step {seconds:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
