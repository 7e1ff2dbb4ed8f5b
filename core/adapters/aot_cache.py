"""Adapter over torch's AOTAutograd cache and MegaCache (private torch APIs, like
:mod:`core.adapters.torch_private`).

Inductor's warm processes skip AOTAutograd (the joint trace, its metadata, the min-cut
partition): ``AOTAutogradCache`` (``torch/_functorch/_aot_autograd/autograd_cache.py``)
stores what it made, with the compiled forward and backward, and a later process rebuilds
AOTAutograd's runtime wrappers from it. The cache is consulted only for a compiler wrapped
in ``SerializableAOTDispatchCompiler`` that returns an ``OutputCode``; a compiler other than
Inductor is stored in the bundled mode (``functorch.config.bundled_autograd_cache``), where
the entry pickles the ``OutputCode`` itself. :class:`SDKOutputCode` is the SDK's: it pickles
a plain recipe (see :mod:`core.warm`), never the live program.

AOTAutograd's key does not include the compiler, so the backend's identity goes into
``torch.compiler.config.cache_key_tag`` while the compile runs (:func:`caching`). The entry
is written by torch, with pickle, under ``$TORCHINDUCTOR_CACHE_DIR/aotautograd``
(:func:`entry_dir`); torch reads it with pickle too, so the SDK uses the cache only where
that directory is private (:mod:`core.warm` checks, :func:`refused`), and, while the SDK's
compile looks an entry up, torch's read of the local entries
(``GuardedCache.iterate_over_candidates``) is replaced by :func:`_candidates`: every
directory from ``/`` down to the key's and every entry file is opened without following
links and checked on the open descriptor (:func:`read_private_entries`), and only the bytes
read through it are unpickled, so nothing can be swapped in between the check and the read.
A lookup that fails the check is a miss, reported once per cause (``on_refused``). Torch
names each entry by the digest of its bytes (``sha256_hash(content)``, when it writes it);
an entry whose bytes do not match its name (a flipped bit, a truncated file), or that does not
unpickle, is never handed to torch: it is removed (through the checked directory), reported
(``on_refused``, naming it), and the lookup goes on: a miss, so torch compiles afresh and
stores the entry again (torch itself would load a changed entry, and fail at the first call
of the compiled function in every later process).

The backward is compiled with the forward (``force_non_lazy_backward_lowering``) while the
cache is on: torch saves the entry when both are compiled, and only a save inside the
compile sees the configuration above.

**The key, remembered** (:class:`KeyMemo`). Torch's key (``autograd_cache_key``) is most of a
warm process's own time in AOTAutograd: its ``FxGraphHashDetails`` imports Inductor's code
generators (``init_backend_registration``) and digests torch's and Triton's sources
(``torch_key``, ``triton_key``), about 1 s of a 1.3 s warm first call of a small model on a
2-core CPU, the same on an H200 host. Those parts are the same for every graph of a process.
So, in the SDK's compiles, a digest of everything the key is computed from except them
(:func:`memo_digest`: the Dynamo graph and its inputs as torch's own key pickler reduces them,
AOTAutograd's configuration, torch's, functorch's and Inductor's configuration, the global
state torch's key reads) and, in their place, the size and modification time of every file
of torch's package and the accelerator's name, maps to the key torch computed for it
before; a later process with the same digest takes that key without computing it. A graph
whose key reads more than its code (a higher-order or custom op, saved-tensor hooks) is not
remembered, and any error while digesting falls back to torch's key.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import pickle
import stat
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

_log = logging.getLogger(__name__)

_UNSUPPORTED: str | None = None
try:
    import torch._functorch._aot_autograd.autograd_cache as _autograd_cache
    import torch._functorch.config as _functorch_config
    from torch._functorch._aot_autograd.autograd_cache import (
        AOTAutogradCache,
        BypassAOTAutogradCache,
    )
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    from torch._inductor.codecache import sha256_hash
    from torch._inductor.output_code import OutputCode
except ImportError as exc:  # a torch without these: no AOTAutograd cache for the SDK
    _UNSUPPORTED = f"this torch has no AOTAutograd cache for other compilers ({exc})"
    OutputCode = object  # type: ignore[assignment,misc]
    BypassAOTAutogradCache = RuntimeError  # type: ignore[assignment,misc]
else:
    for _name in ("bundled_autograd_cache", "force_non_lazy_backward_lowering"):
        if not hasattr(_functorch_config, _name):
            _UNSUPPORTED = f"this torch's functorch.config has no {_name}"


def unsupported() -> str | None:
    """Why this torch cannot cache the SDK's AOTAutograd results, or None."""
    if _UNSUPPORTED:
        return _UNSUPPORTED
    if torch.compiler.config.force_disable_caches:
        return "torch.compiler.config.force_disable_caches is set"
    if not _functorch_config.enable_autograd_cache:
        return "functorch.config.enable_autograd_cache is off (TORCHINDUCTOR_AUTOGRAD_CACHE=0)"
    import torch._inductor.config as inductor_config

    if not inductor_config.fx_graph_cache:
        # AOTAutogradCache.check_cacheable bypasses every graph without it
        return "torch._inductor.config.fx_graph_cache is off (TORCHINDUCTOR_FX_GRAPH_CACHE=0)"
    return None


