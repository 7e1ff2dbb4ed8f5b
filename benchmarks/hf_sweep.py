"""HF transformers models the sdk was not tuned for: one training step each, compared with
eager and with a float64 copy by Dynamo's accuracy rule (``sdk.tools.bench_check
.dynamo_rmse_rule``: the compiled result's RMSE against fp64 within a multiple of eager's).

    python benchmarks/hf_sweep.py vision [--backend sdk:cuda_triton] [--dtype fp32,bf16]
        [--models resnet,vit,...] [--batch 8] [--size 64] [--seeds 0,1] [--options JSON]
    python benchmarks/hf_sweep.py text [--models bert,llama,...] [--batch 4]
        [--lengths 32] [--dynamic] ...

Small configs of each family (random init, dropout and drop-path 0), training mode; the
loss, the logits and every parameter gradient are checked. Runs on the CPU or a GPU
(``--device``). ``--backend inductor`` runs the same check for Inductor: where both fail,
the case is ill-conditioned, not the backend wrong.

``vision``: image classifiers over 10 labels, a batch of ``--size`` x ``--size`` images.
Small batches of small images make a ReLU input within float32 noise of 0 likely; its mask
flips, and the gradient of everything before it moves. At batch 2 of 32x32 images the last
stage of a ResNet normalizes 2 values per channel, and ResNet and RegNet failed the rule for
the sdk and for Inductor alike. At batch 8 of 64x64 (the default) one case still does:
RegNet fp32, seed 0, through sdk:cpu_cpp. A BatchNorm output of its last stage is 1.0e-7
from 0 in float64 (found with forward hooks on an fp64 copy); the error starts at that
BatchNorm's bias gradient (its weight gradient, where the value is multiplied by about 0,
is right), and every gradient before it moves by 3e-4 of its largest element. Its last stage
alone, from eager's input, passes; so do seeds 1 to 3, and Inductor on seed 0.

``text``: masked or causal language modelling, labels = the input ids, a vocabulary of 512,
two layers of width 64. ``--lengths 24,40 --dynamic``: one ``dynamic=True`` compile runs a
step at each length, and the last is checked. The models suite has GPT-2, DistilBERT,
Qwen2, T5, Whisper and Mixtral; these are others.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from typing import Any

import torch

VOCAB = 512

#: name -> (model class, config class, config keywords), of ``transformers``
_NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
_STAGES = {"hidden_sizes": [16, 32, 64, 128], "num_labels": 10}
VISION: dict[str, tuple[str, str, dict[str, Any]]] = {
    "resnet": (
        "ResNetForImageClassification",
        "ResNetConfig",
        {**_STAGES, "embedding_size": 16, "depths": [1, 1, 1, 1]},
    ),
    "regnet": (
        "RegNetForImageClassification",
        "RegNetConfig",
        {**_STAGES, "embedding_size": 16, "depths": [1, 1, 1, 1], "groups_width": 8},
    ),
    "vit": (
        "ViTForImageClassification",
        "ViTConfig",
        {
            **_NO_DROPOUT,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "image_size": 64,
            "patch_size": 8,
            "num_labels": 10,
        },
    ),
    "swin": (
        "SwinForImageClassification",
        "SwinConfig",
        {
            **_NO_DROPOUT,
            "image_size": 64,
            "patch_size": 4,
            "embed_dim": 16,
            "depths": [1, 1],
            "num_heads": [1, 2],
            "window_size": 4,
            "num_labels": 10,
            "drop_path_rate": 0.0,
        },
    ),
    "mobilenet_v2": (
        "MobileNetV2ForImageClassification",
        "MobileNetV2Config",
        {
            "image_size": 64,
            "depth_multiplier": 0.35,
            "num_labels": 10,
            "classifier_dropout_prob": 0.0,
        },
    ),
    "efficientnet": (
        "EfficientNetForImageClassification",
        "EfficientNetConfig",
        {
            "image_size": 64,
            "width_coefficient": 1.0,  # (the config's defaults are B7's)
            "depth_coefficient": 0.25,
            "hidden_dim": 1280,
            "num_labels": 10,
            "dropout_rate": 0.0,
            "drop_connect_rate": 0.0,
        },
    ),
    "convnext": (
        "ConvNextForImageClassification",
        "ConvNextConfig",
        {**_STAGES, "depths": [1, 1, 2, 1], "drop_path_rate": 0.0},
    ),
    "convnextv2": (
        "ConvNextV2ForImageClassification",
        "ConvNextV2Config",
        {**_STAGES, "depths": [1, 1, 1, 1], "drop_path_rate": 0.0},
    ),
    # (added in the nineteenth session, also untuned: relative position tables, layer
    # scale, average pooling without padding, attention biases gathered by index, patch
    # unfolding, weight standardization, convolutional projections, focal modulation)
    "deit": (
        "DeiTForImageClassification",
        "DeiTConfig",
        {
            **_NO_DROPOUT,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "image_size": 64,
            "patch_size": 8,
            "num_labels": 10,
        },
    ),
    "beit": (
        "BeitForImageClassification",
        "BeitConfig",
        {
            **_NO_DROPOUT,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "image_size": 64,
            "patch_size": 8,
            "num_labels": 10,
            "use_relative_position_bias": True,
            "use_mean_pooling": True,
            "layer_scale_init_value": 0.1,
            "drop_path_rate": 0.0,
        },
    ),
    "dinov2": (
        "Dinov2ForImageClassification",
        "Dinov2Config",
        {
            **_NO_DROPOUT,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "mlp_ratio": 2,
            "image_size": 64,
            "patch_size": 8,
            "num_labels": 10,
            "drop_path_rate": 0.0,
        },
    ),
    "levit": (
        "LevitForImageClassification",
        "LevitConfig",
        {
            "image_size": 64,
            "hidden_sizes": [32, 48, 64],
            "num_attention_heads": [2, 3, 4],
            "depths": [1, 1, 1],
            "key_dim": [8, 8, 8],
            "drop_path_rate": 0,
            "num_labels": 10,
            "down_ops": [["Subsample", 8, 4, 4, 2, 2], ["Subsample", 8, 6, 4, 2, 2]],
        },
    ),
    "mobilevit": (
        "MobileViTForImageClassification",
        "MobileViTConfig",
        {
            "image_size": 64,
            "hidden_sizes": [32, 48, 64],
            "neck_hidden_sizes": [8, 16, 24, 32, 40, 48, 64],
            "num_labels": 10,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "classifier_dropout_prob": 0.0,
        },
    ),
    "poolformer": (
        "PoolFormerForImageClassification",
        "PoolFormerConfig",
        {**_STAGES, "depths": [1, 1, 1, 1], "drop_path_rate": 0.0},
    ),
    "bit": (
        "BitForImageClassification",
        "BitConfig",
        {**_STAGES, "embedding_size": 16, "depths": [1, 1, 1, 1], "num_groups": 8},
    ),
    "cvt": (
        "CvtForImageClassification",
        "CvtConfig",
        {
            "embed_dim": [16, 32, 64],
            "num_heads": [1, 2, 4],
            "depth": [1, 2, 3],  # (its drop-path rates index stage i's list at i)
            "drop_path_rate": [0.0, 0.0, 0.0],
            "num_labels": 10,
        },
    ),
    "focalnet": (
        "FocalNetForImageClassification",
        "FocalNetConfig",
        {
            "image_size": 64,
            "patch_size": 4,
            "embed_dim": 16,
            "depths": [1, 1],
            "focal_levels": [2, 2],
            "focal_windows": [3, 3],
            "num_labels": 10,
            "drop_path_rate": 0.0,
            "hidden_dropout_prob": 0.0,
        },
    ),
    "segformer": (
        "SegformerForImageClassification",
        "SegformerConfig",
        {
            **_NO_DROPOUT,
            "depths": [1, 1, 1, 1],
            "hidden_sizes": [16, 32, 64, 128],
            "num_attention_heads": [1, 1, 2, 4],
            "num_labels": 10,
            "drop_path_rate": 0.0,
            "classifier_dropout_prob": 0.0,
        },
    ),
}

_LAYERS = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
}
TEXT: dict[str, tuple[str, str, dict[str, Any]]] = {
    "bert": ("BertForMaskedLM", "BertConfig", {**_LAYERS, **_NO_DROPOUT}),
    "roberta": (
        "RobertaForMaskedLM",
        "RobertaConfig",
        {**_LAYERS, **_NO_DROPOUT, "max_position_embeddings": 70},
    ),
    "llama": ("LlamaForCausalLM", "LlamaConfig", {**_LAYERS, "num_key_value_heads": 2}),
    "mistral": ("MistralForCausalLM", "MistralConfig", {**_LAYERS, "num_key_value_heads": 2}),
    "gemma": (
        "GemmaForCausalLM",
        "GemmaConfig",
        {**_LAYERS, "num_key_value_heads": 2, "head_dim": 16},
    ),
    "phi": (
        "PhiForCausalLM",
        "PhiConfig",
        {**_LAYERS, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0},
    ),
    "gpt_neox": (
        "GPTNeoXForCausalLM",
        "GPTNeoXConfig",
        {**_LAYERS, "hidden_dropout": 0.0, "attention_dropout": 0.0},
    ),
    "opt": (
        "OPTForCausalLM",
        "OPTConfig",
        {
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "ffn_dim": 128,
            "word_embed_proj_dim": 64,
            "max_position_embeddings": 64,
            "dropout": 0.0,
            "attention_dropout": 0.0,
        },
    ),
    "bart": (
        "BartForConditionalGeneration",
        "BartConfig",
        {
            "vocab_size": VOCAB,
            "d_model": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128,
            "max_position_embeddings": 64,
            "dropout": 0.0,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
        },
    ),
    # (added in the nineteenth session, also untuned: relative positions gathered by index,
    # ALiBi, shared layers, parallel attention, bottlenecks, pooling between blocks)
    "electra": (
        "ElectraForMaskedLM",
        "ElectraConfig",
        {**_LAYERS, **_NO_DROPOUT, "embedding_size": 32},
    ),
    "albert": (
        "AlbertForMaskedLM",
        "AlbertConfig",
        {**_LAYERS, **_NO_DROPOUT, "embedding_size": 32, "classifier_dropout_prob": 0.0},
    ),
    "deberta_v2": (
        "DebertaV2ForMaskedLM",
        "DebertaV2Config",
        {
            **_LAYERS,
            **_NO_DROPOUT,
            "relative_attention": True,
            "position_buckets": 16,
            "max_relative_positions": 32,
            "pos_att_type": ["p2c", "c2p"],
        },
    ),
    "gptj": (
        "GPTJForCausalLM",
        "GPTJConfig",
        {
            "vocab_size": VOCAB,
            "n_embd": 64,
            "n_layer": 2,
            "n_head": 4,
            "rotary_dim": 8,
            "n_positions": 64,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    ),
    "falcon": (
        "FalconForCausalLM",
        "FalconConfig",
        {
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
        },
    ),
    "bloom": (
        "BloomForCausalLM",
        "BloomConfig",
        {
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "n_layer": 2,
            "n_head": 4,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
        },
    ),
    "stablelm": (
        "StableLmForCausalLM",
        "StableLmConfig",
        {**_LAYERS, "num_key_value_heads": 2, "hidden_dropout": 0.0, "attention_dropout": 0.0},
    ),
    "mobilebert": (
        "MobileBertForMaskedLM",
        "MobileBertConfig",
        {
            **_LAYERS,
            **_NO_DROPOUT,
            "embedding_size": 32,
            "intra_bottleneck_size": 32,
            "true_hidden_size": 32,
            "num_feedforward_networks": 2,
        },
    ),
    "funnel": (
        "FunnelForMaskedLM",
        "FunnelConfig",
        {
            "vocab_size": VOCAB,
            "block_sizes": [1, 1],
            "d_model": 64,
            "n_head": 4,
            "d_head": 16,
            "d_inner": 128,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
        },
    ),
}


def _inputs(args: argparse.Namespace, dev: torch.device) -> list[dict[str, torch.Tensor]]:
    """One batch per step: images and labels (vision), or ids per length (text)."""
    if args.family == "vision":
        x = torch.randn(args.batch, 3, args.size, args.size, device=dev)
        return [{"pixel_values": x, "labels": torch.randint(0, 10, (args.batch,), device=dev)}]
    batches = []
    for length in args.lengths:
        ids = torch.randint(3, VOCAB, (args.batch, length), device=dev)  # 0-2: special ids
        batches.append({"input_ids": ids, "labels": ids})
    return batches


def _step(model: Any, batch: dict[str, torch.Tensor], dtype: torch.dtype) -> list[Any]:
    model.zero_grad(set_to_none=True)
    kw = {k: v.to(dtype) if v.is_floating_point() else v for k, v in batch.items()}
    out = model(**kw)
    out.loss.backward()
    return [out.loss, out.logits, *(p.grad for p in model.parameters())]


def _one(case: tuple[str, str, dict[str, Any]], args: argparse.Namespace, dtype, seed: int):
    """(tensors checked, the positions of those that fail the rule, seconds of the compiled
    steps, the first one's compile included, and what compiled: graphs, graph breaks and
    the ops run through ATen one by one, from ``sdk.collect_reports``)."""
    import transformers

    import sdk
    from sdk.tools.bench_check import dynamo_rmse_rule

    model_cls, config_cls = (getattr(transformers, name) for name in case[:2])

    def make() -> Any:
        return model_cls(config_cls(**case[2])).train()

    dev = torch.device(args.device)
    torch.manual_seed(seed)
    model, ref, f64 = make(), make(), make()
    ref.load_state_dict(model.state_dict())
    f64.load_state_dict(model.state_dict())
    model, ref, f64 = model.to(dev, dtype), ref.to(dev, dtype), f64.to(dev, torch.float64)
    batches = _inputs(args, dev)
    sdk.reset()
    backend: Any = "inductor"
    if args.backend != "inductor":
        backend = sdk.backend(args.backend.removeprefix("sdk:"), **args.options)
    compiled = torch.compile(model, backend=backend, dynamic=args.dynamic or None)
    seconds = 0.0
    with sdk.collect_reports() as reports:
        for batch in batches:
            start = time.perf_counter()
            got = _step(compiled, batch, dtype)
            seconds += time.perf_counter() - start
            want, ref64 = _step(ref, batch, dtype), _step(f64, batch, torch.float64)
    fallbacks = sorted({fb.op for g in reports.graphs for fb in g.fallbacks})
    more = f" and {len(fallbacks) - 4} more" if len(fallbacks) > 4 else ""
    symbolic = sum(g.sizes.startswith("symbolic") for g in reports.graphs)
    compiled_what = (
        f"{len(reports.graphs)} graphs{f' ({symbolic} symbolic)' if args.dynamic else ''}, "
        f"{len(reports.breaks)} breaks, "
        f"{len(fallbacks)} ops in ATen{': ' + ', '.join(fallbacks[:4]) + more if fallbacks else ''}"
    )
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-4
    bad = [
        i
        for i, (a, b, r) in enumerate(zip(got, want, ref64, strict=True))
        if a is not None and not dynamo_rmse_rule(b, a, r, tol)[0]
    ]
    return len(got), bad, seconds, compiled_what


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", choices=("vision", "text"))
    ap.add_argument(
        "--backend",
        default=None,
        help="default: sdk:cuda_triton on a CUDA device, else sdk:cpu_cpp",
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="fp32,bf16")
    ap.add_argument("--models", default="")
    ap.add_argument("--batch", type=int, default=None, help="8 images, or 4 sequences")
    ap.add_argument("--size", type=int, default=64, help="vision: image height and width")
    ap.add_argument("--lengths", type=lambda s: [int(n) for n in s.split(",")], default=[32])
    ap.add_argument("--dynamic", action="store_true", help="compile with dynamic=True")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--options", type=json.loads, default={}, help="backend options, JSON")
    args = ap.parse_args(argv)
    if args.batch is None:
        args.batch = 8 if args.family == "vision" else 4
    if args.backend is None:  # (the plugin of the device: cpu_cpp hands CUDA graphs to ATen)
        args.backend = "sdk:cuda_triton" if args.device.startswith("cuda") else "sdk:cpu_cpp"
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cases = VISION if args.family == "vision" else TEXT
    names = args.models.split(",") if args.models else list(cases)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    unknown = [n for n in names if n not in cases] + [
        d for d in args.dtype.split(",") if d not in dtypes
    ]
    if unknown:
        ap.error(
            f"unknown {', '.join(unknown)}: --models takes {', '.join(cases)}; "
            f"--dtype takes {', '.join(dtypes)}"
        )
    mode = " dynamic" if args.dynamic else ""
    failed = 0
    for name in names:
        for dt in args.dtype.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                label = f"{name:14s} {dt} seed {seed} {args.backend}{mode}"
                try:
                    n, bad, seconds, what = _one(cases[name], args, dtypes[dt], seed)
                except Exception as exc:  # noqa: BLE001 - reported, and the sweep goes on
                    failed += 1
                    print(f"{label}: RAISED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                    traceback.print_exc(limit=4)
                    continue
                failed += bool(bad)
                verdict = "ok" if not bad else f"MISMATCH at tensors {bad[:8]}"
                print(
                    f"{label}: {n} tensors {verdict}, compiled steps {seconds:.1f} s; "
                    + (what if args.backend != "inductor" else ""),
                    flush=True,
                )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
