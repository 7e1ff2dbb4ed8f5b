"""``python -m sdk bench --suite models``: real models through ``sdk:<plugin>``, Inductor and eager.

Rows (``--list`` prints them; each in bf16 and fp32, named ``<model>_<dtype>``):

* inference, ``eval()`` under ``no_grad``: torchvision ``resnet18``, ``resnet34``,
  ``efficientnet_b0``, ``mobilenet_v3_large``; timm ``deit_tiny`` and ``swin_tiny``;
* training steps (``<model>_train``: forward + loss + backward, no optimizer):
  HF ``GPT2LMHeadModel``, ``DistilBertForMaskedLM``, ``Qwen2ForCausalLM`` (GQA decoder),
  ``WhisperForConditionalGeneration``; every dropout probability is 0 in the config, so
  a step is deterministic; ``attn_implementation="sdpa"`` where HF accepts it.

Weights are random, built from configs (no downloads). A row whose package is missing
or does not import is skipped with the reason.

Method, on top of the kernels suite's (``sdk/tools/bench.py``: cold compile, steady-state
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
import copy
import fnmatch
import functools
import importlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdk.tools import bench_check, bench_report, bench_timing
from sdk.tools.bench_timing import Case, Row, Skip

SIZES = ("small", "full")
DTYPES = ("bf16", "fp32")
TARGET = 1.1

#: Dynamo's benchmark tolerances for these families (torchbench, timm_models, huggingface).
_TOL_TORCHVISION = 1e-4
_TOL_TIMM = 1e-3
_TOL_HF_TRAIN = 1e-2


# ---------------------------------------------------------------------------
# Packages
# ---------------------------------------------------------------------------


#: How to install each package without letting pip replace torch: an unpinned
#: ``pip install torchvision`` resolves the newest torchvision and, with it, a newer torch;
#: PyPI's Linux torchvision wheels are CUDA builds, which do not load on a CPU-only torch.
_INSTALL_HINT = {
    "torchvision": "pip install --no-deps torchvision==<the release made for this torch>, "
    "from https://download.pytorch.org/whl/cpu for a CPU-only torch",
    "timm": "pip install --no-deps timm (it needs torchvision, huggingface_hub, safetensors, "
    "pyyaml)",
    "transformers": "pip install -e '.[test]'",
}


@functools.cache
def _import_error(module: str) -> str | None:
    """Why ``module`` cannot be imported here, or ``None`` when it can. A wheel built for
    another torch (a CUDA torchvision on a CPU torch) fails with a RuntimeError or an
    OSError rather than an ImportError, so any exception counts."""
    hint = _INSTALL_HINT.get(module, f"pip install {module}")
    try:
        importlib.import_module(module)
    except ImportError as e:
        return f"{module} cannot be imported ({e}); {hint}"
    except Exception as e:  # noqa: BLE001 - a broken install is a reason to skip, not to crash
        import torch

        first = (str(e).strip().splitlines() or [""])[0][:200]
        return (
            f"{module} is installed but does not import with torch {torch.__version__} "
            f"({type(e).__name__}: {first}), a build for another torch?; {hint}"
        )
    return None


def _need(module: str) -> Any:
    reason = _import_error(module)
    if reason is not None:
        raise Skip(reason)
    return importlib.import_module(module)


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


def _dtype(name: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp32": torch.float32}[name]


def _inference_case(
    dev: Any,
    dtype: str,
    make_model: Callable[[], Any],
    make_input: Callable[[], Any],
    desc: str,
    tol: float,
) -> Case:
    import torch

    torch.manual_seed(0)
    model = make_model().eval()
    x = make_input()
    holder = [copy.deepcopy(model).double().to(dev)]  # dropped once the reference is taken
    model = model.to(device=dev, dtype=_dtype(dtype))
    x = x.to(dev)
    x64, x = x.double(), x.to(_dtype(dtype))

    def step(f: Callable[..., Any]) -> Any:
        with torch.no_grad():
            return f(x)

    def fp64_outputs() -> list[tuple[str, Any]]:
        model64 = holder.pop()
        with torch.no_grad():
            return [("out", model64(x64))]

    return Case(
        model,
        step,
        lambda out: [("out", out)],
        f"{desc}, {dtype}, eval, no_grad",
        fp64_outputs=fp64_outputs,
        rule_tol=tol,
    )


def _train_case(dev: Any, dtype: str, model: Any, batch: dict[str, Any], desc: str) -> Case:
    """A training step of an HF model: ``model(**batch)``, ``.loss.backward()``."""
    model.train()
    holder = [copy.deepcopy(model).double().to(dev)]
    model = model.to(device=dev, dtype=_dtype(dtype))
    batch = {k: v.to(dev) for k, v in batch.items()}
    batch64 = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
    batch = {k: v.to(_dtype(dtype)) if v.is_floating_point() else v for k, v in batch.items()}

    def run(m: Any, f: Callable[..., Any], inputs: dict[str, Any]) -> Any:
        m.zero_grad(set_to_none=True)
        out = f(**inputs)
        out.loss.backward()
        return out

    def collect(m: Any, out: Any) -> list[tuple[str, Any]]:
        return [("loss", out.loss), ("logits", out.logits)] + [
            (f"grad {n}", p.grad) for n, p in m.named_parameters()
        ]

    def fp64_outputs() -> list[tuple[str, Any]]:
        model64 = holder.pop()
        return bench_check._named(collect(model64, run(model64, model64, batch64)))

    return Case(
        model,
        lambda f: run(model, f, batch),
        lambda out: collect(model, out),
        f"{desc}, {dtype}, train, loss + backward",
        fp64_outputs=fp64_outputs,
        rule_tol=_TOL_HF_TRAIN,
    )


# --- torchvision -----------------------------------------------------------

_CONVNET_SIZES = {"small": (2, 64), "full": (32, 224)}


def _torchvision(arch: str) -> Callable[[Any, str, str], Case]:
    def build(dev: Any, dtype: str, size: str) -> Case:
        import torch

        tv = _need("torchvision")
        bs, hw = _CONVNET_SIZES[size]
        return _inference_case(
            dev,
            dtype,
            lambda: getattr(tv.models, arch)(weights=None),
            lambda: torch.randn(bs, 3, hw, hw),
            f"torchvision {arch}(weights=None), bs {bs}, {hw}x{hw}",
            _TOL_TORCHVISION,
        )

    return build


# --- timm --------------------------------------------------------------------

_TIMM = {
    "deit_tiny": (
        "deit_tiny_patch16_224",
        {
            "small": {"img_size": 64, "depth": 2},
            "full": {},
        },
    ),
    "swin_tiny": (
        "swin_tiny_patch4_window7_224",
        {
            "small": {
                "img_size": 64,
                "window_size": 4,
                "embed_dim": 32,
                "depths": (2, 2, 2, 2),
                "num_heads": (1, 2, 4, 8),
            },
            "full": {},
        },
    ),
}


def _timm(key: str) -> Callable[[Any, str, str], Case]:
    def build(dev: Any, dtype: str, size: str) -> Case:
        import torch

        timm = _need("timm")
        arch, by_size = _TIMM[key]
        kw = by_size[size]
        bs, hw = _CONVNET_SIZES[size]
        extra = "".join(f", {k}={v}" for k, v in kw.items() if k != "img_size")
        return _inference_case(
            dev,
            dtype,
            lambda: timm.create_model(arch, pretrained=False, **kw),
            lambda: torch.randn(bs, 3, hw, hw),
            f"timm {arch}(pretrained=False{extra}), bs {bs}, {hw}x{hw}",
            _TOL_TIMM,
        )

    return build


# --- HF transformers -------------------------------------------------------


def _transformers() -> Any:
    tf = _need("transformers")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    return tf


def _hf_model(model_cls: Any, config_cls: Any, kw: dict[str, Any]) -> tuple[Any, str]:
    """``model_cls(config_cls(**kw))`` in fp32 under seed 0, with SDPA attention when the
    class accepts it, else its default; also the attention implementation in use."""
    import torch

    try:
        torch.manual_seed(0)
        model = model_cls(config_cls(**kw, attn_implementation="sdpa"))
    except (ValueError, ImportError):
        torch.manual_seed(0)
        model = model_cls(config_cls(**kw))
    return model, str(getattr(model.config, "_attn_implementation", None) or "default")


def _ids(vocab: int, *shape: int) -> Any:
    import torch

    return torch.randint(3, vocab, shape)  # ids 0-2 are the special tokens of the small configs


_GPT2 = {
    "small": (
        {
            "n_layer": 2,
            "n_embd": 128,
            "n_head": 4,
            "vocab_size": 1000,
            "n_positions": 64,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
        (2, 32),
    ),
    "full": ({"n_layer": 6, "n_embd": 768, "n_head": 12}, (8, 512)),
}


def _gpt2(dev: Any, dtype: str, size: str) -> Case:
    tf = _transformers()
    kw, (b, s) = _GPT2[size]
    model, attn = _hf_model(
        tf.GPT2LMHeadModel,
        tf.GPT2Config,
        dict(
            kw,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            summary_first_dropout=0.0,
            use_cache=False,
        ),
    )
    ids = _ids(model.config.vocab_size, b, s)
    c = model.config
    return _train_case(
        dev,
        dtype,
        model,
        {"input_ids": ids, "labels": ids},
        f"HF GPT2LMHeadModel n_layer={c.n_layer} n_embd={c.n_embd} "
        f"n_head={c.n_head} vocab={c.vocab_size}, {attn} attention, dropout 0, "
        f"{b}x{s} tokens, labels=input_ids",
    )


_DISTILBERT = {
    "small": (
        {
            "n_layers": 2,
            "dim": 128,
            "hidden_dim": 512,
            "n_heads": 4,
            "vocab_size": 1000,
            "max_position_embeddings": 64,
            "pad_token_id": 0,
        },
        (2, 32),
    ),
    "full": ({}, (16, 256)),  # DistilBertConfig's defaults are distilbert-base's sizes
}


def _distilbert(dev: Any, dtype: str, size: str) -> Case:
    import torch

    tf = _transformers()
    kw, (b, s) = _DISTILBERT[size]
    model, attn = _hf_model(
        tf.DistilBertForMaskedLM,
        tf.DistilBertConfig,
        dict(kw, dropout=0.0, attention_dropout=0.0, qa_dropout=0.0, seq_classif_dropout=0.0),
    )
    c = model.config
    ids = _ids(c.vocab_size, b, s)
    masked = torch.rand(b, s) < 0.15
    masked[:, 0] = True  # at least one label per sequence
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    return _train_case(
        dev,
        dtype,
        model,
        {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels},
        f"HF DistilBertForMaskedLM n_layers={c.n_layers} dim={c.dim} "
        f"n_heads={c.n_heads} vocab={c.vocab_size}, {attn} attention, "
        f"dropout 0, {b}x{s} tokens, 15% masked labels",
    )


_QWEN2 = {
    "small": (
        {
            "num_hidden_layers": 2,
            "hidden_size": 128,
            "intermediate_size": 352,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 1000,
            "max_position_embeddings": 64,
        },
        (2, 32),
    ),
    "full": (
        {
            "num_hidden_layers": 4,
            "hidden_size": 1024,
            "intermediate_size": 2816,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
            "max_position_embeddings": 2048,
        },
        (4, 512),
    ),
}


def _qwen2(dev: Any, dtype: str, size: str) -> Case:
    tf = _transformers()
    kw, (b, s) = _QWEN2[size]
    model, attn = _hf_model(
        tf.Qwen2ForCausalLM,
        tf.Qwen2Config,
        dict(
            kw,
            attention_dropout=0.0,
            use_cache=False,
            use_sliding_window=False,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        ),
    )
    c = model.config
    ids = _ids(c.vocab_size, b, s)
    return _train_case(
        dev,
        dtype,
        model,
        {"input_ids": ids, "labels": ids},
        f"HF Qwen2ForCausalLM layers={c.num_hidden_layers} "
        f"hidden={c.hidden_size} heads={c.num_attention_heads} "
        f"kv_heads={c.num_key_value_heads} vocab={c.vocab_size}, {attn} "
        f"attention, {b}x{s} tokens, labels=input_ids",
    )


_WHISPER = {
    # (config, batch, label tokens); the mel frames are 2 x max_source_positions
    "small": (
        {
            "d_model": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 256,
            "decoder_ffn_dim": 256,
            "vocab_size": 1000,
            "max_source_positions": 32,
            "max_target_positions": 64,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "decoder_start_token_id": 1,
            "suppress_tokens": None,
            "begin_suppress_tokens": None,
        },
        2,
        16,
    ),
    "full": ({}, 8, 128),  # WhisperConfig's defaults are whisper-tiny's sizes
}


def _whisper(dev: Any, dtype: str, size: str) -> Case:
    import torch

    tf = _transformers()
    kw, b, t = _WHISPER[size]
    model, attn = _hf_model(
        tf.WhisperForConditionalGeneration,
        tf.WhisperConfig,
        dict(
            kw,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            encoder_layerdrop=0.0,
            decoder_layerdrop=0.0,
            use_cache=False,
        ),
    )
    c = model.config
    frames = 2 * c.max_source_positions
    feats = torch.randn(b, c.num_mel_bins, frames)
    labels = _ids(c.vocab_size, b, t)
    return _train_case(
        dev,
        dtype,
        model,
        {"input_features": feats, "labels": labels},
        f"HF WhisperForConditionalGeneration d_model={c.d_model} "
        f"layers={c.encoder_layers}+{c.decoder_layers} "
        f"heads={c.encoder_attention_heads} vocab={c.vocab_size}, {attn} "
        f"attention, dropout 0, bs {b}, {c.num_mel_bins}x{frames} mel, "
        f"{t} label tokens",
    )


# ---------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    name: str  # the row name without the dtype suffix
    kind: str  # "inference" or "train"
    package: str
    build: Callable[[Any, str, str], Case]  # (device, "bf16"/"fp32", "small"/"full")


MODELS: tuple[Model, ...] = (
    Model("resnet18", "inference", "torchvision", _torchvision("resnet18")),
    Model("resnet34", "inference", "torchvision", _torchvision("resnet34")),
    Model("efficientnet_b0", "inference", "torchvision", _torchvision("efficientnet_b0")),
    Model("mobilenet_v3_large", "inference", "torchvision", _torchvision("mobilenet_v3_large")),
    Model("deit_tiny", "inference", "timm", _timm("deit_tiny")),
    Model("swin_tiny", "inference", "timm", _timm("swin_tiny")),
    Model("gpt2_train", "train", "transformers", _gpt2),
    Model("distilbert_train", "train", "transformers", _distilbert),
    Model("qwen2_train", "train", "transformers", _qwen2),
    Model("whisper_train", "train", "transformers", _whisper),
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
# Launch counting (CUDA)
# ---------------------------------------------------------------------------

KERNEL_CLASSES = ("triton", "gemm", "conv", "attention", "copy", "other")

#: Kernels the sdk's plugins generate are named ``k_<ops>`` (core/scheduler.kernel_name).
_GENERATED = re.compile(r"k_\w+")
_ATTENTION = re.compile(r"flash|fmha|attention|efficient|sdpa")
_CONV = re.compile(r"conv(?!ert)|cudnn|implicit|winograd|fprop|dgrad|wgrad|im2col|col2im")
_GEMM = re.compile(r"gemm|gemv|cublas|cutlass|sm90|sm100|nvjet|splitkreduce")


def classify_kernel(name: str) -> str:
    """A device activity's class from its name: ``copy`` (memcpy, memset), ``triton``
    (Inductor's ``triton_*`` and the sdk's generated ``k_*`` kernels), ``attention``,
    ``conv``, ``gemm``, else ``other``; checked in that order, so a cuDNN implicit-GEMM
    convolution is ``conv`` and a CUTLASS flash-attention kernel ``attention``."""
    n = name.lower()
    if "memcpy" in n or "memset" in n:
        return "copy"
    if n.startswith("triton") or _GENERATED.fullmatch(name):
        return "triton"
    if _ATTENTION.search(n):
        return "attention"
    if _CONV.search(n):
        return "conv"
    if _GEMM.search(n):
        return "gemm"
    return "other"


def _is_device_event(e: Any) -> bool:
    return str(getattr(e, "device_type", "")).rsplit(".", 1)[-1] == "CUDA"


def summarize_device_events(events: Any, top: int = 5) -> dict[str, Any]:
    """Launches and device time per kernel class of a profiler's events (CUDA ones only),
    and the ``top`` kernels by device time."""
    by_class = {c: {"launches": 0, "ms": 0.0} for c in KERNEL_CLASSES}
    per_kernel: dict[str, float] = {}
    total = 0
    for e in events:
        if not _is_device_event(e):
            continue
        us = float(e.time_range.elapsed_us())
        cls = by_class[classify_kernel(e.name)]
        cls["launches"] += 1
        cls["ms"] += us / 1e3
        per_kernel[e.name] = per_kernel.get(e.name, 0.0) + us / 1e3
        total += 1
    most = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:top]
    return {
        "launches": total,
        "device_ms": sum(c["ms"] for c in by_class.values()),
        "by_class": by_class,
        "top_kernels": [{"name": k[:160], "ms": ms} for k, ms in most],
    }


def cuda_launches(step: Callable[[], Any], top: int = 5) -> dict[str, Any]:
    """One call of ``step`` under the CUDA profiler: :func:`summarize_device_events`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    out = summarize_device_events(prof.events(), top)
    if not out["launches"]:
        return {"error": "the profiler recorded no CUDA activity (is CUPTI available?)"}
    return out


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def _best(r: Row) -> float | None:
    """The faster of eager and Inductor (Inductor only when its check passed)."""
    times = [
        t
        for t in (r.eager.ms, r.inductor.ms if r.inductor.check == "ok" else None)
        if t is not None
    ]
    return min(times) if times else None