def entry_dir() -> str:
    """Where torch writes AOTAutograd cache entries (created if missing)."""
    return AOTAutogradCache._get_tmp_dir()


class Uncacheable(BypassAOTAutogradCache):  # type: ignore[misc,valid-type]
    """Raised while an entry is saved: this result is not stored (torch logs it at INFO
    level and goes on)."""


def torch_cache_dir() -> str:
    """torch's cache root (``$TORCHINDUCTOR_CACHE_DIR``, else its default; created)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


# -- reading entries only from private files -------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class _Refused(Exception):
    """A path torch would unpickle from is not private to the user (the message says why)."""


def _fix() -> str:
    return (
        "torch loads AOTAutograd cache entries with pickle, so warm starts use only entries "
        "whose every directory, from / down, and file is safe from other users. Fix: set "
        "TORCHINDUCTOR_CACHE_DIR to a private directory (owned by you, mode 0700) whose "
        "parents are writable only by you or root (or sticky, as /tmp is)"
    )


def _check(path: str, st: os.stat_result, private: bool) -> None:
    """Raise :class:`_Refused` unless ``st`` (of ``path``) is safe: ``private``, owned by the
    user and writable by nobody else; else (an ancestor of torch's cache root) owned by the
    user or root and writable by nobody else unless sticky."""
    uid, mode = os.geteuid(), stat.S_IMODE(st.st_mode)
    if private:
        if st.st_uid != uid:
            raise _Refused(f"{path} is owned by uid {st.st_uid}, not by you (uid {uid})")
        if mode & _OTHERS_WRITE:
            raise _Refused(f"{path} is writable by group or others (mode {mode:#o})")
    else:
        if st.st_uid not in (0, uid):
            raise _Refused(f"{path} (a parent) is owned by uid {st.st_uid}, not by you or root")
        if mode & _OTHERS_WRITE and not mode & stat.S_ISVTX:
            raise _Refused(
                f"{path} (a parent) is writable by group or others and not sticky "
                f"(mode {mode:#o}): another user could swap what is under it"
            )


def _open_dir(root: str, parts: list[str]) -> int | None:
    """A descriptor of ``root/parts...``, each directory from ``/`` down opened without
    following links and checked on the descriptor (``root`` is resolved first: links above
    torch's cache root are followed once, then everything is checked where it really is).
    None when a directory of ``parts`` does not exist; raises :class:`_Refused`."""
    real = os.path.realpath(root)
    names = [n for n in real.split(os.sep) if n]
    fd = os.open(os.sep, _DIR_FLAGS)
    try:
        _check(os.sep, os.fstat(fd), private=not names)
        path = ""
        for i, name in enumerate([*names, *parts]):
            path += os.sep + name
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if i < len(names):
                    raise _Refused(f"{path} does not exist") from None
                return None
            except OSError as exc:  # a link (ELOOP), not a directory
                raise _Refused(f"{path} is not a directory ({exc.strerror or exc})") from exc
            os.close(fd)
            fd = nfd
            _check(path, os.fstat(fd), private=i >= len(names) - 1)
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)


def read_private_entries(root: str, parts: list[str]) -> list[tuple[str, bytes]]:
    """The name and bytes of every entry file (names not starting with ``.``, sorted) of the
    directory ``root/parts...``; ``root`` is torch's cache root. Raises :class:`_Refused`
    (a ``str()`` that says why) unless every directory, from ``/`` down, and every file is
    safe (see :func:`_check`); an entry that is not a regular file is refused too."""
    fd = _open_dir(root, parts)
    if fd is None:
        return []
    out = []
    try:
        for name in sorted(os.listdir(fd)):
            if name.startswith("."):
                continue  # torch's temporaries
            path = os.path.join(root, *parts, name)
            try:
                efd = os.open(name, _FILE_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _Refused(f"{path} is not a regular file ({exc.strerror or exc})") from exc
            try:
                st = os.fstat(efd)
                if not stat.S_ISREG(st.st_mode):
                    raise _Refused(f"{path} is not a regular file")
                _check(path, st, private=True)
                with os.fdopen(os.dup(efd), "rb") as f:
                    out.append((name, f.read()))
            finally:
                os.close(efd)
    finally:
        os.close(fd)
    return out


def intact(name: str, content: bytes) -> bool:
    """Whether ``content`` is what torch wrote under ``name``: torch names each entry by the
    digest of its bytes (``AOTAutogradCache._write_to_local_cache``)."""
    return name == sha256_hash(content)


def _remove(root: str, parts: list[str], name: str) -> str:
    """Remove the entry ``name`` of ``root/parts...`` (through the checked directory, as
    it was read); what became of it, for the report."""
    try:
        fd = _open_dir(root, parts)
        if fd is not None:
            try:
                os.unlink(name, dir_fd=fd)
            finally:
                os.close(fd)
    except (_Refused, OSError) as exc:
        return f"not removed ({exc})"
    return "removed"


def refused(path: str) -> str | None:
    """Why the directory ``path`` under torch's cache root (its parents from ``/`` down
    and itself) is not safe to read pickles from, or None."""
    root = torch_cache_dir()
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    parts = [] if rel == os.curdir else rel.split(os.sep)
    try:
        fd = _open_dir(root, parts)
        if fd is not None:
            os.close(fd)
    except _Refused as exc:
        return f"{exc}; {_fix()}"
    except OSError as exc:
        return f"{path} is not usable ({exc.strerror or exc}); {_fix()}"
    return None


#: while the SDK's compile runs: what to call with why a lookup was refused
_on_refused: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "sdk_aot_on_refused", default=None
)
_original_candidates: Any = None


def _candidates(cls: Any, local: bool, remote_cache: Any, key: str) -> Iterator[Any]:
    """``GuardedCache.iterate_over_candidates`` for AOTAutograd's cache: in the SDK's
    compiles, local entries are read through :func:`read_private_entries`."""
    on_refused = _on_refused.get()
    if on_refused is None:
        yield from _original_candidates.__get__(None, cls)(local, remote_cache, key)
        return
    if local:
        subdir = cls._get_tmp_dir_for_key(key)
        root = torch_cache_dir()
        rel = os.path.relpath(subdir, root)
        contents: list[tuple[str, bytes]] = []
        if rel.startswith(os.pardir):
            on_refused(f"{subdir} is not under torch's cache root {root}; {_fix()}")
        else:
            try:
                contents = read_private_entries(root, rel.split(os.sep))
            except _Refused as exc:
                on_refused(f"{exc}; {_fix()}")
            except OSError as exc:
                on_refused(f"{subdir} is not readable ({exc.strerror or exc}); {_fix()}")
        for name, content in contents:
            entry, why = _load(name, content)
            if why:
                path = os.path.join(subdir, name)
                done = _remove(root, rel.split(os.sep), name)
                on_refused(
                    f"the entry {path} {why}: {done}, not used (the graph is compiled "
                    "afresh and stored again, unless another entry serves it)"
                )
                continue
            yield entry, content, True
    if remote_cache:
        yield from _original_candidates.__get__(None, cls)(False, remote_cache, key)


def _load(name: str, content: bytes) -> tuple[Any, str | None]:
    """The entry torch stored as ``name``, unpickled, or why it cannot be used."""
    if not intact(name, content):
        return None, (
            f"is corrupt: its {len(content)} bytes do not match the digest torch named it by"
        )
    try:
        return pickle.loads(content), None
    except Exception as exc:  # noqa: BLE001 - torch skips such an entry, and keeps it
        _log.debug("AOTAutograd cache entry %s does not load", name, exc_info=True)
        return None, f"does not load ({type(exc).__name__}: {exc})"


def _hook() -> None:
    """Route AOTAutogradCache's reads of local entries through :func:`_candidates`, and its
    keys through :func:`_remembered_key` (once)."""
    global _original_candidates, _original_key
    if _original_candidates is None:
        _original_candidates = _unbound(AOTAutogradCache, "iterate_over_candidates")
        AOTAutogradCache.iterate_over_candidates = classmethod(_candidates)
    if _original_key is None and callable(getattr(_autograd_cache, "autograd_cache_key", None)):
        _original_key = _autograd_cache.autograd_cache_key
        _autograd_cache.autograd_cache_key = _remembered_key


# -- torch's keys, remembered --------------------------------------------------------------


class KeyMemo(Protocol):
    """Where torch's AOTAutograd keys are remembered, by :func:`memo_digest` (the SDK's own
    verified disk cache)."""

    def get(self, digest: str) -> bytes | None: ...

    def put(self, digest: str, data: bytes) -> None: ...


#: while the SDK's compile runs: where torch's keys are remembered (None: nowhere)
_memo: contextvars.ContextVar[KeyMemo | None] = contextvars.ContextVar(
    "sdk_aot_key_memo", default=None
)
_original_key: Any = None
#: how many keys were taken from the memo, and computed by torch, in this process
KEY_MEMO = {"remembered": 0, "computed": 0}
#: the memo's format: a change of what :func:`memo_digest` reads changes it
MEMO_FORMAT = 1


def _remembered_key(mod: Any, example_inputs: Any, config: Any, *rest: Any, **kw: Any) -> Any:
    """``autograd_cache_key``, taken from the memo where it has the graph's digest."""
    memo = _memo.get()
    digest = None
    if memo is not None and not getattr(_functorch_config, "bypass_autograd_cache_key", False):
        try:
            digest = memo_digest(mod, example_inputs, config, rest, kw)
        except Exception:  # noqa: BLE001 - torch's key, computed as always
            _log.debug("no digest for the AOTAutograd key memo", exc_info=True)
        if digest is not None:
            try:
                known = memo.get(digest)
            except OSError as exc:  # a cache directory refused: torch's key, as always
                _log.debug("AOTAutograd key memo not read: %s", exc)
                known = digest = None
            if known:
                KEY_MEMO["remembered"] += 1
                return known.decode(), []
    key, lines = _original_key(mod, example_inputs, config, *rest, **kw)
    KEY_MEMO["computed"] += 1
    if digest is not None and isinstance(key, str):
        try:
            memo.put(digest, key.encode())  # type: ignore[union-attr]  (digest implies memo)
        except OSError as exc:
            _log.debug("AOTAutograd key memo not written: %s", exc)
    return key, lines


