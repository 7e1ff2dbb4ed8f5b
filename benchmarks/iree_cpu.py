"""IREE through the sdk against eager, Inductor and cpu_cpp: fp32 CPU training steps.

One process, three models (an MLP, a small convnet, HF GPT-2 with 2 layers), each step the
loss and every parameter's gradient (forward and backward; no optimizer). Backends:

* eager, and Inductor (``torch.compile``'s default backend);
* ``sdk:cpu_cpp``, ``sdk:iree_cpu``, and ``sdk:iree_cpu`` chained with cpu_cpp
  (``options={"chain": ["cpu_cpp"]}``: what IREE refuses goes to cpu_cpp, not ATen);
* ``turbine_cpu``, IREE's own torch.compile backend from iree-turbine, when it imports
  (``pip install --no-deps iree-turbine decorator``); otherwise its row says why.

Each compiled step is first checked against eager by Dynamo's accuracy rule (every result's
RMSE against an fp64 eager run at most twice eager fp32's, plus 1e-4, as in
tests/iree/test_backend.py) on fresh random inputs; a row that fails is reported and not
timed. Compile: the wall time of the first step after ``torch._dynamo.reset()``, with empty
``SDK_CACHE_DIR`` and ``TORCHINDUCTOR_CACHE_DIR`` (a trivial function is compiled with every
backend first, so imports are charged to no model). Steady state: after ``--warmup`` steps,
the median of ``--steps`` steps, timed in ``--rounds`` interleaved rounds (each backend a
share of the steps per round), so that a slow phase of a shared host hits every backend.

    python benchmarks/iree_cpu.py --json iree_cpu.json
    python benchmarks/iree_cpu.py --models mlp --steps 2 --warmup 1   # a quick check
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

MODELS = ("mlp", "convnet", "gpt2")
BACKENDS = ("eager", "inductor", "sdk:cpu_cpp", "sdk:iree_cpu", "iree_cpu+cpu_cpp", "turbine_cpu")


def _mlp(torch: Any) -> tuple[Any, Callable[[], tuple]]:
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512),
        torch.nn.GELU(),
        torch.nn.LayerNorm(512),
        torch.nn.Linear(512, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 10),
    )
    return model, lambda: (torch.randn(64, 256), torch.randint(0, 10, (64,)))


def _convnet(torch: Any) -> tuple[Any, Callable[[], tuple]]:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    return model, lambda: (torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,)))


def _gpt2(torch: Any) -> tuple[Any, Callable[[], tuple]]:
    import transformers

    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=128,
        n_head=4,
        vocab_size=1000,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
    )
    ids = lambda: torch.randint(0, 1000, (2, 32))  # noqa: E731
    return transformers.GPT2LMHeadModel(config), lambda: (ids(),)


def _build(torch: Any, name: str) -> tuple[Any, Callable[[], tuple], Callable]:
    """(model, fresh random inputs, loss of (model, *inputs)) of one model, seeded."""
    torch.manual_seed(0)
    model, inputs = {"mlp": _mlp, "convnet": _convnet, "gpt2": _gpt2}[name](torch)
    if name == "gpt2":
        return model, inputs, lambda m, ids: m(ids, labels=ids).loss
    return model, inputs, lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y)


def _backend(name: str) -> Any:
    """What ``torch.compile(backend=...)`` gets for a row; None: eager (no torch.compile)."""
    import sdk

    return {
        "eager": None,
        "inductor": "inductor",
        "sdk:cpu_cpp": "sdk:cpu_cpp",
        "sdk:iree_cpu": "sdk:iree_cpu",
        "iree_cpu+cpu_cpp": sdk.backend("iree_cpu", chain=["cpu_cpp"]),
        "turbine_cpu": "turbine_cpu",
    }[name]


def _unavailable(name: str) -> str | None:
    """Why a backend cannot run here (a missing wheel), None if it can."""
    import importlib.util

    module, fix = {
        "sdk:iree_cpu": ("iree_sdk_plugin", "pip install ./examples/iree_vendor"),
        "iree_cpu+cpu_cpp": ("iree_sdk_plugin", "pip install ./examples/iree_vendor"),
        "turbine_cpu": ("iree.turbine", "pip install --no-deps iree-turbine decorator"),
    }.get(name, (None, ""))
    try:
        if module is None or importlib.util.find_spec(module) is not None:
            return None
    except ModuleNotFoundError:
        pass
    return f"{module} is not installed ({fix})"


def _step(torch: Any, model: Any, loss_of: Callable, run: Callable) -> Callable:
    """One training step through ``run`` (eager or compiled): [loss, *gradients]."""
    params = list(model.parameters())

    def step(*inputs: Any) -> list:
        loss = run(model, *inputs)
        return [loss.detach(), *torch.autograd.grad(loss, params)]

    return step


def _rmse(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).pow(2).mean().sqrt())


def _check(torch: Any, name: str, step: Callable, inputs: tuple) -> str | None:
    """Dynamo's rule on every result of ``step`` against fp32 and fp64 eager; None: passes."""
    model, _, loss_of = _build(torch, name)
    model64 = copy.deepcopy(model).double()
    inputs64 = [x.double() if x.is_floating_point() else x for x in inputs]
    eager = _step(torch, model, loss_of, loss_of)(*inputs)
    want = _step(torch, model64, loss_of, loss_of)(*inputs64)
    for i, (g, e, r) in enumerate(zip(step(*inputs), eager, want, strict=True)):
        if not torch.isfinite(g).all():
            return f"result {i}: non-finite"
        if _rmse(g, r) > 2 * _rmse(e, r) + 1e-4:
            return f"result {i}: RMSE {_rmse(g, r):.3g} vs eager's {_rmse(e, r):.3g}"
    return None


