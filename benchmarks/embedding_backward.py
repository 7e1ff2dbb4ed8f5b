"""The embedding backward's accumulation, three ways, on the GPU: what determinism costs.

``x[idx] += values`` over dim 0 is the gradient of an embedding (token, position and T5's
relative-position tables). Three ATen kernels compute it:

* ``index_add`` (atomicAdd: fast, the order of the additions changes from run to run);
* ``index_put(accumulate=True)`` (sort, then each row summed in order: deterministic);
* ``embedding_dense_backward`` (eager's own: sort, then partial sums of at most a few rows
  each, summed in order: deterministic).

Each is timed with ``triton.testing.do_bench`` (median) on the shapes of the models suite,
and run twice on the same inputs to see whether its bits repeat.

    python benchmarks/embedding_backward.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import torch

#: name -> (rows, row shape, index shape)
SHAPES = {
    "gpt2 wte 50257x768, 8x512 tokens": (50257, (768,), (8, 512)),
    "gpt2 wpe 1024x768, 8x512 positions": (1024, (768,), (8, 512)),
    "t5 relative bias 32x12, 512x512": (32, (12,), (512, 512)),
    "bert wte 30522x768, 16x256 tokens": (30522, (768,), (16, 256)),
    "small 512x64, 2x48 tokens": (512, (64,), (2, 48)),
}


def _accumulate(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.index_put(x, (i,), v, accumulate=True)


_COMPILED = {}


def _compiled(backend: str):
    if backend not in _COMPILED:
        import sdk  # noqa: F401

        _COMPILED[backend] = torch.compile(_accumulate, backend=backend, dynamic=False)
    return _COMPILED[backend]


def variants(n: int, idx: torch.Tensor, vals: torch.Tensor) -> dict:
    flat = idx.reshape(-1)
    v2 = vals.reshape(flat.numel(), -1)
    zeros = torch.zeros((n, *vals.shape[idx.ndim :]), device=vals.device, dtype=vals.dtype)
    return {
        "sdk": lambda: _compiled("sdk:cuda_triton")(zeros, idx, vals),
        "inductor": lambda: _compiled("inductor")(zeros, idx, vals),
        "index_add": lambda: torch.index_add(
            zeros, 0, flat, vals.reshape(flat.numel(), *zeros.shape[1:])
        ),
        "index_put": lambda: torch.index_put(zeros, (idx,), vals, accumulate=True),
        "embedding_dense_backward": lambda: torch.ops.aten.embedding_dense_backward(
            v2, flat, n, -1, False
        ),
    }


def main() -> None:
    import triton.testing

    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for name, (n, row, ishape) in SHAPES.items():
            g = torch.Generator(device="cuda").manual_seed(0)
            idx = torch.randint(0, min(n, 4096), ishape, device="cuda", generator=g)
            vals = torch.randn(*ishape, *row, device="cuda", generator=g).to(dtype)
            ref = torch.index_put(
                torch.zeros((n, *row), device="cuda", dtype=torch.float64),
                (idx,),
                vals.double(),
                accumulate=True,
            )
            res = {"shape": name, "dtype": str(dtype).split(".")[-1]}
            torch.compiler.reset()  # (one compile per row, under Dynamo's recompile limit)
            _COMPILED.clear()
            for vname, fn in variants(n, idx, vals).items():
                a, b = fn(), fn()
                res[vname + "_ms"] = triton.testing.do_bench(fn, return_mode="median")
                res[vname + "_repeats"] = bool(torch.equal(a, b))
                err = (a.double().reshape(ref.shape) - ref).norm() / ref.norm()
                res[vname + "_err"] = float(err)
            rows.append(res)
    names = ("sdk", "inductor", "index_add", "index_put", "embedding_dense_backward")
    print(f"{'shape':38} {'dtype':8} " + " ".join(f"{v:>26}" for v in names))
    for r in rows:
        cells = []
        for v in ("sdk", "inductor", "index_add", "index_put", "embedding_dense_backward"):
            cells.append(
                f"{r[v + '_ms']:8.4f} ms {'same' if r[v + '_repeats'] else 'DIFF'} {r[v + '_err']:.1e}"
            )
        print(f"{r['shape']:38} {r['dtype']:8} " + " ".join(f"{c:>26}" for c in cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
