"""C entry points of Triton kernels, for the SDK's native runner (``sdk.NativeEntry``).

A small C shim, built once per machine by the host compiler (``sdk.toolchain``), launches a
kernel with the CUDA driver's ``cuLaunchKernel`` (found with ``dlsym`` in ``libcuda.so.1``:
no CUDA headers needed) from a state the plugin fills: the kernel's function handle, its
grid, threads (32 per warp), shared memory and the extra parameters Triton's kernels take
after their own (the global and profile scratch pointers, NULL: kernels that need scratch
get no entry). What torch's static launcher reads from the compiled kernel, read the same way.

The state is filled one of two ways:

* from the kernel's record (:mod:`.records`, found when the kernel was compiled: a warm
  process): the state holds the cubin, and the shim's first launch loads it with
  ``cuModuleLoadData``/``cuModuleGetFunction`` in the context current then (opting in to
  shared memory over 48 KB with ``cuFuncSetAttribute`` as Triton's ``loadBinary`` does): the
  kernel launches natively from its first call, Triton never sees it. The Python path
  (``runner="python"``) launches through the same shim (:meth:`Native.launch`);
* at the kernel's first launch through Triton (which compiles or loads the kernel for the
  actual arguments); the kernel's record is stored then, for later processes.

A split reduction's kernels (:class:`Chain`) are one entry: the shim launches them in
order on the arguments and the chain's scratch buffers, all or none.

A kernel of symbolic sizes (:class:`SymNative`) has one such state per variant and Triton
specialization key, each filled at that key's first launch through Triton; the shim computes
its grid and picks the variant and key from the size arguments, with programs compiled from
the renderer's expressions (:func:`program`).

Until then, whenever another CUDA context is current, where a pointer Triton took as 16-byte
aligned is not, or where the record's cubin did not load (another arch: logged once), the
shim answers ``NOT_NATIVE`` and the kernel launches through Triton's Python path.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import logging
import re
import weakref
from pathlib import Path
from typing import Any

import torch

import sdk

from . import records

_log = logging.getLogger(__name__)

#: what the shim returns when it cannot launch now (sdk.NativeEntry's convention)
NOT_NATIVE = sdk.NativeEntry.NOT_NATIVE

#: the shim's C source (``shim.c``, beside this module)
SHIM = (Path(__file__).with_name("shim.c")).read_text()


class _State(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 - ctypes' declaration
        ("function", ctypes.c_void_p),
        ("context", ctypes.c_void_p),
        ("grid", ctypes.c_uint * 3),
        ("threads", ctypes.c_uint),
        ("shared", ctypes.c_uint),
        ("extra", ctypes.c_int64),
        ("image", ctypes.c_void_p),
        ("name", ctypes.c_char_p),
        ("status", ctypes.c_int64),
        ("nargs", ctypes.c_int64),
        ("aligned", ctypes.c_void_p),
        ("device", ctypes.c_int64),
    ]


#: the C side's limits and program words, read from :data:`SHIM` (declared there once)
SYM_KEYS, SYM_CODE, SYM_DEPTH = (
    int(re.search(rf"#define SYM_{n} (\d+)", SHIM).group(1))  # type: ignore[union-attr]
    for n in ("KEYS", "CODE", "DEPTH")
)
OPS = {
    name: i
    for i, name in enumerate(
        re.findall(r"OP_(\w+)", re.search(r"enum \{ (OP_[^}]*)\}", SHIM).group(1))  # type: ignore[union-attr]
    )
}


class _Sym(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 - ctypes' declaration
        ("nptr", ctypes.c_int64),
        ("nsize", ctypes.c_int64),
        ("start", ctypes.c_int64 * 7),
        ("code", ctypes.c_int64 * SYM_CODE),
        ("nkeys", ctypes.c_int64 * 2),
        ("keys", (ctypes.c_int64 * SYM_KEYS) * 2),
        ("states", (_State * SYM_KEYS) * 2),
        ("launched", ctypes.c_int64),
    ]


@functools.cache
def library() -> Any:
    """The shim's library, built once per machine (also where CUDA is missing: the size
    programs of :class:`SymNative` are checked on any machine). Raises where it cannot be
    built."""
    from sdk import toolchain

    source = SHIM.replace("@NOT_NATIVE@", str(NOT_NATIVE))
    lib = toolchain.compile_and_load(
        source,
        language="c",
        flags=("-O2", "-shared", "-fPIC", "-ldl"),
        namespace="cuda_triton-launch",
    )
    lib.sdk_triton_sym_plan.restype = ctypes.c_int64
    lib.sdk_triton_sym_plan.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_int64),
    ]
    return lib


@functools.cache
def _shim() -> Any | None:
    """The built shim (its library), or None where it cannot be built or CUDA's driver
    library is missing (then every kernel launches through Python)."""
    try:
        lib = library()
        lib.sdk_triton_init.restype = ctypes.c_int64
        if lib.sdk_triton_init() != 0:
            return None
        lib.sdk_triton_context.restype = ctypes.c_int64
        lib.sdk_triton_context.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.sdk_triton_launch.restype = ctypes.c_int64
        lib.sdk_triton_launch.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_int64,
        ]
        lib.sdk_triton_launch_chain.restype = ctypes.c_int64
        lib.sdk_triton_launch_chain.argtypes = lib.sdk_triton_launch.argtypes
        return lib
    except Exception as exc:  # noqa: BLE001 - the Python launch path stays
        _log.info("cuda_triton: no native launches: %s", exc)
        return None


#: every kernel's Native of this process (tests count those the runner can launch)
made: weakref.WeakSet[Native] = weakref.WeakSet()


class Native:
    """One kernel's state for the shim: filled from the kernel's record (:meth:`adopt`: the
    shim loads its cubin at the first launch) or at its first launch through Triton
    (:meth:`fill`, which then stores the record under ``record_key``). With ``entry``, the
    runner's entry (``self.entry``) launches it; :meth:`launch` is the Python path's."""

    def __init__(
        self,
        name: str,
        grid: tuple[int, int, int],
        nargs: int,
        *,
        entry: bool = True,
        record_key: str | None = None,
    ) -> None:
        made.add(self)
        lib = _shim()
        self.name, self.grid, self.nargs, self.record_key = name, tuple(grid), nargs, record_key
        self.state = _State()
        self.state.grid[:] = grid
        self.state.device = -1
        self.record: records.KernelRecord | None = None
        self._keep: list[Any] = []  # the buffers the state points into
        self._reported = False
        #: why :meth:`adopt` refused a record (None: none refused)
        self.refused: str | None = None
        self.entry: sdk.NativeEntry | None = None
        self.lib = lib if nargs <= 100 else None  # keeps the shim loaded while in use
        if self.lib is not None and entry:
            self.entry = _entry(self.lib.sdk_triton_launch, name, self.state, nargs)

    def adopt(self, rec: records.KernelRecord, device: int = -1) -> bool:
        """Launch from ``rec``'s cubin: the shim loads it at the first launch, in the context
        current then (none current: ``device``'s primary context, made current where the
        arguments are that device's memory). False (Triton's path stays, :attr:`refused`
        says why) where the shim is missing or the record is not this kernel's launch."""
        self.refused = self._refusal(rec)
        if self.refused is not None:
            return False
        image = ctypes.create_string_buffer(rec.cubin, len(rec.cubin))
        name = ctypes.create_string_buffer(rec.name.encode())
        self._keep += [image, name]
        _set_aligned(self.state, self._keep, rec.aligned)
        self.state.threads = rec.threads
        self.state.shared = rec.shared
        self.state.extra = rec.extra
        self.state.device = device
        self.state.name = ctypes.cast(name, ctypes.c_char_p)
        self.state.image = ctypes.addressof(image)  # last: the shim may load it from now on
        self.record = rec
        return True

    def not_launched(self, args: tuple) -> str:
        """Why the shim answered ``NOT_NATIVE`` for ``args`` (tensors or data pointers) after
        adopting a record."""
        if not self.state.function:
            if self.state.status:
                return f"its cubin did not load (CUresult {self.state.status})"
            return (
                "its cubin was not loaded (no CUDA context current, and no argument in "
                f"device {self.state.device}'s memory)"
            )
        rec = self.record
        if rec is not None and len(args) == len(rec.aligned):
            for i, (a, want) in enumerate(zip(args, rec.aligned, strict=True)):
                ptr = a.data_ptr() if isinstance(a, torch.Tensor) else a
                if want and isinstance(ptr, int) and ptr % 16:
                    return (
                        f"argument {i} is not 16-byte aligned, as it was where the record "
                        "was made (Triton compiles another variant)"
                    )
        return "another CUDA context than the one its cubin was loaded in"

    def _refusal(self, rec: records.KernelRecord) -> str | None:
        if self.lib is None:
            return f"no shim for {self.nargs} arguments"
        if self.state.function or self.record is not None:
            return "the kernel is loaded already"
        if rec.nargs != self.nargs:
            return f"the record has {rec.nargs} arguments, the launch {self.nargs}"
        if tuple(rec.grid) != tuple(self.grid):
            return f"the record's grid is {tuple(rec.grid)}, the launch's {tuple(self.grid)}"
        if rec.extra + rec.nargs > 128:
            return f"{rec.nargs} arguments and {rec.extra} scratch pointers: over 128"
        return None

    def fill(self, compiled: Any, args: tuple) -> None:
        """Take the kernel Triton compiled (and loaded) at its first launch with ``args``,
        and store its record; a kernel the shim cannot launch as Triton would keeps
        launching through Python."""
        if self.lib is None or self.state.function:
            return
        if not all(isinstance(a, torch.Tensor) for a in args) or len(args) != self.nargs:
            return
        context = _launch_context(self.lib, compiled, len(args))
        if context is None:
            return
        aligned = tuple(a.data_ptr() % 16 == 0 for a in args)
        _take(self.state, self._keep, compiled, context, aligned)
        if self.record_key is not None and self.record is None:
            rec = records.from_compiled(compiled, self.grid, aligned)
            if rec is not None:
                records.save(self.record_key, rec)

    def launch(self, *args: torch.Tensor) -> bool:
        """The Python path's launch through the shim (loading the record's cubin at the
        first); False where the shim cannot launch now (Triton's path then)."""
        ptrs = (ctypes.c_int64 * len(args))(*[a.data_ptr() for a in args])
        stream = torch.cuda.current_stream().cuda_stream
        rc = self.lib.sdk_triton_launch(ctypes.addressof(self.state), stream, ptrs, len(args))
        if rc == 0:
            return True
        if rc == NOT_NATIVE:
            self.report()
            return False
        raise _launch_error(self.name)

    def report(self) -> None:
        """One log line where the record's cubin did not load (Triton's path follows)."""
        status = self.state.status
        if self.record is None or status in (0, 1) or self._reported:
            return
        self._reported = True
        why = _LOAD_ERRORS.get(status, f"CUDA error {-status}")
        _log.warning(
            "cuda_triton: kernel %s: its record's cubin (sm_%d) did not load: %s; "
            "compiling it through Triton",
            self.name,
            self.record.arch,
            why,
        )

    @property
    def from_record(self) -> bool:
        """Whether the shim loaded this kernel from its record."""
        return self.record is not None and self.state.status == 1

    @property
    def ready(self) -> bool:
        return bool(self.state.function)


