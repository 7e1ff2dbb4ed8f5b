"""C entry points of Triton kernels, for the SDK's native runner (``sdk.NativeEntry``).

A small C shim, built once per machine by the host compiler (``sdk.toolchain``), launches a
kernel with the CUDA driver's ``cuLaunchKernel`` (found with ``dlsym`` in ``libcuda.so.1``:
no CUDA headers needed) from a state the plugin fills: the kernel's function handle, its
grid, threads (32 per warp), shared memory and the extra parameters Triton's kernels take
after their own (the global and profile scratch pointers, NULL: kernels that need scratch
get no entry). What torch's static launcher reads from the compiled kernel, read the same way.

The state is filled at the kernel's first launch, which goes through Triton (and compiles or
loads the kernel for the actual arguments); until then, and whenever another CUDA context is
current, the shim answers ``NOT_NATIVE`` and the runner launches through Python.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import weakref
from typing import Any

import sdk

_log = logging.getLogger(__name__)

#: what the shim returns when it cannot launch now (sdk.NativeEntry's convention)
NOT_NATIVE = sdk.NativeEntry.NOT_NATIVE

SHIM = r"""
#include <dlfcn.h>
#include <stdint.h>

typedef int (*launch_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**, void**);
typedef int (*context_fn)(void**);

struct sdk_triton_state {
  void* function;    /* CUfunction; NULL until the first launch through Triton */
  void* context;     /* the CUcontext the function belongs to */
  unsigned grid[3];
  unsigned threads;
  unsigned shared;
  int64_t extra;     /* NULL parameters after the kernel's own (scratch pointers) */
};

static launch_fn launch_kernel;
static context_fn current_context;

int64_t sdk_triton_init(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return 1;
  launch_kernel = (launch_fn)dlsym(lib, "cuLaunchKernel");
  current_context = (context_fn)dlsym(lib, "cuCtxGetCurrent");
  return launch_kernel == 0 || current_context == 0;
}

int64_t sdk_triton_context(void** out) { return current_context(out); }

int64_t sdk_triton_launch(const struct sdk_triton_state* s, void* stream, const intptr_t* args,
                          int64_t n) {
  intptr_t values[128];
  void* params[128];
  void* context = 0;
  int64_t total = n + s->extra;
  if (s->function == 0 || total > 128) return @NOT_NATIVE@;
  if (current_context(&context) != 0 || context != s->context) return @NOT_NATIVE@;
  for (int64_t i = 0; i < n; ++i) {
    values[i] = args[i];
    params[i] = &values[i];
  }
  for (int64_t i = n; i < total; ++i) {
    values[i] = 0;
    params[i] = &values[i];
  }
  return launch_kernel(s->function, s->grid[0], s->grid[1], s->grid[2], s->threads, 1, 1,
                       s->shared, stream, params, 0);
}
"""


class _State(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 - ctypes' declaration
        ("function", ctypes.c_void_p),
        ("context", ctypes.c_void_p),
        ("grid", ctypes.c_uint * 3),
        ("threads", ctypes.c_uint),
        ("shared", ctypes.c_uint),
        ("extra", ctypes.c_int64),
    ]


@functools.cache
def _shim() -> Any | None:
    """The built shim (its library), or None where it cannot be built or CUDA's driver
    library is missing (then every kernel launches through Python)."""
    from sdk import toolchain

    try:
        source = SHIM.replace("@NOT_NATIVE@", str(NOT_NATIVE))
        path = toolchain.compile_library(
            source,
            language="c",
            flags=("-O2", "-shared", "-fPIC", "-ldl"),
            namespace="cuda_triton-launch",
        )
        lib = toolchain.load_library(path)
        lib.sdk_triton_init.restype = ctypes.c_int64
        if lib.sdk_triton_init() != 0:
            return None
        lib.sdk_triton_context.restype = ctypes.c_int64
        lib.sdk_triton_context.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        return lib
    except Exception as exc:  # noqa: BLE001 - the Python launch path stays
        _log.info("cuda_triton: no native launches: %s", exc)
        return None


#: every kernel's Native of this process (tests count those the runner can launch)
made: weakref.WeakSet[Native] = weakref.WeakSet()


class Native:
    """One kernel's entry for the runner, and its state (filled by :meth:`fill`)."""

    def __init__(self, name: str, grid: tuple[int, int, int], nargs: int) -> None:
        made.add(self)
        lib = _shim()
        self.state = _State()
        self.state.grid[:] = grid
        self.entry: sdk.NativeEntry | None = None
        if lib is not None and nargs <= 100:
            self.lib = lib  # keeps the shim loaded while an entry points into it
            address = ctypes.cast(lib.sdk_triton_launch, ctypes.c_void_p).value
            assert address is not None
            self.entry = sdk.NativeEntry(
                address,
                nargs,
                error=functools.partial(_launch_error, name),
                state=ctypes.addressof(self.state),
            )

    def fill(self, compiled: Any, nargs: int) -> None:
        """Take the kernel Triton compiled (and loaded) at its first launch; a kernel the
        shim cannot launch as Triton would keeps launching through Python."""
        if self.entry is None or self.state.function:
            return
        md = compiled.metadata
        if (
            getattr(md, "num_ctas", 1) != 1
            or getattr(md, "launch_cooperative_grid", False)
            or getattr(md, "launch_pdl", False)
            or tuple(getattr(md, "cluster_dims", (1, 1, 1)) or (1, 1, 1)) not in ((1, 1, 1), ())
            or getattr(md, "global_scratch_size", 0)
            or getattr(md, "profile_scratch_size", 0)
        ):
            return
        params = [k for k, ty in compiled.src.signature.items() if ty != "constexpr"]
        if len(params) != nargs:
            return
        context = ctypes.c_void_p()
        if self.lib.sdk_triton_context(ctypes.byref(context)) != 0 or not context.value:
            return
        self.state.context = context.value
        self.state.threads = 32 * md.num_warps
        self.state.shared = md.shared
        self.state.extra = int(hasattr(md, "global_scratch_size")) + int(
            hasattr(md, "profile_scratch_size")
        )
        self.state.function = compiled.function  # last: the shim launches from now on

    @property
    def ready(self) -> bool:
        return bool(self.state.function)


def _launch_error(name: str) -> RuntimeError:
    return RuntimeError(f"cuLaunchKernel failed for Triton kernel {name}")
