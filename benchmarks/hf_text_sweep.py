"""Text models of HF transformers that the sdk was not tuned for: one training step each
(masked or causal language modelling, labels = the input ids), compared with eager and with
a float64 copy by Dynamo's accuracy rule, as ``benchmarks/hf_vision_sweep.py`` does for
vision models.

    python benchmarks/hf_text_sweep.py [--backend sdk:cpu_cpp] [--dtype fp32,bf16]
        [--models bert,llama,...] [--batch 4] [--lengths 32] [--dynamic] [--options JSON]

Small configs of each family (random init, a vocabulary of 512, two layers of width 64,
dropout 0). ``--lengths 24,40 --dynamic``: one ``dynamic=True`` compile runs a step at each
length, and the last is checked. The models suite has GPT-2, DistilBERT, Qwen2, T5, Whisper
and Mixtral; these are others.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

VOCAB = 512


def _cases(tf: Any) -> dict[str, Callable[[], Any]]:
    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return {
        "bert": lambda: tf.BertForMaskedLM(tf.BertConfig(**common, **no_dropout)),
        "roberta": lambda: tf.RobertaForMaskedLM(
            tf.RobertaConfig(**{**common, "max_position_embeddings": 70}, **no_dropout)
        ),
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**common, num_key_value_heads=2)),
        "mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(**common, num_key_value_heads=2)),
        "gemma": lambda: tf.GemmaForCausalLM(
            tf.GemmaConfig(**common, num_key_value_heads=2, head_dim=16)
        ),
        "phi": lambda: tf.PhiForCausalLM(
            tf.PhiConfig(**common, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)
        ),
        "gpt_neox": lambda: tf.GPTNeoXForCausalLM(
            tf.GPTNeoXConfig(**common, hidden_dropout=0.0, attention_dropout=0.0)
        ),
        "opt": lambda: tf.OPTForCausalLM(
            tf.OPTConfig(
                vocab_size=VOCAB,
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                ffn_dim=128,
                word_embed_proj_dim=64,
                max_position_embeddings=64,
                dropout=0.0,
                attention_dropout=0.0,
            )
        ),
        "bart": lambda: tf.BartForConditionalGeneration(
            tf.BartConfig(
                vocab_size=VOCAB,
                d_model=64,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=128,
                decoder_ffn_dim=128,
                max_position_embeddings=64,
                dropout=0.0,
                attention_dropout=0.0,
                activation_dropout=0.0,
            )
        ),
    }


def _step(model: Any, ids: torch.Tensor) -> list[Any]:
    out = model(input_ids=ids, labels=ids)
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
    torch._dynamo.reset()
    if args.backend == "inductor":
        backend: Any = "inductor"
    else:
        backend = sdk.backend(args.backend.removeprefix("sdk:"), **args.options)
    compiled = torch.compile(model, backend=backend, dynamic=args.dynamic or None)
    start = time.perf_counter()
    for length in args.lengths:
        ids = torch.randint(3, VOCAB, (args.batch, length), device=dev)  # 0-2: special ids
        for m in (model, ref, f64):
            m.zero_grad(set_to_none=True)
        got, want, ref64 = _step(compiled, ids), _step(ref, ids), _step(f64, ids)
    seconds = time.perf_counter() - start
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
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lengths", type=lambda s: [int(n) for n in s.split(",")], default=[32])
    ap.add_argument("--dynamic", action="store_true", help="compile with dynamic=True")
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
    mode = " dynamic" if args.dynamic else ""
    for name in names:
        for dt in args.dtype.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                label = f"{name:10s} {dt} seed {seed} {args.backend}{mode}"
                try:
                    n, bad, seconds = _one(cases[name], args, dtypes[dt], seed)
                except Exception as exc:  # noqa: BLE001 - reported, and the sweep goes on
                    failed += 1
                    print(f"{label}: RAISED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                    traceback.print_exc(limit=4)
                    continue
                failed += bool(bad)
                verdict = "ok" if not bad else f"MISMATCH at tensors {bad[:8]}"
                print(f"{label}: {n} tensors {verdict}, {seconds:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
