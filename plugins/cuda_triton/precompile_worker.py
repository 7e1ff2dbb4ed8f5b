"""A worker process of :func:`.launch.compile_in_workers`.

``python -m sdk.plugins.cuda_triton.precompile_worker JOBS INDEX COUNT`` compiles the kernel
sources ``JOBS[INDEX::COUNT]`` (a pickled list of ``sdk.KernelSource``, written by the parent
into a private temporary directory) exactly as the parent would, ``bind(src).precompile()``:
Triton compiles each one into its disk cache, where the parent's own compile then finds it
under the same key. A worker only saves the parent time: whatever it fails to compile, the
parent compiles itself. Each failure is one line on stderr; the exit status is 1 if any.
"""

from __future__ import annotations

import pickle
import sys


def main(argv: list[str]) -> int:
    jobs_path, index, count = argv[1], int(argv[2]), int(argv[3])
    with open(jobs_path, "rb") as f:
        jobs = pickle.load(f)  # noqa: S301 - written by this worker's parent, for it alone
    from .launch import bind

    failed = 0
    for src in jobs[index::count]:
        try:
            precompile = getattr(bind(src), "precompile", None)
            if precompile is not None:
                precompile()
        except Exception as exc:  # noqa: BLE001 - the parent compiles it instead
            failed += 1
            print(f"{src.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