_BINARY = {
    ast.Add: "ADD",
    ast.Sub: "SUB",
    ast.Mult: "MUL",
    ast.FloorDiv: "FLOORDIV",
    ast.Mod: "MOD",
}
_COMPARE = {ast.Lt: "LT", ast.LtE: "LE", ast.Gt: "GT", ast.GtE: "GE", ast.Eq: "EQ", ast.NotEq: "NE"}


def program(expr: str, names: list[str], *, condition: bool = False) -> list[int]:
    """``expr`` (the renderer's Python source over the size arguments ``names``: a grid
    axis, or with ``condition`` the persistent alternative's ``when``) as the shim's postfix
    words, ending in ``OP_END``. ValueError for anything else: integers, the names, ``+ - *
    // %``, unary minus, ``min``/``max``, and in a condition one comparison each, ``and``,
    ``or``."""
    words: list[int] = []
    depth = [0, 0]  # now, deepest

    def push(*w: int) -> None:
        words.extend(w)

    def stack(delta: int) -> None:
        depth[0] += delta
        depth[1] = max(depth[1], depth[0])

    def walk(node: ast.AST, boolean: bool) -> None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            if not -(2**63) <= node.value < 2**63:
                raise ValueError(f"{node.value} does not fit in 64 bits")
            push(OPS["LIT"], node.value)
            stack(1)
        elif isinstance(node, ast.Name) and node.id in names:
            push(OPS["ARG"], names.index(node.id))
            stack(1)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            walk(node.left, False)
            walk(node.right, False)
            push(OPS[_BINARY[type(node.op)]])
            stack(-1)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            walk(node.operand, False)
            if isinstance(node.op, ast.USub):
                push(OPS["NEG"])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("min", "max")
            and len(node.args) >= 2
            and not node.keywords
        ):
            for i, arg in enumerate(node.args):
                walk(arg, False)
                if i:
                    push(OPS[node.func.id.upper()])
                    stack(-1)
        elif (
            boolean
            and isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and type(node.ops[0]) in _COMPARE
        ):
            walk(node.left, False)
            walk(node.comparators[0], False)
            push(OPS[_COMPARE[type(node.ops[0])]])
            stack(-1)
        elif boolean and isinstance(node, ast.BoolOp):
            op = "AND" if isinstance(node.op, ast.And) else "OR"
            for i, value in enumerate(node.values):
                walk(value, True)
                if i:
                    push(OPS[op])
                    stack(-1)
        else:
            raise ValueError(f"{ast.unparse(node)!r} in {expr!r}")

    walk(ast.parse(expr, mode="eval").body, condition)
    if depth[1] > SYM_DEPTH:
        raise ValueError(f"{expr!r} needs a stack of {depth[1]}, over {SYM_DEPTH}")
    return [*words, OPS["END"]]