def memo_digest(
    mod: Any, example_inputs: Any, config: Any, rest: Any = (), kw: Any = None
) -> str | None:
    """A digest of what torch's AOTAutograd key of this graph is computed from, with the
    process-wide parts (torch's sources, the accelerator) stood for by what is cheap to
    read (:func:`_installed`); None where the key reads more than this sees."""
    gm = getattr(mod, "gm", mod)
    if not isinstance(gm, torch.fx.GraphModule) or _reads_more(gm):
        return None
    with _autograd_cache.sanitize_gm_for_cache(gm):
        state = (
            "sdk-aot-key-memo",
            MEMO_FORMAT,
            gm,
            list(example_inputs),
            config,
            rest,
            sorted((kw or {}).items()),
            [repr(n.meta.get("custom")) for n in gm.graph.nodes if n.meta.get("custom")],
            _global_state(),
            _installed(),
        )
        return _autograd_cache.AOTAutogradCachePickler(gm).get_hash(state)


def _reads_more(gm: torch.fx.GraphModule) -> bool:
    """Whether torch's key of ``gm`` reads more than its code, inputs and configuration:
    subgraphs (higher-order ops: checkpointing's context functions), saved-tensor hooks,
    custom ops (the Triton kernels registered for them)."""
    if hasattr(gm, "saved_tensors_hooks_pack_0"):
        return True
    if any(isinstance(m, torch.fx.GraphModule) for m in gm.children()):
        return True
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, torch._ops.HigherOrderOperator):
            return True
        ops = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
        if isinstance(target, ops) and str(target).split(".")[0] not in ("aten", "prims"):
            return True
    return False


