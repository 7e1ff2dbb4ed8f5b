"""OpInfo first-sample sweep: sdk:<plugin> and Inductor side by side, against eager.

For every op of torch's OpInfo database (``op_db``) and each dtype (fp32, bf16) the
op supports on the device, the first sample input is run through eager, the SDK
backend and Inductor: forward, and forward+backward where the op supports autograd
(gradients of every floating input for a random upstream gradient). Results are
compared with eager in the same dtype at Inductor's tolerances (fp32 1.3e-5/1e-5,
bf16 1.6e-2/1e-2); for ``empty*`` ops (uninitialized memory) only shapes and dtypes.

Each (op, dtype) case lands in one of: ``pass``, ``mismatch`` (wrong values),
``error`` (an exception), ``crash`` (the process died, or the CUDA context was
poisoned: an illegal memory access or a device-side assert), ``skip`` (eager
itself failed, or no sample). Cases run in worker processes, a chunk each; a
worker that crashes is replaced and the rest of its chunk goes on in a new one.

    python tests/gpu/opinfo_sweep.py --workers 12 --budget 480 --json out.json

Prints one table: counts per backend and mode, and the cases where the SDK fails
and Inductor passes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

DTYPES = ("float32", "bfloat16")
TOL = {"float32": {"rtol": 1.3e-5, "atol": 1e-5}, "bfloat16": {"rtol": 1.6e-2, "atol": 1e-2}}
POISON = ("illegal memory access", "device-side assert", "CUDA error", "unspecified launch")


def all_cases(device: str) -> list[tuple[int, str]]:
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    out = []
    for i, op in enumerate(op_db):
        dts = op.supported_dtypes(device)
        for dt in DTYPES:
            if getattr(torch, dt) in dts:
                out.append((i, dt))
    return out


def _tensors(x):
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    return []


def _run(op, sample, backend, grad, seed):
    """Outputs (and input gradients) of the op on the sample through ``backend``."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]

    def fn(*ts):
        vals = list(flat)
        for i, t in zip(where, ts):
            vals[i] = t
        inp, args, kwargs = tree_unflatten(vals, spec)
        return op(inp, *args, **kwargs)

    ins = [flat[i].detach().clone().requires_grad_(grad and flat[i].requires_grad) for i in where]
    f = fn if backend == "eager" else torch.compile(fn, backend=backend, dynamic=False)
    out = f(*ins)
    outs = _tensors(out)
    if not grad:
        return [t.detach() for t in outs]
    diff = [t for t in outs if t.requires_grad]
    leaves = [t for t in ins if t.requires_grad]
    if not diff or not leaves:
        return None
    gen = torch.Generator(device=diff[0].device).manual_seed(seed)
    gouts = [torch.randn(t.shape, dtype=t.dtype, device=t.device, generator=gen) for t in diff]
    gs = torch.autograd.grad(diff, leaves, gouts, allow_unused=True)
    return [t.detach() for t in outs] + [g for g in gs if g is not None]


def _uninitialized(name: str) -> bool:
    """Ops whose values are uninitialized memory: only shape and dtype are compared."""
    return name.startswith(("empty", "new_empty"))


def _compare(a, e, dt, name=""):
    import torch

    if a is None or e is None:
        return "skip" if e is None else "mismatch"
    if len(a) != len(e):
        return "mismatch"
    for x, y in zip(a, e):
        if x.shape != y.shape or x.dtype != y.dtype:
            return "mismatch"
        if _uninitialized(name):
            continue
        try:
            tol = TOL[dt] if x.is_floating_point() else {"rtol": 0, "atol": 0}
            torch.testing.assert_close(x, y, equal_nan=True, **tol)
        except AssertionError:
            return "mismatch"
    return "pass"