def spec_key(sizes: list[int] | tuple[int, ...]) -> int:
    """What Triton specialized a kernel's size arguments on, as the shim's key: bit i, size
    i divisible by 16; the bit after them, a size that needs 64 bits."""
    key = sum(1 << i for i, v in enumerate(sizes) if v % 16 == 0)
    all_bits = 0
    for v in sizes:
        all_bits |= v
    return key | (int(all_bits >> 31 != 0) << len(sizes))


#: every SymNative of this process (tests count the keys filled)
made_symbolic: weakref.WeakSet[SymNative] = weakref.WeakSet()


class SymNative:
    """A kernel of symbolic sizes in the shim: the grid of its variants (the kernel, and its
    persistent alternative where ``when`` holds) as programs over the size arguments, and
    one state per Triton specialization key, filled by :meth:`fill` after Triton's launch of
    that key; ``self.entry`` launches it from the runner (the shim answers ``NOT_NATIVE``,
    and the kernel's Python launcher runs, for a key not filled yet). Where the programs do
    not fit the shim, ``self.entry`` is None and :attr:`refused` says why."""

    def __init__(
        self,
        name: str,
        nptr: int,
        names: list[str],
        grids: list[list[str]],
        when: str | None = None,
    ) -> None:
        made_symbolic.add(self)
        self.name, self.nptr, self.nsize = name, nptr, len(names)
        self.state = _Sym()
        self.entry: sdk.NativeEntry | None = None
        self.refused: str | None = None
        self.lib: Any = None
        self._keep: list[Any] = []  # the alignment masks the states point into
        try:
            self._load(names, grids, when)
        except ValueError as exc:
            self.refused = str(exc)
            return
        self.lib = _shim()
        if self.lib is None:
            self.refused = "no shim"
            return
        self.entry = _entry(self.lib.sdk_triton_launch_sym, name, self.state, nptr, self.nsize)

    def _load(self, names: list[str], grids: list[list[str]], when: str | None) -> None:
        if not 1 <= len(grids) <= 2 or (len(grids) == 2) != (when is not None):
            raise ValueError("a kernel and at most one alternative, with its condition")
        if len(names) > 62 or self.nptr + len(names) > 128:
            raise ValueError(f"{self.nptr} pointers and {len(names)} sizes")
        progs: list[list[int] | None] = [None] * 7
        for v, grid in enumerate(grids):
            if len(grid) != 3:
                raise ValueError(f"a grid of {len(grid)} axes")
            for a, axis in enumerate(grid):
                progs[3 * v + a] = program(axis, names)
        if when is not None:
            progs[6] = program(when, names, condition=True)
        code: list[int] = []
        self.state.nptr, self.state.nsize = self.nptr, len(names)
        for i, words in enumerate(progs):
            self.state.start[i] = -1 if words is None else len(code)
            code += words or []
        if len(code) > SYM_CODE:
            raise ValueError(f"size programs of {len(code)} words, over {SYM_CODE}")
        self.state.code[: len(code)] = code

    def plan(self, sizes: list[int]) -> tuple[int, tuple[int, int, int], int] | None:
        """What the shim computes for ``sizes``: (variant, grid, key), or None where it
        leaves the launch to Python (checked against the Python launcher's on any
        machine)."""
        out = (ctypes.c_int64 * 5)()
        args = (ctypes.c_int64 * max(1, len(sizes)))(*sizes)
        if not library().sdk_triton_sym_plan(ctypes.addressof(self.state), args, out):
            return None
        return out[0], (out[1], out[2], out[3]), out[4]

    def keys(self, variant: int) -> list[int]:
        """The specialization keys of ``variant`` the shim launches."""
        return list(self.state.keys[variant][: self.state.nkeys[variant]])

    def fill(self, variant: int, compiled: Any, args: tuple) -> None:
        """Take the kernel Triton compiled (and launched) for ``args`` (tensors, then sizes)
        as ``variant``'s state for their key; a kernel the shim cannot launch as Triton
        would, or a full table, keeps that key on the Python launcher."""
        if self.entry is None:
            return
        sizes = args[self.nptr :]
        if len(sizes) != self.nsize or not all(
            isinstance(a, torch.Tensor) for a in args[: self.nptr]
        ):
            return
        # (calls that may release the GIL come before the table's slot is chosen, so that
        # two threads never fill one slot)
        device = torch.cuda.current_device()
        context = _launch_context(self.lib, compiled, len(args))
        if context is None:
            return
        key, filled = spec_key(sizes), self.state.nkeys[variant]
        if filled >= SYM_KEYS or key in self.keys(variant):
            return
        st = self.state.states[variant][filled]
        st.device = device
        aligned = tuple(isinstance(a, torch.Tensor) and a.data_ptr() % 16 == 0 for a in args)
        _take(st, self._keep, compiled, context, aligned)
        self.state.keys[variant][filled] = key
        self.state.nkeys[variant] = filled + 1  # last: the shim launches this key from now on