def _ratios(r: Row) -> tuple[float | None, float | None, float | None]:
    """sdk/inductor, sdk/eager, sdk/min(eager, inductor); ``None`` where not measured."""
    if r.skipped or r.sdk.check != "ok":
        return None, None, None
    ind = r.inductor.ms if r.inductor.check == "ok" else None
    return (
        bench_report._ratio(r.sdk.ms, ind),
        bench_report._ratio(r.sdk.ms, r.eager.ms),
        bench_report._ratio(r.sdk.ms, _best(r)),
    )


def _target_cell(si: float | None, sb: float | None) -> str:
    if si is None or sb is None:
        return "-"
    if sb <= TARGET:
        return "met"
    return "ind only" if si <= TARGET else "missed"


def _f2(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(rows_: list[Row]) -> tuple[str, dict[str, Any]]:
    head = [
        "row",
        "eager ms",
        "inductor ms",
        "sdk ms",
        "sdk/ind",
        "sdk/eager",
        "sdk/best",
        "target",
        "ind cold s",
        "sdk cold s",
        "sdk check",
        "ind check",
        "sdk graphs",
    ]
    body: list[list[str]] = []
    si_all: list[float] = []
    se_all: list[float] = []
    sb_all: list[float] = []
    met_ind = met_best = n_targets = 0
    for r in rows_:
        if r.skipped:
            body.append([r.name, f"skipped: {r.skipped}"])
            continue
        si, se, sb = _ratios(r)
        if si is not None:
            si_all.append(si)
            if se is not None:
                se_all.append(se)
            if sb is not None:
                sb_all.append(sb)
                n_targets += 1
                met_ind += si <= TARGET
                met_best += sb <= TARGET
        sdk_ms = r.sdk.ms if r.sdk.check == "ok" else None
        body.append(
            [
                r.name,
                bench_timing._fmt_ms(r.eager.ms),
                bench_timing._fmt_ms(r.inductor.ms),
                "MISMATCH" if r.sdk.check == "MISMATCH" else bench_timing._fmt_ms(sdk_ms),
                _f2(si),
                _f2(se),
                _f2(sb),
                _target_cell(si, sb),
                bench_timing._fmt_s(r.inductor.cold_s),
                bench_timing._fmt_s(r.sdk.cold_s),
                bench_report._check_cell(r.sdk),
                bench_report._check_cell(r.inductor),
                bench_timing._graphs_cell(r.sdk_graphs),
            ]
        )
    geo = {
        "sdk_over_inductor": bench_report._geomean(si_all),
        "sdk_over_eager": bench_report._geomean(se_all),
        "sdk_over_best": bench_report._geomean(sb_all),
        "n": len(si_all),
    }
    body.append(
        [
            "geomean",
            "",
            "",
            "",
            _f2(geo["sdk_over_inductor"]),
            _f2(geo["sdk_over_eager"]),
            _f2(geo["sdk_over_best"]),
            "",
            "",
            "",
            f"n={len(si_all)}",
            "",
            "",
        ]
    )
    lines = bench_report._render(head, body)
    lines.append(
        "sdk/best = sdk / min(eager, inductor); target: both sdk/ind and sdk/best "
        f"<= {TARGET} ('met'; 'ind only': sdk/ind only); ratios < 1 mean sdk is faster"
    )
    lines.append(
        "sdk graphs: g graphs, k generated kernels, x library calls (mm, conv, ...), "
        "fb ops run through the ATen fallback, % of ATen calls in generated kernels"
    )
    targets = {
        "limit": TARGET,
        "rows": n_targets,
        "sdk_over_inductor_met": met_ind,
        "sdk_over_best_met": met_best,
    }
    lines.append(
        f"targets: sdk/ind <= {TARGET} on {met_ind}/{n_targets} rows, "
        f"sdk/min(eager, ind) <= {TARGET} on {met_best}/{n_targets} rows"
    )
    return "\n".join(lines), {"geomean": geo, "targets": targets}


def _profile_line(label: str, p: dict[str, Any] | None) -> str:
    if not p:
        return f"    {label:<8}  -"
    if "error" in p:
        return f"    {label:<8}  profile failed: {p['error']}"
    parts = [
        f"{c} {v['launches']}/{v['ms']:.3f}" for c, v in p["by_class"].items() if v["launches"]
    ]
    return f"    {label:<8}  {p['launches']:>5} launches  {p['device_ms']:9.3f} ms  " + "  ".join(
        parts
    )


def profile_text(rows_: list[Row], cuda: bool) -> str:
    if not cuda:
        return (
            "launches per step: counted on CUDA only (torch.profiler's CUDA activities); "
            "nothing to show on this device"
        )
    lines = [
        (
            "launches per step (one warm step under torch.profiler, CUDA activities): "
            "launches, device ms, and per class launches/ms"
        )
    ]
    for r in rows_:
        if r.skipped:
            continue
        lines.append(f"  {r.name}")
        for label, res in (("eager", r.eager), ("inductor", r.inductor), ("sdk", r.sdk)):
            lines.append(_profile_line(label, res.profile))
    return "\n".join(lines)


def _row_json(r: Row, model: Model, dtype: str, size: str, cuda: bool) -> dict[str, Any]:
    out = bench_report._row_json(r, None)
    si, se, sb = _ratios(r)
    out.update(
        {
            "model": model.name,
            "kind": model.kind,
            "package": model.package,
            "dtype": dtype,
            "size": size,
            "sdk_over_inductor": si,
            "sdk_over_eager": se,
            "sdk_over_best": sb,
            "target": _target_cell(si, sb),
        }
    )
    if not cuda:
        out["profile"] = {"skipped": "launches are counted on CUDA only"}
    elif r.skipped:
        out["profile"] = {"skipped": "row skipped"}
    else:
        out["profile"] = {
            label: res.profile or {"error": "not profiled (not timed)"}
            for label, res in (("eager", r.eager), ("inductor", r.inductor), ("sdk", r.sdk))
        }
    return out


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
            print(f"{n:<28} {m.kind:<10} {m.package}")
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
    bench_report._print_header(st, args.repeat)
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
