"""The models suite of two source trees of the sdk, eager beside each, Inductor left out.

Issue 48 asks that the models suite be "not slower than today", row by row. "Today" is a
tree, not a number: run the suite of the old tree and of the new one in processes that
meet the same conditions, and compare each row's sdk step (and its cold compile, and its
device time per step) with the other tree's, eager timed beside it in each process as the
yardstick of that process's conditions.

    run     [--lock PATH] [--with-inductor] [bench options]
                              ``python -m sdk bench --suite models`` of whatever ``sdk`` this
                              process imports, without Inductor (half the compile time of a
                              row; every other step of the suite, its check included, is the
                              suite's own); with --lock, timed alone (see run())
    compare OLD.json NEW.json the rows both hold: sdk ms, sdk/eager, cold s, device ms

Install each tree into a directory of its own and run one process per tree and half of the
rows, pinned with taskset, both trees at once, each row timed alone on the GPU (the lock):

    pip install --no-deps --no-build-isolation --target /tmp/old OLD_TREE
    pip install --no-deps --no-build-isolation --target /tmp/new .
    PYTHONPATH=/tmp/old taskset -c 0,1 python benchmarks/tree_vs_tree.py run --lock /tmp/l \
        --only ROWS --dtype all --profile --json old.json &
    PYTHONPATH=/tmp/new taskset -c 2,3 python benchmarks/tree_vs_tree.py run --lock /tmp/l \
        --only ROWS --dtype all --profile --json new.json &
    python benchmarks/tree_vs_tree.py compare old*.json -- new*.json
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def run(argv: list[str]) -> int:
    """``--lock PATH``: time each row (its timed rounds and its profiled step) holding an
    exclusive lock on PATH, so that processes side by side compile at the same time but
    never time at the same time: each row's steps have the GPU to themselves.
    ``--with-inductor``: keep Inductor in the rows."""
    import fcntl

    import sdk
    from sdk.cli import main
    from sdk.tools import bench_timing

    lock = None
    if "--lock" in argv:
        at = argv.index("--lock")
        lock, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    with_inductor = "--with-inductor" in argv
    argv = [a for a in argv if a != "--with-inductor"]
    prepare, time_interleaved = bench_timing._prepare, bench_timing._time_interleaved

    def without_inductor(name, case, clock, compile_fn, ref, fp64, sink=None, **kw):  # noqa: ANN001, ANN202
        # Inductor is the one compiled backend the suite prepares without a report sink.
        if compile_fn is not None and sink is None and not with_inductor:
            return bench_timing.Result(), None, None
        return prepare(name, case, clock, compile_fn, ref, fp64, sink, **kw)

    def alone(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        if lock is None:
            return time_interleaved(*args, **kw)
        with open(lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                return time_interleaved(*args, **kw)
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    bench_timing._prepare = without_inductor
    bench_timing._time_interleaved = alone
    print(f"sdk from {sdk.__file__}", flush=True)
    return main(["bench", "--suite", "models", *argv])


def _rows(paths: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for p in paths:
        with open(p) as f:
            for r in json.load(f)["rows"]:
                if r.get("sdk", {}).get("median_ms") is not None:
                    out[r["name"]] = r
    return out


def _device_ms(r: dict[str, Any], backend: str) -> float | None:
    prof = r.get("profile") or {}
    rec = prof.get(backend) if isinstance(prof, dict) else None
    return rec.get("device_ms") if isinstance(rec, dict) else None


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def compare(old_paths: list[str], new_paths: list[str]) -> int:
    old, new = _rows(old_paths), _rows(new_paths)
    names = [n for n in old if n in new]
    head = (
        "row",
        "sdk ms old",
        "new",
        "new/old",
        "sdk/eager old",
        "new",
        "new/old",
        "cold s old",
        "new",
        "new/old",
        "device ms old",
        "new",
        "new/old",
    )
    print(" | ".join(head))
    cols: dict[str, list[float]] = {"ms": [], "rel": [], "cold": [], "dev": []}
    for n in names:
        o, w = old[n], new[n]
        ms = w["sdk"]["median_ms"] / o["sdk"]["median_ms"]
        ro = o["sdk"]["median_ms"] / o["eager"]["median_ms"]
        rw = w["sdk"]["median_ms"] / w["eager"]["median_ms"]
        co, cw = o["sdk"].get("cold_s"), w["sdk"].get("cold_s")
        do, dw = _device_ms(o, "sdk"), _device_ms(w, "sdk")
        cols["ms"].append(ms)
        cols["rel"].append(rw / ro)
        cells = [
            n,
            f"{o['sdk']['median_ms']:.2f}",
            f"{w['sdk']['median_ms']:.2f}",
            f"{ms:.2f}",
            f"{ro:.2f}",
            f"{rw:.2f}",
            f"{rw / ro:.2f}",
        ]
        if co and cw:
            cols["cold"].append(cw / co)
            cells += [f"{co:.1f}", f"{cw:.1f}", f"{cw / co:.2f}"]
        else:
            cells += ["-", "-", "-"]
        if do and dw:
            cols["dev"].append(dw / do)
            cells += [f"{do:.3f}", f"{dw:.3f}", f"{dw / do:.2f}"]
        else:
            cells += ["-", "-", "-"]
        print(" | ".join(cells))
    print(
        f"geomean new/old over {len(names)} rows: sdk ms {_geomean(cols['ms']):.3f}, "
        f"sdk/eager {_geomean(cols['rel']):.3f}, cold {_geomean(cols['cold']):.3f} "
        f"({len(cols['cold'])} rows), device {_geomean(cols['dev']):.3f} ({len(cols['dev'])} rows)"
    )
    only = sorted(set(old) ^ set(new))
    if only:
        print(f"rows in one tree's results only: {', '.join(only)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2:]))
    if len(sys.argv) > 3 and sys.argv[1] == "compare" and "--" in sys.argv:
        cut = sys.argv.index("--")
        sys.exit(compare(sys.argv[2:cut], sys.argv[cut + 1 :]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
