"""Which steps of a GPT-2 training step change bits from run to run, on a GPU.

The warm-start benchmark's model (2 layers, 768 wide, GPT-2's vocabulary, 8x512 tokens, bf16):
eager and sdk:cuda_triton each run the step twice from the same state in one process, and the
gradients that differ are listed; then ``sdk.explain`` lists the compiled graphs' library calls
and the steps it knows are not deterministic. ``det`` runs it all under
``torch.use_deterministic_algorithms(True)`` (set ``CUBLAS_WORKSPACE_CONFIG=:4096:8``).

    python benchmarks/repro_gpt2_gpu.py [det]
"""

from __future__ import annotations

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import sdk


def main(deterministic: bool) -> None:
    torch.manual_seed(0)
    if deterministic:
        torch.use_deterministic_algorithms(True)
    cfg = GPT2Config(
        n_layer=2,
        n_embd=768,
        n_head=12,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
    )
    model = GPT2LMHeadModel(cfg).cuda().to(torch.bfloat16).train()
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda")

    def step(f, i):
        loss = f(input_ids=i, labels=i).loss
        loss.backward()
        return loss.detach()

    def grads(f):
        model.zero_grad(set_to_none=True)
        step(f, ids)
        return [p.grad.clone() for p in model.parameters()]

    names = [n for n, _ in model.named_parameters()]
    compiled = torch.compile(model, backend="sdk:cuda_triton")
    for label, f in (("eager", model), ("sdk", compiled)):
        a, b = grads(f), grads(f)
        differ = [
            (names[i], (x.float() - y.float()).abs().max().item())
            for i, (x, y) in enumerate(zip(a, b))
            if not torch.equal(x, y)
        ]
        print(label, "det" if deterministic else "", "differ in-process:", differ[:6])
    torch.compiler.reset()
    report = sdk.explain(lambda i: step(model, i), ids, backend="sdk:cuda_triton")
    print("nondeterministic:", report.nondeterministic)
    print("externs:", sorted({e.op for e in report.externs}))


if __name__ == "__main__":
    main("det" in sys.argv[1:])
