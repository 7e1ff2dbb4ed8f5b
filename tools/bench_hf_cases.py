"""The models suite's HF transformers rows: GPT-2, DistilBERT, Qwen2, T5, BART, Mixtral,
Whisper and HF's ConvNeXt, each built from a config (random weights, no download) at the
suite's two sizes, with every dropout probability 0. The cases' shared machinery (a training
step's case, the fp64 reference, the tolerances) is :mod:`sdk.tools.bench_model_cases`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sdk.tools.bench_model_cases import (
    _TOL_TIMM,
    _classifier_train_case,
    _need,
    _train_case,
)
from sdk.tools.bench_timing import Case


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


def _causal_lm(
    dev: Any,
    dtype: str,
    table: dict,
    size: str,
    classes: tuple[Any, Any],
    extra: dict[str, Any],
    describe: Callable[[Any, str], str],
    reference: Callable[[Any], None] | None = None,
) -> Case:
    """A decoder's training step on random tokens, ``labels=input_ids``: ``table[size]`` is
    (config, (batch, tokens)); ``extra`` more config (dropout off); ``describe(config,
    attention)`` the description's head."""
    kw, (b, s) = table[size]
    model, attn = _hf_model(*classes, dict(kw, use_cache=False, **extra))
    c = model.config
    ids = _ids(c.vocab_size, b, s)
    return _train_case(
        dev,
        dtype,
        model,
        {"input_ids": ids, "labels": ids},
        f"{describe(c, attn)}, {b}x{s} tokens, labels=input_ids",
        reference=reference,
    )


def _gpt2(dev: Any, dtype: str, size: str) -> Case:
    tf = _transformers()
    return _causal_lm(
        dev,
        dtype,
        _GPT2,
        size,
        (tf.GPT2LMHeadModel, tf.GPT2Config),
        dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0),
        lambda c, attn: (
            f"HF GPT2LMHeadModel n_layer={c.n_layer} n_embd={c.n_embd} n_head={c.n_head} "
            f"vocab={c.vocab_size}, {attn} attention, dropout 0"
        ),
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
    return _causal_lm(
        dev,
        dtype,
        _QWEN2,
        size,
        (tf.Qwen2ForCausalLM, tf.Qwen2Config),
        dict(
            attention_dropout=0.0,
            use_sliding_window=False,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        ),
        lambda c, attn: (
            f"HF Qwen2ForCausalLM layers={c.num_hidden_layers} hidden={c.hidden_size} "
            f"heads={c.num_attention_heads} kv_heads={c.num_key_value_heads} "
            f"vocab={c.vocab_size}, {attn} attention"
        ),
    )


_T5 = {
    # (config, batch, source tokens, target tokens)
    "small": (
        {
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 128,
            "num_layers": 2,
            "num_decoder_layers": 2,
            "num_heads": 4,
            "vocab_size": 1000,
            "relative_attention_num_buckets": 8,
            "relative_attention_max_distance": 32,
        },
        2,
        32,
        16,
    ),
    "full": ({}, 8, 512, 128),  # T5Config's defaults are t5-small's sizes
}


def _t5(dev: Any, dtype: str, size: str) -> Case:
    """An encoder-decoder training step: relative position bias, RMS norm with fp32
    upcasts, cross attention."""
    tf = _transformers()
    kw, b, s, t = _T5[size]
    model, attn = _hf_model(
        tf.T5ForConditionalGeneration,
        tf.T5Config,
        dict(
            kw,
            dropout_rate=0.0,
            use_cache=False,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
        ),
    )
    c = model.config
    return _seq2seq_case(
        dev,
        dtype,
        model,
        (b, s, t),
        f"HF T5ForConditionalGeneration d_model={c.d_model} layers={c.num_layers}+"
        f"{c.num_decoder_layers} heads={c.num_heads} vocab={c.vocab_size}, {attn} attention",
    )


def _seq2seq_case(dev: Any, dtype: str, model: Any, tokens: tuple, desc: str) -> Case:
    """An encoder-decoder's training step over random source and target ids (``tokens``:
    batch, source and target lengths)."""
    b, s, t = tokens
    vocab = model.config.vocab_size
    return _train_case(
        dev,
        dtype,
        model,
        {"input_ids": _ids(vocab, b, s), "labels": _ids(vocab, b, t)},
        f"{desc}, {b}x{s} source and {b}x{t} target tokens",
    )