#: the C side's chain limits, read from :data:`SHIM`
CHAIN_KERNELS, CHAIN_SCRATCH = (
    int(re.search(rf"#define CHAIN_{n} (\d+)", SHIM).group(1))  # type: ignore[union-attr]
    for n in ("KERNELS", "SCRATCH")
)


class _ChainState(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 - ctypes' declaration
        ("nkernels", ctypes.c_int64),
        ("kernels", ctypes.c_void_p * CHAIN_KERNELS),
        ("nscratch", ctypes.c_int64),
        ("scratch", ctypes.c_int64 * CHAIN_SCRATCH),
        ("context", ctypes.c_void_p),
        ("ready", ctypes.c_int64),
        ("launched", ctypes.c_int64),
    ]


#: every Chain of this process (tests count their launches)
made_chains: weakref.WeakSet[Chain] = weakref.WeakSet()


class Chain:
    """A split reduction's kernels (:mod:`.split`) as one entry of the runner: the shim
    launches them in order, each on the arguments then the chain's scratch buffers, once
    every kernel is launchable (loaded from its record or through Triton) and the scratch
    registered (:meth:`register`, by the Python launcher that allocated it). Until then, or
    in another context, the shim launches none of them and the Python launcher runs the
    chain. ``self.entry`` is None (and :attr:`refused` says why) where the shim cannot hold
    the chain."""

    def __init__(self, name: str, kernels: list[Native], nargs: int, nscratch: int) -> None:
        made_chains.add(self)
        self.name, self.kernels = name, kernels  # (the kernels' states stay alive)
        self.state = _ChainState()
        self.entry: sdk.NativeEntry | None = None
        self.refused = self._refusal(kernels, nargs, nscratch)
        if self.refused is not None:
            return
        self.lib = kernels[0].lib
        self.state.nkernels = len(kernels)
        for i, k in enumerate(kernels):
            self.state.kernels[i] = ctypes.addressof(k.state)
        self.entry = _entry(self.lib.sdk_triton_launch_chain, name, self.state, nargs)

    @staticmethod
    def _refusal(kernels: list[Native], nargs: int, nscratch: int) -> str | None:
        if not 1 <= len(kernels) <= CHAIN_KERNELS:
            return f"{len(kernels)} kernels, over the shim's {CHAIN_KERNELS}"
        if nscratch > CHAIN_SCRATCH:
            return f"{nscratch} scratch buffers, over the shim's {CHAIN_SCRATCH}"
        if nargs + nscratch > 128:
            return f"{nargs} arguments and {nscratch} scratch buffers: over 128"
        if any(k.lib is None for k in kernels):
            return "no shim"
        return None

    @classmethod
    def of(cls, name: str, calls: list[Any], nargs: int, nscratch: int) -> Chain | None:
        """The chain of a split reduction's kernel launchers (``launch.kernel_call``'s), or
        None where one has no shim state (the interpreter, no GPU)."""
        states = [getattr(call, "native_state", None) for call in calls]
        if not states or any(s is None for s in states):
            return None
        return cls(name, states, nargs, nscratch)

    def register(self, scratch: list[torch.Tensor]) -> None:
        """Take ``scratch`` (the buffers the Python launcher allocated, all on one CUDA
        device, and keeps as long as the chain) as the chain's, with their device's
        context; the first device's only: a chain on another device launches through
        Python."""
        if self.entry is None or self.state.ready or not scratch:
            return
        device = scratch[0].device
        if device.type != "cuda" or any(t.device != device for t in scratch):
            return
        context = ctypes.c_void_p()
        with torch.cuda.device(device):
            if self.lib.sdk_triton_context(ctypes.byref(context)) != 0 or not context.value:
                return
        self.state.nscratch = len(scratch)
        for i, t in enumerate(scratch):
            self.state.scratch[i] = t.data_ptr()
        self.state.context = context.value
        self.state.ready = 1  # last: the shim launches the chain from now on