def _global_state() -> tuple:
    """The process state torch's key reads, now (grad mode, autocast, determinism, matmul
    precision, default dtype, threads, the configurations of torch.compile, functorch and
    Inductor)."""
    import torch._inductor.config as inductor_config

    autocast = [
        (d, torch.get_autocast_dtype(d))
        for d in torch._C._autocast_supported_devices()
        if torch.is_autocast_enabled(d)
    ]
    context = torch._guards.TracingContext.try_get()
    return (
        torch.is_grad_enabled(),
        autocast,
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        getattr(torch.utils.deterministic, "fill_uninitialized_memory", None),
        torch.get_default_dtype(),
        torch.get_num_threads(),
        torch.get_float32_matmul_precision(),
        _accelerator_matmul(),
        bool(context and getattr(context, "fakify_first_call", False)),
        torch.compiler.config.save_config(),
        _functorch_config.save_config(),
        repr(getattr(_functorch_config, "activation_memory_budget_runtime_estimator", None)),
        repr(getattr(_functorch_config, "activation_memory_budget_solver", None)),
        inductor_config.save_config_portable(ignore_private_configs=False),
    )


#: the accelerator backend's matrix-product settings torch's key reads
_MATMUL_FLAGS = (
    "fp32_precision",
    "allow_tf32",
    "allow_fp16_reduced_precision_reduction",
    "allow_bf16_reduced_precision_reduction",
)