def worker(cases: list[tuple[int, str]], backends: list[str], device: str) -> None:
    """Run cases; one JSON line per (case, backend, mode) on stdout."""
    import torch
    import torch._dynamo
    from torch.testing._internal.common_methods_invocations import op_db

    import sdk  # noqa: F401 - registers the sdk:<name> backends

    for idx, dt in cases:
        op = op_db[idx]
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        for grad in (False, True):
            if grad and not (op.supports_autograd and dt in DTYPES):
                continue
            mode = "fwbw" if grad else "fw"
            seed = zlib.crc32(f"{name} {dt} {mode}".encode())
            torch.manual_seed(seed)
            try:
                sample = next(
                    iter(op.sample_inputs(device, getattr(torch, dt), requires_grad=grad))
                )
                torch.manual_seed(seed)
                ref = _run(op, sample, "eager", grad, seed)
            except Exception as exc:  # noqa: BLE001 - eager cannot run it: nothing to compare
                for b in backends:
                    print(
                        json.dumps([name, dt, mode, b, "skip", f"eager: {exc}"[:200]]), flush=True
                    )
                continue
            for b in backends:
                torch._dynamo.reset()
                try:
                    torch.manual_seed(seed)
                    got = _run(op, sample, b, grad, seed)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    status, why = _compare(got, ref, dt, name), ""
                except Exception as exc:  # noqa: BLE001
                    msg = f"{type(exc).__name__}: {exc}"
                    status, why = ("crash" if any(p in msg for p in POISON) else "error"), msg
                print(json.dumps([name, dt, mode, b, status, why[:300]]), flush=True)
                if status == "crash":
                    sys.exit(3)  # the context is poisoned: the parent starts a new worker


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", default="cuda_triton")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=24)
    ap.add_argument("--budget", type=float, default=480.0, help="seconds; no new chunk after")
    ap.add_argument("--only", default="", help="comma-separated op names")
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    backends = [f"sdk:{a.plugin}", "inductor"]
    if a.worker:
        worker([tuple(c) for c in json.loads(a.worker)], backends, a.device)
        return
    t0 = time.time()
    cases = all_cases(a.device)
    if a.only:
        from torch.testing._internal.common_methods_invocations import op_db

        keep = set(a.only.split(","))
        cases = [c for c in cases if op_db[c[0]].name in keep]
    chunks = [cases[i : i + a.chunk] for i in range(0, len(cases), a.chunk)]
    rows: list[list] = []
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def run_chunk(chunk):
        out = []
        todo = list(chunk)
        while todo:
            if time.time() - t0 > a.budget:
                return out, todo
            p = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--plugin",
                    a.plugin,
                    "--device",
                    a.device,
                    "--worker",
                    json.dumps(todo),
                ],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            got = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("[")]
            out += got
            done = {(r[0], r[1]) for r in got}
            names = {c: _names()[c[0]] for c in todo}
            finished = [c for c in todo if (names[c], c[1]) in done]
            if p.returncode == 0:
                return out, []
            # the case being run when the worker died: the first one not finished, or the
            # last one seen if it crashed mid-case
            last = got[-1] if got else None
            rest = [c for c in todo if c not in finished]
            if last is not None and last[4] == "crash":
                rest = rest[1:] if rest and names[rest[0]] == last[0] else rest
                rest = [c for c in rest if not (names[c] == last[0] and c[1] == last[1])]
            elif rest:
                dead = rest[0]
                out.append(
                    [
                        names[dead],
                        dead[1],
                        "?",
                        backends[0],
                        "crash",
                        f"worker died (exit {p.returncode}): {p.stderr[-300:]}",
                    ]
                )
                rest = rest[1:]
            todo = rest
        return out, []

    left = 0
    with ThreadPoolExecutor(a.workers) as pool:
        for out, rest in pool.map(run_chunk, chunks):
            rows += out
            left += len(rest)
    report(rows, backends, len(cases), left, time.time() - t0, a.json)


_NAMES: dict[int, str] = {}


def _names() -> dict[int, str]:
    if not _NAMES:
        from torch.testing._internal.common_methods_invocations import op_db

        for i, op in enumerate(op_db):
            _NAMES[i] = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    return _NAMES


def report(rows, backends, n_cases, left, seconds, path):
    from collections import Counter

    counts = Counter((r[3], r[2], r[4]) for r in rows)
    statuses = ["pass", "mismatch", "error", "crash", "skip"]
    print(
        f"\nOpInfo first-sample sweep: {n_cases} (op, dtype) cases, {left} not reached "
        f"within the budget, {seconds:.0f}s"
    )
    print(f"{'backend':<18}{'mode':<6}" + "".join(f"{s:>10}" for s in statuses))
    for b in backends:
        for m in ("fw", "fwbw"):
            print(f"{b:<18}{m:<6}" + "".join(f"{counts[(b, m, s)]:>10}" for s in statuses))
    crashes = [r for r in rows if r[4] == "crash"]
    for r in crashes:
        print("CRASH", r)
    by = {(r[0], r[1], r[2], r[3]): r for r in rows}
    worse = [
        (k, r)
        for k, r in by.items()
        if k[3] == backends[0]
        and r[4] != "pass"
        and by.get((k[0], k[1], k[2], "inductor"), [0] * 5)[4] == "pass"
    ]
    print(f"\n{len(worse)} cases where {backends[0]} fails and inductor passes:")
    for k, r in sorted(worse)[:80]:
        print(f"  {k[0]} {k[1]} {k[2]}: {r[4]} {r[5][:150]}")
    if path:
        with open(path, "w") as f:
            json.dump({"rows": rows, "cases": n_cases, "not_reached": left, "seconds": seconds}, f)


if __name__ == "__main__":
    main()