def _entry(
    fn: Any, name: str, state: ctypes.Structure, nargs: int, nsizes: int = 0
) -> sdk.NativeEntry:
    """The runner's entry for the shim's function ``fn`` launching from ``state`` (a
    failed launch raises :func:`_launch_error` naming kernel ``name``)."""
    address = ctypes.cast(fn, ctypes.c_void_p).value
    assert address is not None
    return sdk.NativeEntry(
        address,
        nargs,
        nsizes,
        error=functools.partial(_launch_error, name),
        state=ctypes.addressof(state),
    )


def _set_aligned(state: _State, keep: list[Any], aligned: tuple[bool, ...]) -> None:
    """Which of ``state``'s arguments must be 16-byte aligned (the mask kept in ``keep``)."""
    mask = (ctypes.c_ubyte * max(1, len(aligned)))(*aligned)
    keep.append(mask)
    state.nargs = len(aligned)
    state.aligned = ctypes.addressof(mask)


def _launch_context(lib: Any, compiled: Any, nargs: int) -> int | None:
    """The current CUDA context, where the shim can launch ``compiled`` (Triton's kernel,
    loaded) on ``nargs`` arguments as Triton would; else None."""
    if not records.launchable(compiled.metadata):
        return None
    params = [k for k, ty in compiled.src.signature.items() if ty != "constexpr"]
    if len(params) != nargs:
        return None
    context = ctypes.c_void_p()
    if lib.sdk_triton_context(ctypes.byref(context)) != 0 or not context.value:
        return None
    return context.value


