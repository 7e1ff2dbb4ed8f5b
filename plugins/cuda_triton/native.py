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
  (``runner="python"``, split reductions) launches through the same shim (:meth:`Native.launch`);
* at the kernel's first launch through Triton (which compiles or loads the kernel for the
  actual arguments); the kernel's record is stored then, for later processes.

Until then, whenever another CUDA context is current, where a pointer Triton took as 16-byte
aligned is not, or where the record's cubin did not load (another arch: logged once), the
shim answers ``NOT_NATIVE`` and the kernel launches through Triton's Python path.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import weakref
from typing import Any

import torch

import sdk

from . import records

_log = logging.getLogger(__name__)

#: what the shim returns when it cannot launch now (sdk.NativeEntry's convention)
NOT_NATIVE = sdk.NativeEntry.NOT_NATIVE

SHIM = r"""
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

typedef int (*launch_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**, void**);
typedef int (*context_fn)(void**);
typedef int (*module_load_fn)(void**, const void*);
typedef int (*get_function_fn)(void**, void*, const char*);
typedef int (*func_get_fn)(int*, int, void*);
typedef int (*func_set_fn)(void*, int, int);
typedef int (*cache_config_fn)(void*, int);
typedef int (*context_device_fn)(int*);
typedef int (*device_attribute_fn)(int*, int, int);
typedef int (*pointer_attribute_fn)(void*, int, unsigned long long);
typedef int (*device_get_fn)(int*, int);
typedef int (*primary_retain_fn)(void**, int);
typedef int (*set_context_fn)(void*);

struct sdk_triton_state {
  void* function;    /* CUfunction; NULL until loaded (from the image, or through Triton) */
  void* context;     /* the CUcontext the function belongs to */
  unsigned grid[3];
  unsigned threads;
  unsigned shared;
  int64_t extra;     /* NULL parameters after the kernel's own (scratch pointers) */
  const void* image; /* the kernel's cubin (its record), or NULL */
  const char* name;  /* the kernel's function in the image */
  int64_t status;    /* the image's load: 0 not tried, 1 loaded, else -(CUresult) or -1000-n */
  int64_t nargs;     /* the kernel's own parameters, when aligned is set */
  const unsigned char* aligned; /* per parameter: must be 16-byte aligned, or NULL */
  int64_t device;    /* the ordinal of the device the kernel was bound for, or -1 */
};

static launch_fn launch_kernel;
static context_fn current_context;
static module_load_fn module_load;
static get_function_fn get_function;
static func_get_fn func_get;
static func_set_fn func_set;
static cache_config_fn cache_config;
static context_device_fn context_device;
static device_attribute_fn device_attribute;
static pointer_attribute_fn pointer_attribute;
static device_get_fn device_get;
static primary_retain_fn primary_retain;
static set_context_fn set_context;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

int64_t sdk_triton_init(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return 1;
  launch_kernel = (launch_fn)dlsym(lib, "cuLaunchKernel");
  current_context = (context_fn)dlsym(lib, "cuCtxGetCurrent");
  module_load = (module_load_fn)dlsym(lib, "cuModuleLoadData");
  get_function = (get_function_fn)dlsym(lib, "cuModuleGetFunction");
  func_get = (func_get_fn)dlsym(lib, "cuFuncGetAttribute");
  func_set = (func_set_fn)dlsym(lib, "cuFuncSetAttribute");
  cache_config = (cache_config_fn)dlsym(lib, "cuFuncSetCacheConfig");
  context_device = (context_device_fn)dlsym(lib, "cuCtxGetDevice");
  device_attribute = (device_attribute_fn)dlsym(lib, "cuDeviceGetAttribute");
  pointer_attribute = (pointer_attribute_fn)dlsym(lib, "cuPointerGetAttribute");
  device_get = (device_get_fn)dlsym(lib, "cuDeviceGet");
  primary_retain = (primary_retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
  set_context = (set_context_fn)dlsym(lib, "cuCtxSetCurrent");
  return launch_kernel == 0 || current_context == 0;
}

int64_t sdk_triton_context(void** out) { return current_context(out); }

/* CUDA's enums (cuda.h), and Triton's (its driver.c) */
#define FUNC_MAX_THREADS_PER_BLOCK 0
#define FUNC_SHARED_SIZE_BYTES 1
#define FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define FUNC_SHARED_MEMORY_MODE 17
#define SHARED_MEMORY_MODE_ALLOW_OVERSIZED 3
#define DEVICE_MAX_SHARED_PER_MULTIPROCESSOR 81
#define DEVICE_MAX_SHARED_PER_BLOCK_OPTIN 97
#define FUNC_CACHE_PREFER_SHARED 1

/* Triton's loadBinary: the module, its function, and shared memory over 48 KB opted in */
static int64_t load_image(struct sdk_triton_state* s, void* context) {
  void* module = 0;
  void* function = 0;
  int rc, max_threads = 0, device = 0, optin = 0;
  if (!module_load || !get_function || !func_get || !context_device || !device_attribute)
    return -1001;
  if ((rc = module_load(&module, s->image)) != 0) return -rc;
  if ((rc = get_function(&function, module, s->name)) != 0) return -rc;
  if ((rc = func_get(&max_threads, FUNC_MAX_THREADS_PER_BLOCK, function)) != 0) return -rc;
  if ((unsigned)max_threads < s->threads) return -1002;
  if (s->shared > 49152) {
    if ((rc = context_device(&device)) != 0) return -rc;
    if ((rc = device_attribute(&optin, DEVICE_MAX_SHARED_PER_BLOCK_OPTIN, device)) != 0)
      return -rc;
    if ((unsigned)optin < s->shared || !func_set) return -1003;
    if (func_set(function, FUNC_SHARED_MEMORY_MODE, SHARED_MEMORY_MODE_ALLOW_OVERSIZED) != 0) {
      int total = 0, fixed = 0;
      if (!cache_config || (rc = cache_config(function, FUNC_CACHE_PREFER_SHARED)) != 0)
        return rc ? -rc : -1003;
      if ((rc = device_attribute(&total, DEVICE_MAX_SHARED_PER_MULTIPROCESSOR, device)) != 0)
        return -rc;
      if ((rc = func_get(&fixed, FUNC_SHARED_SIZE_BYTES, function)) != 0) return -rc;
      if ((rc = func_set(function, FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - fixed)) != 0)
        return -rc;
    }
  }
  s->context = context;
  __atomic_store_n(&s->function, function, __ATOMIC_RELEASE); /* last: launchable now */
  return 1;
}

#define POINTER_DEVICE_ORDINAL 9

/* No context current on this thread (one CUDA's runtime has not used yet: autograd's
   backward thread at its first kernel): the primary context of the kernel's device made
   current, as Triton's loadBinary does, where an argument is memory of that device; else
   NULL, and nothing changed */
static void* primary_context(const struct sdk_triton_state* s, const intptr_t* args,
                             int64_t n) {
  int ordinal = -1, device = 0;
  void* context = 0;
  if (s->device < 0 || !pointer_attribute || !device_get || !primary_retain || !set_context)
    return 0;
  for (int64_t i = 0; i < n && ordinal < 0; ++i)
    if (pointer_attribute(&ordinal, POINTER_DEVICE_ORDINAL, (unsigned long long)args[i]) != 0)
      ordinal = -1;
  if (ordinal != s->device) return 0;
  if (device_get(&device, ordinal) != 0 || primary_retain(&context, device) != 0) return 0;
  if (context == 0 || set_context(context) != 0) return 0;
  return context;
}

int64_t sdk_triton_launch(struct sdk_triton_state* s, void* stream, const intptr_t* args,
                          int64_t n) {
  intptr_t values[128];
  void* params[128];
  void* context = 0;
  int64_t total = n + s->extra;
  if (total > 128) return @NOT_NATIVE@;
  if (current_context(&context) != 0) return @NOT_NATIVE@;
  if (context == 0 && (context = primary_context(s, args, n)) == 0) return @NOT_NATIVE@;
  if (__atomic_load_n(&s->function, __ATOMIC_ACQUIRE) == 0) {
    if (s->image == 0) return @NOT_NATIVE@;
    pthread_mutex_lock(&load_lock);
    if (s->function == 0 && s->status == 0) s->status = load_image(s, context);
    pthread_mutex_unlock(&load_lock);
    if (__atomic_load_n(&s->function, __ATOMIC_ACQUIRE) == 0) return @NOT_NATIVE@;
  }
  if (context != s->context) return @NOT_NATIVE@;
  if (s->aligned) {
    if (n != s->nargs) return @NOT_NATIVE@;
    for (int64_t i = 0; i < n; ++i)
      if (s->aligned[i] && (args[i] & 15) != 0) return @NOT_NATIVE@;
  }
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
        ("image", ctypes.c_void_p),
        ("name", ctypes.c_char_p),
        ("status", ctypes.c_int64),
        ("nargs", ctypes.c_int64),
        ("aligned", ctypes.c_void_p),
        ("device", ctypes.c_int64),
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
        lib.sdk_triton_launch.restype = ctypes.c_int64
        lib.sdk_triton_launch.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_int64,
        ]
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
            address = ctypes.cast(self.lib.sdk_triton_launch, ctypes.c_void_p).value
            assert address is not None
            self.entry = sdk.NativeEntry(
                address,
                nargs,
                error=functools.partial(_launch_error, name),
                state=ctypes.addressof(self.state),
            )

    def _set_aligned(self, aligned: tuple[bool, ...]) -> None:
        mask = (ctypes.c_ubyte * max(1, len(aligned)))(*aligned)
        self._keep.append(mask)
        self.state.nargs = len(aligned)
        self.state.aligned = ctypes.addressof(mask)

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
        self._set_aligned(rec.aligned)
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
        md = compiled.metadata
        if not records.launchable(md):
            return
        if not all(isinstance(a, torch.Tensor) for a in args):
            return
        params = [k for k, ty in compiled.src.signature.items() if ty != "constexpr"]
        if len(params) != len(args) or len(args) != self.nargs:
            return
        context = ctypes.c_void_p()
        if self.lib.sdk_triton_context(ctypes.byref(context)) != 0 or not context.value:
            return
        aligned = tuple(a.data_ptr() % 16 == 0 for a in args)
        self._set_aligned(aligned)
        self.state.context = context.value
        self.state.threads = 32 * md.num_warps
        self.state.shared = md.shared
        self.state.extra = int(hasattr(md, "global_scratch_size")) + int(
            hasattr(md, "profile_scratch_size")
        )
        self.state.function = compiled.function  # last: the shim launches from now on
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
