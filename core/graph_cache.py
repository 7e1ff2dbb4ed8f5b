"""The whole-graph cache: compiled programs kept on disk for later processes.

What :func:`core.program.build_program` makes of one ATen graph variant (the generated
wrapper's source and the objects it names, the kernels' sources, what ``explain`` reports,
how long that cold compile took: a hit's report shows it) is stored in ``DiskCache("programs")`` as JSON plus raw tensor bytes (no pickle), under a key
of everything that changes it:

* the graph's code, every node's traced sizes and strides, the bytes of its constant
  tensors, and the input layouts;
* the compile's options, graph kind and device type, and whether
  ``torch.use_deterministic_algorithms`` is on (what an empty tensor holds);
* the codegen plugin's name, version and ``sdk_cache_key`` answer (its compiler, device
  model, own source); a plugin that answers None is never cached;
* the SDK's version and a digest of its own source files, torch's version.

A hit rebuilds the wrapper and compiles the stored kernel sources through the plugin (whose
binary cache makes that a load): lowering, scheduling and rendering are skipped. The entry's
sha256 and key are checked by :class:`~sdk.cache.DiskCache`; an entry of another format, or
one that cannot be decoded here (an op this torch lacks), reads as a miss and is rebuilt.
Off with ``SDK_GRAPH_CACHE=0`` or the ``cache=False`` option.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from sdk._config import env
from sdk._diskcache import (
    DiskCache,
    cache_dir,
    check_part,
    own_name,
    remove_lock,
    source_digest,
    stable_hash,
)
from sdk.plugin import CoreOptions, PluginOptions

from .adapters import torch_private as tp

#: the entries' layout: 2 since a program is its steps alone (no Python source)
FORMAT = 2
NAMESPACE = "programs"
#: constant tensors larger than this (in all) keep a program out of the cache
MAX_CONSTANT_BYTES = 64 << 20


class Uncacheable(Exception):
    """The program names something this cache cannot store (the compile goes on)."""


# -- the key ------------------------------------------------------------------


@functools.cache
def sdk_digest() -> str:
    """A digest of the SDK's own sources (``sdk`` and its core): a change to any of them,
    installed editable or not, changes every key."""
    return source_digest("sdk", "sdk.core")  # (sub-packages are walked too)


def unplain(*options: CoreOptions | PluginOptions) -> list[str]:
    """The options whose values are not plain data (a key cannot hold them)."""
    return sorted(k for o in options for k, v in o.as_dict().items() if not _plain(v))


def _plain(x: Any) -> bool:
    if x is None or isinstance(x, (bool, int, float, str)):
        return True
    if isinstance(x, (tuple, list)):
        return all(_plain(y) for y in x)
    return False


def graph_key(
    gm: torch.fx.GraphModule, specs: tuple, ctx: Any, plugin_version: str, plugin_key: str
) -> str:
    """The key of one graph variant (see the module's docstring). Raises
    :class:`Uncacheable` for an option whose value is not plain data."""
    bad = unplain(ctx.core_options, ctx.plugin_options)
    if bad:
        raise Uncacheable(f"option(s) {bad} are not plain data")
    consts = []
    sources = gm.meta.get(CONSTANT_SOURCES, {})
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _attr(gm, node.target)
            source = sources.get(node.target)
            if source is not None:
                consts.append((node.target, constant_digest(source)))
            elif isinstance(value, torch.Tensor):
                consts.append((node.target, _tensor_digest(value)))
            elif isinstance(value, torch.fx.GraphModule):
                consts.append((node.target, value.code))
            else:
                raise Uncacheable(f"get_attr {node.target} is a {type(value).__name__}")
    import sdk

    return stable_hash(
        FORMAT,
        sdk.__version__,
        sdk_digest(),
        torch.__version__,
        ctx.plugin,
        plugin_version,
        plugin_key,
        ctx.graph_kind,
        ctx.device_type,
        gm.code,
        traced_shapes(gm),
        tuple(consts),
        repr(specs),
        ctx.core_options.hash(),
        ctx.plugin_options.hash(),
        # what an empty tensor holds (core/lowering/elementwise.py: uninitialized)
        torch.are_deterministic_algorithms_enabled(),
    )


def traced_shapes(gm: torch.fx.GraphModule) -> str:
    """Every node's traced sizes and strides, symbolic ones as expressions. Two graphs of one
    code and one input layout can differ here: Dynamo traces ``buf[:x.size(0)]`` under a
    guard, ``x.size(0) <= buf.size(0)`` (the slice has ``x``'s length) or its negation
    (``buf``'s), and the lowering reads these sizes."""
    parts = []
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for i, t in enumerate(val if isinstance(val, (list, tuple)) else (val,)):
            if isinstance(t, torch.Tensor):
                strides = t.stride() if t.layout == torch.strided else ()
                parts.append(f"{node.name}.{i}:{tuple(t.shape)}:{tuple(strides)}")
    return ";".join(parts)


def _attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


#: ``GraphModule.meta`` key of ``{get_attr target: the tensor its constant was taken of}``: a
#: frozen parameter or buffer (:func:`core.subgraph_io.frozen_graph`), whose digest is
#: :func:`constant_digest`'s, computed once per tensor and version
CONSTANT_SOURCES = "sdk_constant_sources"
#: per tensor: ((its version, its data pointer), its digest)
_DIGESTS = WeakIdKeyDictionary()


def constant_digest(t: torch.Tensor) -> str:
    """The digest a key holds of the constant taken of ``t`` (sha256 of its layout and
    bytes), computed once per tensor: again only after ``t`` was written in place (its
    version) or given other data."""
    with tp.real_mode():
        stamp = (t._version, t.data_ptr())
        known = _DIGESTS.get(t)
        if known is not None and known[0] == stamp:
            return known[1]
        digest = _tensor_digest(t.detach())
    _DIGESTS[t] = (stamp, digest)
    return digest


def _tensor_digest(t: torch.Tensor) -> str:
    meta = f"{t.dtype}|{tuple(t.shape)}|{t.stride()}|{t.storage_offset()}|{t.device.type}"
    return hashlib.sha256(meta.encode() + _storage_bytes(t)).hexdigest()


def _storage_bytes(t: torch.Tensor) -> bytes:
    if tp.is_fake(t):
        raise Uncacheable("a constant is a fake tensor")
    with tp.real_mode():
        st = t.untyped_storage().cpu()  # (the storage itself where it is already there)
        return bytes(memoryview(torch.empty(0, dtype=torch.uint8).set_(st).numpy()))


# -- values the wrapper names -------------------------------------------------


class Encoder:
    """Turns the wrapper's objects into JSON (tensors into byte blobs)."""

    def __init__(self, kernels: list[Callable]) -> None:
        self.kernel_index = {id(fn): i for i, fn in enumerate(kernels)}
        self.blobs: list[bytes] = []
        self.size = 0

    def __call__(self, x: Any) -> Any:
        if x is None or isinstance(x, (bool, str)):
            return {"t": "plain", "v": x}
        if isinstance(x, int):
            return {"t": "int", "v": str(x)}
        if isinstance(x, float):
            return {"t": "float", "v": repr(x)}
        if isinstance(x, (tuple, list)):
            return {"t": type(x).__name__, "v": [self(y) for y in x]}
        if isinstance(x, dict):
            return {"t": "dict", "v": [[self(k), self(y)] for k, y in x.items()]}
        if isinstance(x, torch.dtype):
            return {"t": "dtype", "v": str(x).removeprefix("torch.")}
        if isinstance(x, torch.device):
            return {"t": "device", "v": str(x)}
        if isinstance(x, (torch.memory_format, torch.layout)):
            return {"t": type(x).__name__, "v": str(x).removeprefix("torch.")}
        if isinstance(x, tp.OpOverload):
            return {"t": "op", "v": f"{x.namespace}.{x._opname}.{x._overloadname}"}
        if isinstance(x, torch.Tensor):
            return self.tensor(x)
        if id(x) in self.kernel_index:
            return {"t": "kernel", "v": self.kernel_index[id(x)]}
        name = getattr(x, "__name__", None)
        if name and getattr(torch, name, None) is x:
            return {"t": "torch", "v": name}
        raise Uncacheable(f"the wrapper names a {type(x).__name__}: {x!r}"[:200])

    def tensor(self, t: torch.Tensor) -> dict:
        if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            raise Uncacheable(f"a constant is a {type(t).__name__}")
        data = _storage_bytes(t)
        self.size += len(data)
        if self.size > MAX_CONSTANT_BYTES:
            raise Uncacheable(f"constants over {MAX_CONSTANT_BYTES >> 20} MiB")
        self.blobs.append(data)
        return {
            "t": "tensor",
            "v": {
                "blob": len(self.blobs) - 1,
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape),
                "stride": list(t.stride()),
                "offset": t.storage_offset(),
                "device": str(t.device),
                "requires_grad": t.requires_grad,
            },
        }


class Decoder:
    """The inverse of :class:`Encoder`; raises ``ValueError`` for what it cannot rebuild."""

    def __init__(self, kernels: list[Callable], blobs: list[bytes]) -> None:
        self.kernels, self.blobs = kernels, blobs

    def __call__(self, e: dict) -> Any:
        t, v = e["t"], e["v"]
        if t == "plain":
            return v
        if t == "int":
            return int(v)
        if t == "float":
            return float(v)
        if t in ("tuple", "list"):
            items = [self(y) for y in v]
            return tuple(items) if t == "tuple" else items
        if t == "dict":
            return {self(k): self(y) for k, y in v}
        if t in ("dtype", "memory_format", "layout"):
            obj = getattr(torch, v, None)
            kind = {
                "dtype": torch.dtype,
                "memory_format": torch.memory_format,
                "layout": torch.layout,
            }[t]
            if not isinstance(obj, kind):
                raise ValueError(f"torch has no {t} {v}")
            return obj
        if t == "device":
            return torch.device(v)
        if t == "op":
            ns, name, overload = v.split(".")
            try:
                return getattr(getattr(getattr(torch.ops, ns), name), overload)
            except (AttributeError, RuntimeError) as exc:
                raise ValueError(f"no op {v} in this torch") from exc
        if t == "torch":
            obj = getattr(torch, v, None)
            if obj is None:
                raise ValueError(f"no torch.{v}")
            return obj
        if t == "kernel":
            return self.kernels[int(v)]
        if t == "tensor":
            return self.tensor(v)
        raise ValueError(f"unknown entry tag {t!r}")

    def tensor(self, v: dict) -> torch.Tensor:
        with tp.real_mode():
            return self._tensor(v)

    def _tensor(self, v: dict) -> torch.Tensor:
        data = bytearray(self.blobs[v["blob"]])
        dtype = self({"t": "dtype", "v": v["dtype"]})
        st = (
            torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        ).untyped_storage()
        device = torch.device(v["device"])
        st = st.to(device=device)  # type: ignore[call-arg]  (itself where it already is)
        out = torch.empty(0, dtype=dtype, device=device)
        out.set_(st, v["offset"], tuple(v["shape"]), tuple(v["stride"]))
        return out.requires_grad_(v["requires_grad"])


# -- entries ------------------------------------------------------------------


def pack(doc: dict, blobs: list[bytes]) -> bytes:
    """``len(json) | json | blobs``; the JSON lists each blob's length."""
    doc = {**doc, "format": FORMAT, "blobs": [len(b) for b in blobs]}
    head = json.dumps(doc, separators=(",", ":")).encode()
    return len(head).to_bytes(8, "little") + head + b"".join(blobs)


def unpack(data: bytes) -> tuple[dict, list[bytes]]:
    n = int.from_bytes(data[:8], "little")
    doc = json.loads(data[8 : 8 + n])
    if doc.get("format") != FORMAT:
        raise ValueError(f"entry format {doc.get('format')}, not {FORMAT}")
    blobs, pos = [], 8 + n
    for size in doc["blobs"]:
        blobs.append(data[pos : pos + size])
        pos += size
    if pos != len(data):
        raise ValueError("entry length does not match its blobs")
    return doc, blobs


def store() -> DiskCache:
    return DiskCache(NAMESPACE)


# -- python -m sdk cache ------------------------------------------------------


#: a temporary file or build directory older than this is a leftover of a killed process
STALE_AFTER_S = 600


def _temps(d: Any) -> list[Any]:
    """Temporary files and build directories (``.tmp-*``) of a namespace."""
    return [p for p in d.iterdir() if p.name.startswith(".tmp-")]


def _stale(p: Any) -> bool:
    try:
        return time.time() - p.lstat().st_mtime > STALE_AFTER_S
    except OSError:
        return False


def _size(p: Any) -> int:
    st = p.lstat()
    if stat.S_ISDIR(st.st_mode):
        return sum(f.lstat().st_size for f in p.rglob("*") if not f.is_symlink())
    return st.st_size


def _mine(p: Any) -> bool:
    """Owned by the current user (``lstat``: a link is judged, not what it names)."""
    try:
        return p.lstat().st_uid == os.geteuid()
    except OSError:
        return False


def _namespaces(root: Any) -> list[Any]:
    """The namespace directories of the cache root (real directories, not links)."""
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())


def _dirs(d: Any) -> list[Any]:
    """A namespace directory and its sub-directories (``cache_dir("triton", "kernels")``),
    not temporary ones, not links."""
    subs = [
        p
        for p in d.iterdir()
        if not p.name.startswith(".tmp-") and p.is_dir() and not p.is_symlink() and _mine(p)
    ]
    return [d, *subs]


def _entries(d: Any) -> list[Any]:
    """The files of a namespace (and its sub-directories) the SDK wrote (:func:`own_name`)."""
    return [
        f
        for sub in _dirs(d)
        for f in sub.iterdir()
        if own_name(f.name) and f.is_file() and not f.is_symlink() and _mine(f)
    ]


def info(namespace: str | None = None) -> dict[str, Any]:
    """Where the cache is and what each namespace (or one) holds: entries, bytes, and
    temporary files (those of running compiles, and leftovers of killed ones). Raises
    ``ValueError`` for a namespace that is not a plain name, :class:`~sdk.cache.CacheDirRefused`
    for a cache directory that may not be used (not private, or not an SDK cache: see
    :func:`~sdk.cache.cache_dir`)."""
    if namespace is not None:
        check_part(namespace)
    root = cache_dir(strict=True)
    spaces = {}
    for d in _namespaces(root):
        if namespace is not None and d.name != namespace:
            continue
        files = _entries(d)
        temps = _temps(d)
        spaces[d.name] = {
            "files": len(files),
            "bytes": sum(f.stat().st_size for f in files),
            "temp": len(temps),
            "temp_bytes": sum(_size(t) for t in temps),
            "stale": sum(_stale(t) for t in temps),
        }
    return {
        "root": str(root),
        "namespaces": spaces,
        "graph_cache": "on" if env().graph_cache else "off (SDK_GRAPH_CACHE=0)",
    }


def clear(namespace: str | None = None, in_use: list[Any] | None = None) -> int:
    """Delete the entries (of one namespace, or all), the build locks beside libraries but
    those a running build holds (:func:`~sdk._diskcache.remove_lock`; their paths are appended
    to ``in_use``), and the temporary files that killed processes left (older than
    :data:`STALE_AFTER_S`: a running compile's own are kept, so clearing never pulls a file
    from under it); returns how many went. Only what the
    SDK writes goes: in a cache root that holds the SDK's marker (anything else is refused,
    see :func:`~sdk.cache.cache_dir`), files of the current user whose names are the SDK's
    own (:func:`~sdk.cache.own_name`, or ``.tmp-*``); anything else is left alone. Raises
    ``ValueError`` for a namespace that is not a plain name,
    :class:`~sdk.cache.CacheDirRefused` for a cache directory that may not be used."""
    if namespace is not None:
        check_part(namespace)
    root = cache_dir(strict=True)
    dirs = [root / namespace] if namespace else _namespaces(root)
    n = 0
    for d in dirs:
        if not d.is_dir() or d.is_symlink() or not _mine(d):
            continue
        for sub in _dirs(d):
            for f in sub.iterdir():
                if not _mine(f):
                    continue
                if f.name.startswith(".tmp-"):
                    if not _stale(f):
                        continue
                    if f.name.startswith(".tmp-build-") and f.is_dir() and not f.is_symlink():
                        shutil.rmtree(f, ignore_errors=True)
                        n += 1
                    elif f.is_file() or f.is_symlink():
                        n += _unlink(f)
                elif own_name(f.name) and f.name.endswith(".lock") and f.is_file():
                    removed = remove_lock(f)
                    n += bool(removed)
                    if removed is False and in_use is not None:
                        in_use.append(f)
                elif own_name(f.name) and (f.is_symlink() or f.is_file()):
                    n += _unlink(f)
    return n


def _unlink(f: Any) -> int:
    try:
        os.unlink(f)
    except FileNotFoundError:  # another process's clear got there first
        return 0
    return 1