def _take(
    state: _State, keep: list[Any], compiled: Any, context: int, aligned: tuple[bool, ...]
) -> None:
    """Fill ``state`` from the kernel Triton compiled and loaded in ``context``, for
    arguments of which ``aligned`` says which are 16-byte aligned."""
    md = compiled.metadata
    _set_aligned(state, keep, aligned)
    state.context = context
    state.threads = 32 * md.num_warps
    state.shared = md.shared
    state.extra = int(hasattr(md, "global_scratch_size")) + int(hasattr(md, "profile_scratch_size"))
    state.function = compiled.function  # last: the shim launches from now on


_LOAD_ERRORS = {
    -1001: "the driver lacks a function the shim needs",
    -1002: "the kernel takes more threads per block than the device allows",
    -1003: "the kernel needs more shared memory than the device allows",
    -209: "no binary for this GPU (CUDA_ERROR_NO_BINARY_FOR_GPU)",
    -218: "invalid PTX or cubin (CUDA_ERROR_INVALID_PTX)",
    -200: "invalid image (CUDA_ERROR_INVALID_IMAGE)",
}


def counts() -> dict[str, Any]:
    """This process's kernels by how they became launchable: ``record``, those the shim
    loaded from their record; ``triton``, the times a kernel went through Triton's JIT path
    (compiled, or found in Triton's cache and loaded)."""
    return {
        "record": sum(1 for n in list(made) if n.from_record),
        "triton": records.triton_jit_count(),
        "triton_kernels": records.triton_jit_kernels(),  # which, and why
    }


def _launch_error(name: str) -> RuntimeError:
    return RuntimeError(f"cuLaunchKernel failed for Triton kernel {name}")
