"""Kernel records: what the CUDA driver needs to launch a compiled Triton kernel, as data.

A static kernel's first launch through Triton (:meth:`.native.Native.fill`) writes its
record into the SDK's disk cache (``DiskCache("cuda_triton-records")``), under a key of
everything its compile depended on (:func:`key`): the kernel's source and function, its
constexprs and options, its grid and argument dtypes, Triton's version and the environment
variables Triton's own cache key reads, the device model and this plugin's sources. A later
process that compiles the same kernel (a whole-graph cache hit rebuilds a program by
compiling its stored kernel sources through this plugin) finds the record and launches the
cubin through the driver from the first call (:mod:`.native`'s shim loads it with
``cuModuleLoadData`` in the context current at that launch): no Triton compile, cache
lookup or launcher build. Triton's path stays the fallback: no record, a record of another
arch, a load that fails, another context current.

The record (:class:`KernelRecord`) is plain data: the cubin's bytes, the kernel's function
name in it, threads per block, shared memory, the trailing NULL parameters Triton's
kernels take (scratch pointers), grid, argument count and Triton types, which arguments
Triton took as 16-byte aligned, the target arch, Triton's version and its compile hash.
Stored as ``len(json) | json | cubin``; the JSON carries the cubin's sha256 and length.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from typing import Any

from sdk.cache import DiskCache, stable_hash

_log = logging.getLogger(__name__)

FORMAT = 1
NAMESPACE = "cuda_triton-records"

#: how many times this process took a kernel through Triton's JIT path (compiled, or found in
#: Triton's cache and loaded): a precompile, a first launch through ``kernel[grid]``, a first
#: launch of a symbolic kernel's specialization (:func:`.native.counts`)
_triton_jit = [0]
_triton_jit_kernels: list[str] = []


@dataclasses.dataclass(frozen=True)
class KernelRecord:
    """One compiled kernel, as the CUDA driver launches it (see the module's docstring)."""

    name: str  # the function's name in the cubin
    cubin: bytes
    threads: int  # per block: num_warps * warp size
    num_warps: int
    shared: int  # dynamic shared memory, bytes
    extra: int  # NULL parameters after the kernel's own (global and profile scratch)
    grid: tuple[int, int, int]
    signature: tuple[str, ...]  # Triton's type of each parameter the launch passes
    aligned: tuple[bool, ...]  # per parameter: Triton specialized it as 16-byte aligned
    arch: int  # the target's compute capability, major * 10 + minor
    triton: str  # Triton's version
    hash: str  # Triton's compile hash (for reports)

    @property
    def nargs(self) -> int:
        return len(self.signature)

    def to_bytes(self) -> bytes:
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "cubin"}
        doc["format"] = FORMAT
        doc["cubin_sha256"] = hashlib.sha256(self.cubin).hexdigest()
        doc["cubin_bytes"] = len(self.cubin)
        head = json.dumps(doc, separators=(",", ":")).encode()
        return len(head).to_bytes(8, "little") + head + self.cubin

    @classmethod
    def from_bytes(cls, data: bytes) -> KernelRecord:
        """The record of :meth:`to_bytes`; ``ValueError`` for anything else."""
        try:
            n = int.from_bytes(data[:8], "little")
            doc = json.loads(data[8 : 8 + n])
            cubin = bytes(data[8 + n :])
            if doc.pop("format") != FORMAT:
                raise ValueError("another record format")
            if (
                doc.pop("cubin_bytes") != len(cubin)
                or doc.pop("cubin_sha256") != hashlib.sha256(cubin).hexdigest()
            ):
                raise ValueError("the cubin does not match its record")
            rec = cls(
                name=str(doc["name"]),
                cubin=cubin,
                threads=int(doc["threads"]),
                num_warps=int(doc["num_warps"]),
                shared=int(doc["shared"]),
                extra=int(doc["extra"]),
                grid=tuple(int(g) for g in doc["grid"]),  # type: ignore[arg-type]
                signature=tuple(str(s) for s in doc["signature"]),
                aligned=tuple(bool(a) for a in doc["aligned"]),
                arch=int(doc["arch"]),
                triton=str(doc["triton"]),
                hash=str(doc["hash"]),
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a kernel record: {exc}") from exc
        if len(rec.grid) != 3 or len(rec.aligned) != len(rec.signature) or not rec.name:
            raise ValueError("not a kernel record: inconsistent fields")
        return rec


def from_compiled(
    compiled: Any, grid: tuple[int, int, int], aligned: tuple[bool, ...]
) -> KernelRecord | None:
    """The record of a kernel Triton compiled for CUDA (a ``CompiledKernel``), launched on
    ``grid`` with ``aligned`` saying which of its arguments were 16-byte aligned; None
    where it is no cubin or takes what the shim does not pass (see :func:`launchable`)."""
    md = compiled.metadata
    target = md.target
    cubin = compiled.asm.get("cubin") if hasattr(compiled, "asm") else None
    if getattr(target, "backend", None) != "cuda" or not isinstance(cubin, bytes):
        return None
    if not launchable(md):
        return None
    signature = tuple(str(ty) for ty in compiled.src.signature.values() if ty != "constexpr")
    if len(signature) != len(aligned):
        return None
    import triton

    return KernelRecord(
        name=str(md.name),
        cubin=cubin,
        threads=int(md.num_warps) * int(getattr(md, "warp_size", 32)),
        num_warps=int(md.num_warps),
        shared=int(md.shared),
        extra=int(hasattr(md, "global_scratch_size")) + int(hasattr(md, "profile_scratch_size")),
        grid=tuple(int(g) for g in grid),  # type: ignore[arg-type]
        signature=signature,
        aligned=tuple(bool(a) for a in aligned),
        arch=int(target.arch),
        triton=triton.__version__,
        hash=str(getattr(md, "hash", "")),
    )


def launchable(md: Any) -> bool:
    """Whether the shim launches a kernel of this metadata as Triton would: one CTA, no
    cluster, no cooperative or programmatic-dependent launch, no scratch memory (the shim
    passes NULL scratch pointers)."""
    return not (
        getattr(md, "num_ctas", 1) != 1
        or getattr(md, "launch_cooperative_grid", False)
        or getattr(md, "launch_pdl", False)
        or tuple(getattr(md, "cluster_dims", (1, 1, 1)) or (1, 1, 1)) not in ((1, 1, 1), ())
        or getattr(md, "global_scratch_size", 0)
        or getattr(md, "profile_scratch_size", 0)
    )


# -- the store ------------------------------------------------------------------


def key(
    source: str,
    entry: str,
    kw: dict[str, Any],
    grid: tuple[int, int, int],
    dtypes: tuple[str, ...],
    device: str,
) -> str:
    """The key of a static kernel's record: its source and function, constexprs and
    options (``kw``), grid, argument dtypes, and ``device`` (:func:`device_key`)."""
    return stable_hash(
        "cuda_triton-record",
        FORMAT,
        device,
        source,
        entry,
        tuple(sorted((k, repr(v)) for k, v in kw.items())),
        tuple(int(g) for g in grid),
        tuple(dtypes),
    )


@functools.cache
def _triton_env() -> tuple:
    """Triton's version and the environment variables its own cache key reads."""
    import triton
    from triton.compiler import compiler

    read = getattr(compiler, "get_cache_invalidating_env_vars", None)
    env = read() if read is not None else {}
    return (triton.__version__, tuple(sorted((str(k), str(v)) for k, v in env.items())))


def device_key(plugin_key: str) -> str:
    """What a record's key takes of the process: the plugin's cache key (Triton's version,
    the device model and capability, CUDA's version, this plugin's sources) and Triton's
    cache-invalidating environment."""
    return stable_hash(plugin_key, _triton_env())


def usable(data: bytes | None, arch: int) -> KernelRecord | None:
    """The record of ``data`` where it is one for a device of compute capability ``arch``
    and this process's Triton; None for anything else (logged)."""
    if data is None:
        return None
    try:
        rec = KernelRecord.from_bytes(data)
    except ValueError as exc:
        _log.info("cuda_triton: a kernel record unreadable (%s): compiling through Triton", exc)
        return None
    if rec.arch != arch or rec.triton != _triton_env()[0]:
        return None
    return rec


def load(record_key: str, arch: int) -> KernelRecord | None:
    """The record under ``record_key`` for a device of compute capability ``arch``, or
    None (missing, unreadable, of another arch or Triton)."""
    try:
        data = DiskCache(NAMESPACE).get(record_key)
    except OSError as exc:  # a cache directory refused: Triton's path
        _log.info("cuda_triton: kernel records not read: %s", exc)
        return None
    return usable(data, arch)


def save(record_key: str, rec: KernelRecord) -> None:
    """Store ``rec``; a cache that cannot be written costs the next process Triton's path."""
    try:
        DiskCache(NAMESPACE).put(record_key, rec.to_bytes())
    except OSError as exc:
        _log.info("cuda_triton: kernel record not stored: %s", exc)


def count_triton_jit(name: str, why: str) -> None:
    """Note one kernel taken through Triton's JIT path, and why it had no record to load
    (see :func:`.native.counts`)."""
    _triton_jit[0] += 1
    _triton_jit_kernels.append(f"{name}: {why}")


def triton_jit_count() -> int:
    return _triton_jit[0]


def triton_jit_kernels() -> list[str]:
    """Each kernel taken through Triton's JIT path in this process, and why."""
    return list(_triton_jit_kernels)