_BART = {
    # (config, batch, source tokens, target tokens)
    "small": (
        {
            "d_model": 64,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128,
            "vocab_size": 1000,
            "max_position_embeddings": 64,
        },
        2,
        32,
        16,
    ),
    # bart-base's sizes (BartConfig's defaults are bart-large's)
    "full": (
        {
            "d_model": 768,
            "encoder_layers": 6,
            "decoder_layers": 6,
            "encoder_attention_heads": 12,
            "decoder_attention_heads": 12,
            "encoder_ffn_dim": 3072,
            "decoder_ffn_dim": 3072,
        },
        8,
        256,
        128,
    ),
}


def _bart(dev: Any, dtype: str, size: str) -> Case:
    """An encoder-decoder training step the suite was not tuned on: learned positions,
    post-norm LayerNorms, GELU, cross attention, a tied LM head with a final logits bias."""
    tf = _transformers()
    kw, b, s, t = _BART[size]
    model, attn = _hf_model(
        tf.BartForConditionalGeneration,
        tf.BartConfig,
        dict(
            kw,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            use_cache=False,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=2,
        ),
    )
    c = model.config
    return _seq2seq_case(
        dev,
        dtype,
        model,
        (b, s, t),
        f"HF BartForConditionalGeneration d_model={c.d_model} layers={c.encoder_layers}+"
        f"{c.decoder_layers} heads={c.encoder_attention_heads} vocab={c.vocab_size}, {attn} "
        "attention",
    )


_MIXTRAL = {
    "small": (
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "vocab_size": 1000,
            "max_position_embeddings": 64,
        },
        (2, 32),
    ),
    "full": (
        {
            "hidden_size": 1024,
            "intermediate_size": 2048,
            "num_hidden_layers": 4,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 32000,
        },
        (4, 512),
    ),
}


def _mixtral(dev: Any, dtype: str, size: str) -> Case:
    """A mixture-of-experts decoder training step: top-2 routing over the experts (a
    data-dependent gather and scatter per expert), GQA attention, RMS norm."""
    tf = _transformers()

    def loop_over_experts(m64: Any) -> None:
        # the default grouped matrix product (torch._grouped_mm) has no fp64 kernel: the
        # fp64 reference computes the same experts one by one
        m64.config._experts_implementation = "eager"

    return _causal_lm(
        dev,
        dtype,
        _MIXTRAL,
        size,
        (tf.MixtralForCausalLM, tf.MixtralConfig),
        dict(
            attention_dropout=0.0,
            router_jitter_noise=0.0,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        ),
        lambda c, attn: (
            f"HF MixtralForCausalLM layers={c.num_hidden_layers} hidden={c.hidden_size} "
            f"experts={c.num_local_experts} top-{c.num_experts_per_tok} "
            f"heads={c.num_attention_heads} kv_heads={c.num_key_value_heads} "
            f"vocab={c.vocab_size}, {attn} attention, "
            f"{c._experts_implementation or 'default'} experts"
        ),
        reference=loop_over_experts,
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


#: ConvNeXt as HF transformers builds it: a third zoo's, not tuned for. Its blocks permute to
#: NHWC for ``nn.LayerNorm`` and the two Linears and back; a LayerNorm module of its own
#: serves the stem and each downsampling (channels first). Full: ``ConvNextConfig()``'s
#: defaults are convnext-tiny's sizes.
_HF_CONVNEXT = {
    "small": {"hidden_sizes": [32, 64, 128, 256], "depths": [1, 1, 2, 1]},
    "full": {},
}


def _hf_convnext_train(dev: Any, dtype: str, size: str) -> Case:
    """HF ``ConvNextForImageClassification`` over 1000 labels, as a torchvision or timm
    classifier's training step (see :func:`_classifier_train_case`): its logits out of the
    model's output object."""
    import torch

    tf = _transformers()
    c = tf.ConvNextConfig(**_HF_CONVNEXT[size], num_labels=1000, drop_path_rate=0.0)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = tf.ConvNextForImageClassification(c)

        def forward(self, pixel_values: Any) -> Any:
            return self.model(pixel_values=pixel_values).logits

    return _classifier_train_case(
        dev,
        dtype,
        size,
        Logits,
        f"HF ConvNextForImageClassification hidden_sizes={c.hidden_sizes} depths={c.depths}, "
        "drop_path_rate=0.0",
        _TOL_TIMM,
    )
