"""The models suite of two source trees of the sdk, eager beside each, Inductor left out.

Issue 48 asks that the models suite be "not slower than today", row by row. "Today" is a
tree, not a number: run the suite of the old tree and of the new one in processes that
meet the same conditions, and compare each row's sdk step (and its cold compile, and its
device time per step) with the other tree's, eager timed beside it in each process as the
yardstick of that process's conditions.

    run     [--lock PATH] [--pair DIR SIDE] [--with-inductor] [bench options]
                              ``python -m sdk bench --suite models`` of whatever ``sdk`` this
                              process imports, without Inductor (half the compile time of a
                              row; every other step of the suite, its check included, is the
                              suite's own); with --lock, timed alone; with --pair, round by
                              round in turn with the other tree's process (see run())
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

Host-bound rows drift with the machine's load (other processes compiling beside them): a row
timed in one process minutes after the other tree's reads that drift as a difference between
the trees. ``--pair DIR old`` and ``--pair DIR new`` (two processes, one per tree, the same
rows in the same order) time each row in turn, one round each: old's round 1, new's round 1,
old's round 2, ... so each pair of rounds meets the same conditions, and ``compare`` prints
each row's new/old per round (``rounds``) beside the medians.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any


def run(argv: list[str]) -> int:
    """``--lock PATH``: time each row (its timed rounds and its profiled step) holding an
    exclusive lock on PATH, so that processes side by side compile at the same time but
    never time at the same time: each row's steps have the GPU to themselves.
    ``--pair DIR SIDE``: see the module's doc (:class:`_Pair`, :class:`_Turns`).
    ``--with-inductor``: keep Inductor in the rows."""
    import sdk
    from sdk.cli import main
    from sdk.tools import bench_timing

    lock = None
    if "--lock" in argv:
        at = argv.index("--lock")
        lock, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    pair = None
    if "--pair" in argv:
        at = argv.index("--pair")
        pair, argv = _Pair(argv[at + 1], argv[at + 2]), argv[:at] + argv[at + 3 :]
    with_inductor = "--with-inductor" in argv
    argv = [a for a in argv if a != "--with-inductor"]
    prepare, time_interleaved = bench_timing._prepare, bench_timing._time_interleaved

    def without_inductor(name, case, clock, compile_fn, ref, fp64, sink=None, **kw):  # noqa: ANN001, ANN202
        # Inductor is the one compiled backend the suite prepares without a report sink.
        if compile_fn is not None and sink is None and not with_inductor:
            return bench_timing.Result(), None, None
        res, out, step = prepare(name, case, clock, compile_fn, ref, fp64, sink, **kw)
        if pair is not None and step is None:
            pair.gone(name)  # this side's row will not be timed: the other goes on alone
        return res, out, step

    def alone(name, case, clock, entries, probe):  # noqa: ANN001, ANN202
        if pair is None:
            with _holding(lock):
                return time_interleaved(name, case, clock, entries, probe)
        pair.meet(name)
        turns = _Turns(clock, pair, name, lock)
        try:
            return time_interleaved(name, case, turns, entries, probe)
        finally:
            turns.close(bench_timing.ROUNDS)

    bench_timing._prepare = without_inductor
    bench_timing._time_interleaved = alone
    print(f"sdk from {sdk.__file__}", flush=True)
    return main(["bench", "--suite", "models", *argv])


@contextlib.contextmanager
def _holding(lock: str | None) -> Iterator[None]:
    """An exclusive lock on the file ``lock`` while the block runs (none if it is None)."""
    if lock is None:
        yield
        return
    import fcntl

    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class _Turns:
    """A bench clock that times a row one round at a time, in turn with the other tree's
    process (:class:`_Pair`), each round holding ``lock``. bench_timing's loop asks for each
    step's samples once per round, so a step asked for again starts the next round; the
    profiled step after the last round runs within it."""

    def __init__(self, clock: Any, pair: _Pair, row: str, lock: str | None) -> None:
        self.clock, self.pair, self.row, self.lock = clock, pair, row, lock
        self.round, self.timed = -1, []
        self.held = contextlib.ExitStack()

    def samples(self, call: Any, share: float = 1.0) -> list[float]:
        if self.round < 0 or any(c is call for c in self.timed):
            self._end()
            self.round, self.timed = self.round + 1, []
            self.pair.wait_turn(self.row, self.round)
            self.held.enter_context(_holding(self.lock))
        self.timed.append(call)
        return self.clock.samples(call, share=share)

    def _end(self) -> None:
        if self.round >= 0:
            self.held.close()
            self.pair.pass_turn(self.row, self.round)

    def close(self, rounds: int) -> None:
        """The row is done: its last round, and any it did not time (a step that failed),
        passed to the other side, so that it does not wait for them."""
        self._end()
        for k in range(self.round + 1, rounds):
            self.pair.pass_turn(self.row, k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.clock, name)


class _Pair:
    """Turns between the two trees' processes of ``--pair DIR SIDE`` (``old`` or ``new``), as
    files in DIR: ``ROW.SIDE.ready`` once SIDE has compiled and checked ROW, ``ROW.SIDE.K``
    once SIDE has timed its round K of ROW. old times round K once new has timed round K-1;
    new, once old has timed round K. A side that waits longer than ``patience`` seconds for
    the other (it failed, or its row errored) goes on alone and says so."""

    def __init__(self, folder: str, side: str, patience: float = 600.0) -> None:
        if side not in ("old", "new"):
            raise SystemExit(f"--pair DIR SIDE: SIDE is old or new, not {side!r}")
        os.makedirs(folder, exist_ok=True)
        self.folder, self.side, self.patience = folder, side, patience
        self.other = "new" if side == "old" else "old"

    def _path(self, row: str, side: str, what: str) -> str:
        return os.path.join(self.folder, f"{row}.{side}.{what}")

    def _wait(self, row: str, what: str) -> None:
        """Until the other side has written ``ROW.OTHER.WHAT`` (or given the row up)."""
        end = time.monotonic() + self.patience
        path, gone = self._path(row, self.other, what), self._path(row, self.other, "gone")
        while not os.path.exists(path):
            if os.path.exists(gone):
                return
            if time.monotonic() > end:
                print(f"pair: no {path} after {self.patience:.0f} s; going on alone", flush=True)
                return
            time.sleep(0.002)

    def gone(self, row: str) -> None:
        """This side will not time ``row`` (its compile or check failed)."""
        open(self._path(row, self.side, "gone"), "w").close()

    def meet(self, row: str) -> None:
        open(self._path(row, self.side, "ready"), "w").close()
        self._wait(row, "ready")

    def wait_turn(self, row: str, k: int) -> None:
        if self.side == "old" and k > 0:
            self._wait(row, str(k - 1))
        elif self.side == "new":
            self._wait(row, str(k))

    def pass_turn(self, row: str, k: int) -> None:
        open(self._path(row, self.side, str(k)), "w").close()


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
        "rounds new/old",
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
        rounds = zip(o["sdk"].get("round_ms") or [], w["sdk"].get("round_ms") or [])
        cells.append(", ".join(f"{b / a:.2f}" for a, b in rounds) or "-")
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
