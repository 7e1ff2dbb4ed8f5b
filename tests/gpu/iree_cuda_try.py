"""Does IREE's CUDA target run here? A try on the lent GPU (issue 26): an ATen MLP training
graph compiled with iree-compile for CUDA and run with the IREE runtime's cuda driver, against
eager. Prints one line per step; not a test (IREE's CUDA path is not part of the plugin)."""

from __future__ import annotations

import time
import traceback

import torch
from torch.fx.experimental.proxy_tensor import make_fx


def main() -> None:
    from iree import runtime as rt
    from iree.compiler import compile_str, ir
    from iree.compiler.extras.fx_importer import FxImporter

    def f(x, w1, w2):
        loss = (torch.relu(x @ w1) @ w2).square().mean()
        return (loss, *torch.autograd.grad(loss, (w1, w2)))

    args = [
        torch.randn(64, 128),
        torch.randn(128, 256, requires_grad=True),
        torch.randn(256, 8, requires_grad=True),
    ]
    gm = make_fx(f)(*args)
    imp = FxImporter(context=ir.Context())
    imp.import_stateless_graph(gm.graph, func_name="main")
    cap = torch.cuda.get_device_capability()
    # iree-base-compiler 3.13 rejects sm_90 ("missing GPU target"); PTX of an older target
    # runs on newer GPUs (the driver compiles it), so the older ones are tried after it
    vmfb = None
    for target in (f"sm_{cap[0]}{cap[1]}", "sm_89", "sm_80"):
        flags = ["--iree-hal-target-device=cuda", f"--iree-cuda-target={target}"]
        t = time.time()
        try:
            vmfb = compile_str(str(imp.module), input_type="torch", extra_args=flags)
            break
        except Exception as exc:  # noqa: BLE001
            errors = [line for line in str(exc).splitlines() if "error:" in line]
            print(f"iree cuda: compile for {target} FAILED:", errors[:1])
    if vmfb is None:
        return
    print(f"iree cuda: compiled in {time.time() - t:.1f}s ({len(vmfb)} bytes), flags {flags}")
    try:
        print("iree runtime drivers:", rt.query_available_drivers())
        cfg = rt.Config("cuda")
        ctx = rt.SystemContext(
            vm_modules=[rt.VmModule.copy_buffer(cfg.vm_instance, vmfb)], config=cfg
        )
        main_fn = ctx.modules.module["main"]
        outs = main_fn(*[a.detach().numpy() for a in args])
        outs = [torch.from_numpy(o.to_host()) for o in outs]
        want = f(*args)
        err = max(float((o - w).abs().max()) for o, w in zip(outs, want))
        print(f"iree cuda: ran on {cfg.device}, max abs error vs eager {err:.3g}")
    except Exception:  # noqa: BLE001
        print("iree cuda: run FAILED:", traceback.format_exc().splitlines()[-3:])


if __name__ == "__main__":
    main()
