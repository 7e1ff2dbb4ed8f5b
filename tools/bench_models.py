"""``python -m sdk bench --suite models``: real models through ``sdk:<plugin>``, Inductor and eager.

Rows (``--list`` prints them; each in bf16 and fp32, named ``<model>_<dtype>``):

* inference, ``eval()`` under ``no_grad``: torchvision ``resnet18``, ``resnet34``,
  ``efficientnet_b0``, ``mobilenet_v3_large``, ``convnext_tiny`` (7x7 depthwise
  convolutions, channels-last LayerNorm); timm ``deit_tiny`` and ``swin_tiny``; timm
  ``convnext_tiny`` (``timm_convnext_tiny``: ConvNeXt as timm builds it, ``LayerNorm2d``)
  and ``regnety_008`` (RegNetY: grouped convolutions, squeeze-excitation), also as
  training steps (``_train``: timm's dropout and drop-path 0);
* training steps (``<model>_train``: forward + loss + backward, no optimizer): torchvision
  ``resnet50``, ``mobilenet_v3_large`` and ``convnext_tiny`` in ``train()`` mode (batch norm
  on the batch's statistics; dropout and stochastic depth 0), cross-entropy over 1000
  classes, bs 16 at 224x224 (``--size full``);
  HF ``GPT2LMHeadModel``, ``DistilBertForMaskedLM``, ``Qwen2ForCausalLM`` (GQA decoder),
  ``WhisperForConditionalGeneration``, ``T5ForConditionalGeneration`` (encoder-decoder,
  relative position bias), ``BartForConditionalGeneration`` (bart-base's sizes) and
  ``MixtralForCausalLM`` (mixture of experts, top-2 routing); every dropout probability is 0 in the config, so
  a step is deterministic; ``attn_implementation="sdpa"`` where HF accepts it.

Weights are random, built from configs (no downloads). A row whose package is missing
or does not import is skipped with the reason.

Method, on top of the kernels suite's (``tools/bench.py``: cold compile, steady-state
median, fresh caches, Dynamo's RMSE rule):

* **Build.** Under ``torch.manual_seed(0)`` the model is built on the CPU in fp32 and an
  fp64 deep copy is kept as the reference; then both go to the device and the model is
  cast to the row's dtype. Inputs are drawn in fp32 (token ids as int64) and cast the
  same way, so every dtype and backend sees the same weights and inputs.
* **Correctness.** The cold call's outputs (logits; for training the loss, the logits
  and the gradient of every parameter) are checked against eager with Dynamo's benchmark
  rule and the fp64 reference (:func:`sdk.tools.bench.dynamo_rmse_rule`); tolerances as the
  Dynamo suites use them: torchvision 1e-4, timm 1e-3, HF training 1e-2. A failing sdk
  check is ``MISMATCH``; a MISMATCH or an error in any sdk row makes the exit status 1.
* **Sizes.** ``--size full`` (the default on a GPU): convnets and ViTs bs 32 at 224x224;
  GPT-2 6 layers x 768 at 8x512 tokens; DistilBERT base at 16x256; the Qwen2 decoder 4
  layers, hidden 1024, 16 query / 4 KV heads at 4x512; Whisper-tiny at bs 8 with 3000
  mel frames and 128 label tokens. ``--size small`` (the default without a GPU): the same
  model classes with tiny configs, so the suite runs in minutes on a few CPU cores:
  convnets bs 2 at 64x64 (full depth), ViTs at 64x64 with 2 blocks, transformers 2
  layers, hidden 64-128, vocabulary 1000, 2x32 tokens.
* **Targets.** Per row ``sdk/ind`` (sdk over Inductor) and ``sdk/best`` (sdk over the
  faster of eager and Inductor); the target for both is <= 1.1. Geomeans over the rows
  whose sdk and Inductor checks passed.
* **Launches** (CUDA only): after timing, one more warm step of every backend runs under
  ``torch.profiler.profile(activities=[ProfilerActivity.CUDA])``; the CUDA kernel, memcpy
  and memset activities are counted and their device time summed per class
  (:func:`classify_kernel`: triton, gemm, conv, attention, copy, other). It is always in
  the ``--json`` output; ``--profile`` prints it after the table. A profiler failure is
  recorded as the row's profile error and never fails the row.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys

from sdk.tools import bench_report, bench_timing
from sdk.tools.bench_hf_cases import (
    _bart,
    _distilbert,
    _gpt2,
    _hf_convnext_train,
    _mixtral,
    _qwen2,
    _t5,
    _whisper,
)
from sdk.tools.bench_launches import (
    KERNEL_CLASSES,
    classify_kernel,
    cuda_launches,
    summarize_device_events,
)
from sdk.tools.bench_model_cases import (
    Model,
    _import_error,
    _timm,
    _timm_train,
    _torchvision,
    _torchvision_train,
)
from sdk.tools.bench_models_report import TARGET, _row_json, profile_text, table
from sdk.tools.bench_timing import Case, Row, Skip

__all__ = [
    "DTYPES",
    "KERNEL_CLASSES",
    "MODELS",
    "SIZES",
    "TARGET",
    "Case",
    "Model",
    "Row",
    "Skip",
    "_import_error",
    "_row_json",
    "classify_kernel",
    "cuda_launches",
    "main",
    "profile_text",
    "rows",
    "select",
    "summarize_device_events",
    "table",
]


SIZES = ("small", "full")
DTYPES = ("bf16", "fp32")


# ---------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------


MODELS: tuple[Model, ...] = (
    Model("resnet18", "inference", "torchvision", _torchvision("resnet18")),
    Model("resnet34", "inference", "torchvision", _torchvision("resnet34")),
    Model("efficientnet_b0", "inference", "torchvision", _torchvision("efficientnet_b0")),
    Model("mobilenet_v3_large", "inference", "torchvision", _torchvision("mobilenet_v3_large")),
    Model("convnext_tiny", "inference", "torchvision", _torchvision("convnext_tiny")),
    Model("resnet50_train", "train", "torchvision", _torchvision_train("resnet50")),
    Model(
        "mobilenet_v3_large_train", "train", "torchvision", _torchvision_train("mobilenet_v3_large")
    ),
    Model("convnext_tiny_train", "train", "torchvision", _torchvision_train("convnext_tiny")),
    Model("efficientnet_b0_train", "train", "torchvision", _torchvision_train("efficientnet_b0")),
    Model("deit_tiny", "inference", "timm", _timm("deit_tiny")),
    Model("swin_tiny", "inference", "timm", _timm("swin_tiny")),
    Model("timm_convnext_tiny", "inference", "timm", _timm("timm_convnext_tiny")),
    Model("timm_convnext_tiny_train", "train", "timm", _timm_train("timm_convnext_tiny")),
    Model("regnety_008", "inference", "timm", _timm("regnety_008")),
    Model("regnety_008_train", "train", "timm", _timm_train("regnety_008")),
    Model("timm_resnet50_train", "train", "timm", _timm_train("timm_resnet50")),
    Model("gpt2_train", "train", "transformers", _gpt2),
    Model("distilbert_train", "train", "transformers", _distilbert),
    Model("qwen2_train", "train", "transformers", _qwen2),
    Model("whisper_train", "train", "transformers", _whisper),
    Model("t5_train", "train", "transformers", _t5),
    Model("bart_train", "train", "transformers", _bart),
    Model("mixtral_train", "train", "transformers", _mixtral),
    Model("hf_convnext_tiny_train", "train", "transformers", _hf_convnext_train),
)


def rows() -> dict[str, tuple[Model, str]]:
    """Every row name -> (model, dtype), in suite order."""
    return {f"{m.name}_{dt}": (m, dt) for m in MODELS for dt in DTYPES}


def select(only: str | None, dtype: str | None) -> list[str]:
    """The row names ``--only`` and ``--dtype`` pick, in suite order. ``only`` is a
    comma-separated list of row names (``resnet18_bf16``), model names (``resnet18``: both
    dtypes) or shell patterns (``*_train_fp32``). Raises ``ValueError`` naming the valid
    rows for an entry that matches nothing."""
    table = rows()
    names = list(table)
    if only:
        picked: set[str] = set()
        unknown = []
        for item in (w.strip() for w in only.split(",")):
            if not item:
                continue
            hit = [
                n
                for n in names
                if fnmatch.fnmatchcase(n, item) or fnmatch.fnmatchcase(table[n][0].name, item)
            ]
            if not hit:
                unknown.append(item)
            picked.update(hit)
        if unknown:
            raise ValueError(
                f"unknown row(s) {', '.join(unknown)}; the models suite's rows are: "
                f"{', '.join(names)} (a model name without the dtype suffix selects both "
                f"dtypes; shell patterns such as '*_train_fp32' work too)"
            )
        names = [n for n in names if n in picked]
    if dtype and dtype != "all":
        names = [n for n in names if table[n][1] == dtype]
    return names


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def main(args: argparse.Namespace) -> int:
    """``--suite models``; the arguments are those of ``python -m sdk bench``."""
    try:
        names = select(args.only, getattr(args, "dtype", None))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not names:
        print("error: --only and --dtype select no row", file=sys.stderr)
        return 2
    table_ = rows()
    if getattr(args, "list", False):
        for n in names:
            m, _dt = table_[n]
            print(f"{n:<30} {m.kind:<10} {m.package}")
        return 0
    import torch

    cuda = torch.cuda.is_available()
    size = getattr(args, "size", None) or ("full" if cuda else "small")
    start_dirs = bench_timing._fresh_cache_dirs()
    try:
        return _run(args, names, size, start_dirs)
    finally:
        bench_timing._remove_temp_dirs()


def _run(args: argparse.Namespace, names: list[str], size: str, start_dirs: dict[str, str]) -> int:
    st = bench_report._setup(args)
    if st is None:
        return 2
    mode = bench_report._mode(args)
    bench_report._print_header(st, args.repeat, mode)
    print(
        f"models suite, size {size}, {len(names)} row(s); checks: Dynamo's RMSE rule "
        f"against an fp64 copy (outputs; loss, logits and every parameter gradient for "
        f"training)" + ("; CUDA launches profiled per backend" if st.cuda else "")
    )
    prewarm_s = bench_timing._prewarm(st.dev, st.sdk_backend)
    probe = cuda_launches if st.cuda else None
    table_ = rows()
    out: list[Row] = []

    def write_json(final: bool) -> None:
        _, summary = table(out)
        method = bench_report._method(st, args.repeat, prewarm_s, start_dirs)
        method.update(
            {
                "suite": "models",
                "mode": mode or "default",
                "size": size,
                "check": "Dynamo's RMSE rule vs an fp64 copy of the model "
                "(sdk.tools.bench.dynamo_rmse_rule)",
                "launches": "one warm step per backend under torch.profiler "
                "(CUDA activities), after timing; CUDA only",
            }
        )
        bench_report._write_json(
            args.json,
            {
                "machine": st.info,
                "method": method,
                "geomean_sdk_over_inductor": summary["geomean"]["sdk_over_inductor"],
                "geomean_sdk_over_eager": summary["geomean"]["sdk_over_eager"],
                "geomean_sdk_over_best": summary["geomean"]["sdk_over_best"],
                "geomean_n": summary["geomean"]["n"],
                "targets": summary["targets"],
                "rows": [_row_json(r, *table_[r.name], size, st.cuda) for r in out],
                "complete": final,
            },
            quiet=not final,
        )

    for name in names:
        model, dtype = table_[name]
        out.append(
            bench_timing._run_workload(
                name,
                lambda d, m=model, dt=dtype: m.build(d, dt, size),
                st.dev,
                st.clock,
                st.sdk_backend,
                probe,
                mode=mode,
            )
        )
        if args.json:  # after every row: a run cut short still leaves the rows it measured
            write_json(final=False)

    text, _ = table(out)
    bench_report._print_end(st, out, text)
    if args.profile:
        print()
        print(profile_text(out, st.cuda))
    if args.json:
        write_json(final=True)
    return bench_report._exit_code(out)