def _accelerator() -> Any:
    """The current accelerator's device type, or None."""
    return torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None


def _accelerator_matmul() -> tuple:
    """The matrix-product settings of the current accelerator's ``torch.backends`` module."""
    device = _accelerator()
    matmul = getattr(getattr(torch.backends, device.type, None), "matmul", None) if device else None
    return tuple(repr(getattr(matmul, flag, None)) for flag in _MATMUL_FLAGS)


@functools.cache
def _installed() -> tuple:
    """What stands for torch's source digest and the system torch's key reads: torch's
    versions, the size and modification time of every file of its package, and the current
    accelerator's name (once per process).

    Torch's key also digests Triton's sources, for Inductor's kernels; the SDK's entries
    depend on a kernel compiler only through its plugin's ``sdk_cache_key``, part of the
    cache tag, which the digest holds."""
    device = _accelerator()
    name = None
    if device is not None:
        module = torch.get_device_module(device.type)
        if hasattr(module, "get_device_name"):
            name = module.get_device_name(torch.accelerator.current_device_index())
    versions = sorted(
        (k, v) for k, v in vars(torch.version).items() if isinstance(v, (str, int, type(None)))
    )
    root = os.path.dirname(torch.__file__)
    return (torch.__version__, versions, _file_stats(root), str(device), name)


