"""GPU: per-kernel profile of training steps (HF GPT-2, DistilBERT, Mistral, T5), eager / Inductor / sdk.

    python benchmarks/profile_training.py gpt2,distilbert,mistral,t5 bf16

Models the suite (``python -m sdk bench --suite models``) does not have (T5, Mistral), at the
sizes of the issue-8 profiles. Prints per backend: ms per step (median of 5 x 5 steps), then
one step through the model suite's probe (launches and device time per kernel class, the
most expensive kernels). Inference rows: ``python -m sdk bench --suite models --profile``.
"""

from __future__ import annotations

import sys
import time

import torch
import transformers as T
from transformers.utils import logging as hf_logging

import sdk
from sdk.tools.bench_models import cuda_launches


def build(name):
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = T.GPT2Config(
            n_layer=4, n_embd=768, n_head=12, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0
        )
        return T.GPT2LMHeadModel(cfg), torch.randint(0, cfg.vocab_size, (8, 512))
    if name == "distilbert":
        cfg = T.DistilBertConfig(dropout=0, attention_dropout=0)
        return T.DistilBertForMaskedLM(cfg), torch.randint(0, cfg.vocab_size, (16, 256))
    if name == "mistral":
        cfg = T.MistralConfig(
            hidden_size=768,
            intermediate_size=2048,
            num_hidden_layers=4,
            num_attention_heads=12,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=1024,
        )
        return T.MistralForCausalLM(cfg), torch.randint(0, cfg.vocab_size, (4, 512))
    if name == "t5":
        cfg = T.T5Config(
            d_model=512,
            d_ff=2048,
            num_layers=4,
            num_heads=8,
            dropout_rate=0,
            vocab_size=32128,
            decoder_start_token_id=0,
            pad_token_id=0,
        )
        return T.T5ForConditionalGeneration(cfg), torch.randint(0, 32128, (8, 256))
    raise SystemExit(f"unknown model {name}")


def profile_backend(model, ids, backend: str) -> None:
    sdk.reset()
    f = (
        model
        if backend == "eager"
        else torch.compile(
            model, backend="inductor" if backend == "inductor" else sdk.backend("cuda_triton")
        )
    )

    def step() -> None:
        model.zero_grad(set_to_none=True)
        f(input_ids=ids, labels=ids).loss.backward()

    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    cold = time.perf_counter() - t0
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / 5 * 1e3)
    prof = cuda_launches(step)  # the model suite's probe: launches, device ms per class
    if "error" in prof:
        print(f"-- {backend}: {sorted(times)[2]:.3f} ms/step, cold {cold:.1f}s; {prof['error']}")
        return
    classes = ", ".join(
        f"{c} {v['launches']}/{v['ms']:.3f}" for c, v in prof["by_class"].items() if v["launches"]
    )
    print(
        f"-- {backend}: {sorted(times)[2]:.3f} ms/step, device {prof['device_ms']:.3f} ms, "
        f"cold {cold:.1f}s, {prof['launches']} launches; per class launches/ms: {classes}"
    )
    if backend != "eager":
        for k in prof["top_kernels"]:
            print(f"   {k['ms']:7.3f} ms  {k['name'][:100]}")


def main() -> None:
    hf_logging.set_verbosity_error()
    dtype = torch.float32 if len(sys.argv) > 2 and sys.argv[2] == "fp32" else torch.bfloat16
    for name in sys.argv[1].split(","):
        model, ids = build(name)
        model = model.cuda().to(dtype).train()
        ids = ids.cuda()
        print(f"==== {name} {dtype}")
        for backend in ("eager", "inductor", "sdk"):
            profile_backend(model, ids, backend)


if __name__ == "__main__":
    main()
