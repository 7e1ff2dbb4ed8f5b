"""GPU: per-kernel profile of convnet / ViT inference, eager / Inductor / sdk.

    python benchmarks/profile_inference.py resnet18,mobilenet_v3_large,efficientnet_b0,deit_tiny 32
"""
import collections
import sys
import time

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile

import sdk
from sdk.core.adapters.torch_private import reset_dynamo


def cls(n):
    l = n.lower()
    if "triton" in l or l.startswith("k_"): return "triton"
    if any(s in l for s in ("gemm", "cublas", "cutlass", "sm90", "nvjet", "xmma_gemm")): return "gemm"
    if any(s in l for s in ("conv", "cudnn", "implicit", "winograd", "xmma", "dgrad", "wgrad", "fprop")): return "conv"
    if "memcpy" in l or "memset" in l: return "copy"
    return "other"

def models():
    import timm
    out = {}
    for name in sys.argv[1].split(","):
        if name == "deit_tiny":
            m = timm.create_model("deit_tiny_patch16_224", pretrained=False)
        else:
            m = getattr(torchvision.models, name)(weights=None)
        out[name] = m
    return out

dev = "cuda"
bs = int(sys.argv[2]) if len(sys.argv) > 2 else 32
for name, m in models().items():
    m = m.to(dev).eval().to(torch.bfloat16)
    x = torch.randn(bs, 3, 224, 224, device=dev, dtype=torch.bfloat16)
    print(f"==== {name} bs{bs} bf16")
    for be in ("eager", "inductor", "sdk"):
        reset_dynamo()
        f = m if be == "eager" else torch.compile(m, backend="inductor" if be == "inductor" else sdk.backend("cuda_triton"))
        with torch.no_grad():
            t0 = time.perf_counter(); f(x); torch.cuda.synchronize(); cold = time.perf_counter() - t0
            for _ in range(5): f(x)
            torch.cuda.synchronize()
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(30)]
            for a, b in ev:
                a.record(); f(x); b.record()
            torch.cuda.synchronize()
            ms = sorted(a.elapsed_time(b) for a, b in ev)[15]
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(3): f(x)
                torch.cuda.synchronize()
        per = collections.defaultdict(lambda: [0, 0.0])
        for e in p.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                k = per[e.name]; k[0] += 1; k[1] += e.device_time / 1e3
        n = sum(v[0] for v in per.values()) / 3
        by = collections.defaultdict(float)
        for k, v in per.items(): by[cls(k)] += v[1] / 3
        print(f"-- {be}: {ms:.3f} ms/step, cold {cold:.1f}s, {n:.0f} launches, classes: " + ", ".join(f"{c} {t:.3f}" for c, t in sorted(by.items(), key=lambda t: -t[1])))
        for k, v in sorted(per.items(), key=lambda kv: -kv[1][1])[:12]:
            print(f"   {v[1]/3:7.3f} ms {v[0]//3:4d}x  {k[:110]}")