def _root_cause(exc: BaseException) -> str:
    """The innermost cause's type and first line: Dynamo wraps a backend's error in
    BackendCompilerFailed, whose own first line names only the backend."""
    while (inner := getattr(exc, "inner_exception", None) or exc.__cause__) is not None:
        exc = inner
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {first}"


def _prepare(torch: Any, name: str, backend: str) -> dict:
    """Compile (timed), check, and return the row with its step function, or why not."""
    if why := _unavailable(backend):
        return {"status": "unavailable", "why": why}
    torch._dynamo.reset()
    model, inputs, loss_of = _build(torch, name)
    target = _backend(backend)
    run = loss_of if target is None else torch.compile(loss_of, backend=target)
    step = _step(torch, model, loss_of, run)
    try:
        t0 = time.perf_counter()
        step(*inputs())
        compile_s = time.perf_counter() - t0
        wrong = _check(torch, name, step, inputs())
    except Exception as e:
        return {"status": "failed", "why": _root_cause(e)}
    if wrong:
        return {"status": "mismatch", "why": wrong}
    return {"status": "ok", "compile_s": compile_s, "step": step, "inputs": inputs(), "ms": []}


def _time(row: dict, calls: int) -> None:
    for _ in range(calls):
        t0 = time.perf_counter()
        row["step"](*row["inputs"])
        row["ms"].append((time.perf_counter() - t0) * 1e3)


def _warm_up_imports(torch: Any, backends: list[str]) -> None:
    """Compile a trivial function with every backend, so no model pays for imports."""
    for backend in backends:
        target = _backend(backend)
        if target is not None and not _unavailable(backend):
            torch._dynamo.reset()
            # a backend that fails here fails on the models too, and their rows say why
            with contextlib.suppress(Exception):
                torch.compile(lambda x: (x * 2).sum(), backend=target)(torch.randn(4))


def bench_model(torch: Any, name: str, backends: list[str], a: argparse.Namespace) -> dict:
    rows = {b: _prepare(torch, name, b) for b in backends}
    ready = [r for r in rows.values() if r["status"] == "ok"]
    for r in ready:
        _time(r, a.warmup)
        r["ms"].clear()
    share = max(1, a.steps // a.rounds)
    for _ in range(a.rounds):
        for r in ready:
            _time(r, share)
    for r in ready:
        r["step_ms"] = statistics.median(r.pop("ms"))
        r["calls"] = share * a.rounds
        del r["step"], r["inputs"]
    base = {b: rows[b].get("step_ms") for b in ("inductor", "eager") if b in rows}
    for r in ready:
        for b, ms in base.items():
            r[f"vs_{b}"] = r["step_ms"] / ms if ms else None
    return rows


def _cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo`` on Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _print(results: dict) -> None:
    print(
        f"{'model':<9}{'backend':<18}{'compile s':>10}{'step ms':>10}{'/inductor':>10}{'/eager':>8}"
    )
    for model, rows in results.items():
        for backend, r in rows.items():
            head = f"{model:<9}{backend:<18}"
            if r["status"] != "ok":
                print(f"{head}{r['status'].upper()}: {r['why']}")
                continue
            ratios = [r.get(k) for k in ("vs_inductor", "vs_eager")]
            ind, eag = (f"{x:.2f}" if x is not None else "-" for x in ratios)
            print(f"{head}{r['compile_s']:10.2f}{r['step_ms']:10.2f}{ind:>10}{eag:>8}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {MODELS}")
    ap.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated: {BACKENDS}")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per backend")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    models, backends = a.models.split(","), a.backends.split(",")
    for given, known in ((models, MODELS), (backends, BACKENDS)):
        if unknown := sorted(set(given) - set(known)):
            ap.error(f"unknown {unknown}; choose from {known}")
    with tempfile.TemporaryDirectory() as sdk_cache, tempfile.TemporaryDirectory() as ind:
        os.environ["SDK_CACHE_DIR"] = sdk_cache  # before the sdk reads its configuration
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = ind
        import torch

        _warm_up_imports(torch, backends)
        results = {m: bench_model(torch, m, backends, a) for m in models}
    _print(results)
    if a.json:
        with open(a.json, "w") as f:
            meta = {
                "torch": torch.__version__,
                "cpu": _cpu_name(),
                "cores": os.cpu_count(),
            }
            json.dump({**meta, "args": vars(a), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