def _file_stats(root: str) -> str:
    """A digest of the path, size and modification time of every file under ``root``."""
    import hashlib

    h = hashlib.sha256()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    stack.append(entry.path)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            h.update(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _unbound(cls: Any, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise AttributeError(name)


@contextlib.contextmanager
def caching(
    tag: str, on_refused: Callable[[str], None], keys: KeyMemo | None = None
) -> Iterator[None]:
    """Within the block, AOTAutograd looks up and saves results of serialisable compilers
    (:func:`serializable`), under keys that include ``tag``; it reads only entries that
    pass :func:`read_private_entries` (else a miss, and ``on_refused(why)``), and of those
    only the intact ones that unpickle (another is removed, and ``on_refused(why)``).
    With ``keys``, torch's keys are remembered there (see the module docstring)."""
    _hook()
    token = _on_refused.set(on_refused)
    memo_token = _memo.set(keys)
    try:
        with (
            _functorch_config.patch(
                bundled_autograd_cache=True,
                force_non_lazy_backward_lowering=True,
            ),
            torch.compiler.config.patch(cache_key_tag=tag),
        ):
            yield
    finally:
        _memo.reset(memo_token)
        _on_refused.reset(token)


def serializable(compile_fn: Callable[..., SDKOutputCode]) -> Any:
    """``compile_fn`` (ATen graph, example inputs -> :class:`SDKOutputCode`) as a compiler
    AOTAutograd caches."""
    return SerializableAOTDispatchCompiler(SDKOutputCode, compile_fn)


class SDKOutputCode(OutputCode):  # type: ignore[misc,valid-type]
    """A compiled ATen graph as torch's AOTAutograd cache stores it.

    Live, it calls ``compiled``. Stored, it is ``freeze()``'s answer (plain data) and the
    module-level function ``restore``, which a later process calls on that data to get
    the compiled callable again (``post_compile``). ``freeze`` raises :class:`Uncacheable`
    for a result that must not be stored.
    """

    def __init__(
        self,
        compiled: Callable[..., Any],
        freeze: Callable[[], Any],
        restore: Callable[[Any], Callable[..., Any]],
    ) -> None:
        self._run: Callable[[list[Any]], Any] | None = _boxed(compiled)
        self._freeze: Callable[[], Any] | None = freeze
        self._restore = restore
        self._state: Any = None
        # an instance attribute: the wrappers torch puts around a backward copy __dict__
        self._boxed_call = True

    def __call__(self, inputs: list[Any]) -> Any:
        return self._run(inputs)  # type: ignore[misc]  (None only while stored)

    def prepare_for_serialization(self) -> None:
        # called on a shallow copy (BundledOutputCodeLoadable.pre_save): the live object
        # keeps running
        if self._freeze is None:
            raise Uncacheable("the SDK program has no recipe")
        self._state = self._freeze()
        self._run = None
        self._freeze = None

    def post_compile(self, example_inputs: Any, constants: Any, graph_kwargs: Any) -> None:
        if self._run is None:
            self._run = _boxed(self._restore(self._state))

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass


def unkeyed_guard() -> str | None:
    """Why the compile being saved must not be: a guard it added over a value that torch's
    entry does not key, or None.

    A Python float that Dynamo passes in as a 0-d tensor becomes a symbol read from it
    (``_local_scalar_dense``); where the trace needs its value (an op's scalar argument:
    ``add(..., alpha=-lr)``), torch specializes it with a ShapeEnv guard and the program
    holds the constant. AOTAutograd's entry keeps only the guards over its inputs' sizes
    (``get_pruned_guards``) and its key is the Dynamo graph, the same for every value, so
    the next value would load the program made for the first one and compute with it,
    silently (pytorch/pytorch#197889; Inductor does too). Such a compile is not stored: each
    value compiles again, as with the cache off."""
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    shape_env = AOTAutogradCache._get_shape_env()  # the one its entry's guards come from
    for guard in getattr(shape_env, "guards", ()):
        if any(not symbol_is_type(s, SymT.SIZE) for s in guard.expr.free_symbols):
            return (
                f"the compile specialized a value that the cache key does not hold "
                f"({guard.expr}; pytorch/pytorch#197889)"
            )
    return None


def _boxed(fn: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    """``fn`` taking its inputs as one list (AOTAutograd's boxed convention)."""
    if getattr(fn, "_boxed_call", False):
        return fn
    return lambda inputs: fn(*inputs)
