"""cuda_triton's kernel records (plugins/cuda_triton/records.py) without a GPU.

Triton compiles for a CUDA target on any machine (its bundled ptxas makes the cubin), so a
record is made from a real ``triton.compile`` here, stored in the SDK's disk cache and read
back as a later process would. The shim that loads a record's cubin is compiled (not run: no
driver here); tests/gpu/test_warm_cubin_gpu.py runs it.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

triton = pytest.importorskip("triton")

from sdk.cache import DiskCache  # noqa: E402
from sdk.plugins.cuda_triton import native, records  # noqa: E402

SOURCE = """
import triton.language as tl


def add_kernel(x, y, out, N: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < N
    tl.store(out + i, tl.load(x + i, mask=mask) + tl.load(y + i, mask=mask), mask=mask)
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """``add_kernel`` compiled by Triton for an sm_90 GPU (no GPU needed; a ``JITFunction``
    made directly: ``@triton.jit`` gives the interpreter's under ``TRITON_INTERPRET=1``)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    root = tmp_path_factory.mktemp("compile")
    path = root / "records_add_kernel.py"  # Triton reads the function's source from its file
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("records_add_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(root / "triton"))
        fn = JITFunction(mod.add_kernel)
        src = ASTSource(
            fn,
            signature={
                "x": "*fp32",
                "y": "*fp32",
                "out": "*fp32",
                "N": "constexpr",
                "BLOCK": "constexpr",
            },
            constexprs={"N": 1000, "BLOCK": 256},
        )
        return triton.compile(
            src,
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": 4, "enable_fp_fusion": True},
        )


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    return tmp_path


def test_a_real_cuda_compile_gives_a_record_of_its_cubin_and_launch(compiled):
    k = compiled
    rec = records.from_compiled(k, (4, 1, 1), (True, True, False))
    assert rec is not None
    assert rec.cubin == k.asm["cubin"] and rec.cubin.startswith(b"\x7fELF")
    assert rec.name == k.metadata.name == "add_kernel"
    assert rec.name.encode() in rec.cubin  # the symbol cuModuleGetFunction looks up
    assert (rec.num_warps, rec.threads, rec.shared) == (4, 128, k.metadata.shared)
    assert rec.signature == ("*fp32", "*fp32", "*fp32") and rec.nargs == 3
    assert rec.extra == 2  # Triton 3.x passes global and profile scratch pointers
    assert (rec.arch, rec.grid, rec.triton) == (90, (4, 1, 1), triton.__version__)
    assert rec.aligned == (True, True, False)
    # an argument count that is not the kernel's: no record (the shim would pass garbage)
    assert records.from_compiled(k, (4, 1, 1), (True, True)) is None


def test_a_record_round_trips_through_the_disk_cache(cache, compiled):
    rec = records.from_compiled(compiled, (4, 1, 1), (True, True, True))
    assert rec is not None
    key = records.key(
        SOURCE,
        "add_kernel",
        {"N": 1000, "BLOCK": 256, "num_warps": 4},
        (4, 1, 1),
        ("float32",) * 3,
        "dev",
    )
    assert records.load(key, 90) is None  # nothing stored yet
    records.save(key, rec)
    assert records.load(key, 90) == rec
    # a device of another arch does not load it: Triton compiles for that device instead
    assert records.load(key, 80) is None
    # a record of another Triton is not used
    records.save(key, dataclasses.replace(rec, triton="0.0"))
    assert records.load(key, 90) is None


def test_a_damaged_record_is_refused(cache, compiled):
    rec = records.from_compiled(compiled, (4, 1, 1), (True, True, True))
    data = bytearray(rec.to_bytes())
    data[-100] ^= 1  # one bit of the cubin
    with pytest.raises(ValueError, match="cubin does not match"):
        records.KernelRecord.from_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a kernel record"):
        records.KernelRecord.from_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    # stored damaged (the disk cache's own checksum passes): read as a miss
    DiskCache(records.NAMESPACE).put("k", bytes(data))
    assert records.load("k", 90) is None


def test_record_keys_change_with_what_the_compile_depends_on():
    base = dict(
        source=SOURCE,
        entry="add_kernel",
        kw={"N": 1000, "BLOCK": 256, "num_warps": 4},
        grid=(4, 1, 1),
        dtypes=("float32",) * 3,
        device="dev",
    )
    changed = [
        {"source": SOURCE + "\n"},
        {"entry": "other"},
        {"kw": {"N": 1000, "BLOCK": 256, "num_warps": 8}},
        {"kw": {"N": 1000, "BLOCK": 128, "num_warps": 4}},
        {"grid": (8, 1, 1)},
        {"dtypes": ("bfloat16",) * 3},
        {"device": "another device"},
    ]
    keys = {records.key(**base)} | {records.key(**{**base, **c}) for c in changed}
    assert len(keys) == 1 + len(changed)
    # the device part: the plugin's key (Triton, device model, sources) and Triton's env
    assert records.device_key("a") != records.device_key("b")


def test_the_shim_that_loads_records_compiles(cache):
    """The C shim (cuModuleLoadData, cuModuleGetFunction, cuFuncSetAttribute through dlsym)
    builds with the host compiler; its symbols are there."""
    from sdk import toolchain

    path = toolchain.compile_library(
        native.SHIM.replace("@NOT_NATIVE@", str(native.NOT_NATIVE)),
        language="c",
        flags=("-O2", "-shared", "-fPIC", "-ldl", "-Wall", "-Werror"),
        namespace="cuda_triton-launch-test",
    )
    lib = toolchain.load_library(path)
    for name in ("sdk_triton_init", "sdk_triton_launch", "sdk_triton_context"):
        assert getattr(lib, name)


# -- the shim's loading, against a driver of the test's own --------------------------------

#: the driver entry points the shim finds with dlsym, recording what they were asked: a
#: cubin is accepted when it starts with ELF's magic, its function is "k"; the context
#: current is the test's to set
FAKE_DRIVER = r"""
#include <stdint.h>
#include <string.h>
void* current;
int loads, launches, set_attributes, last_threads, last_shared;
intptr_t last_params[4];
int retains;
int cuCtxGetCurrent(void** c) { *c = current; return 0; }
int cuCtxGetDevice(int* d) { *d = 0; return 0; }
/* memory at 0x100000 and up is device 1's, below it device 0's; 0x40 is no device memory */
int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr) {
  if (attribute != 9 || ptr == 0x40) return 1;
  *(int*)data = ptr >= 0x100000;
  return 0;
}
int cuDeviceGet(int* d, int ordinal) { *d = ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int device) { ++retains; *c = (void*)(0x300 + device); return 0; }
int cuCtxSetCurrent(void* c) { current = c; return 0; }
int cuModuleLoadData(void** m, const void* image) {
  ++loads;
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200; /* CUDA_ERROR_INVALID_IMAGE */
  *m = (void*)0x10;
  return 0;
}
int cuModuleGetFunction(void** f, void* m, const char* name) {
  if (strcmp(name, "k") != 0) return 500;
  *f = (void*)0x20;
  return 0;
}
int cuFuncGetAttribute(int* v, int attribute, void* f) { *v = attribute == 0 ? 1024 : 0; return 0; }
int cuFuncSetAttribute(void* f, int attribute, int value) { ++set_attributes; return 0; }
int cuFuncSetCacheConfig(void* f, int config) { return 0; }
int cuDeviceGetAttribute(int* v, int attribute, int device) {
  *v = attribute == 97 ? 232448 : 0; /* an H100's opt-in shared memory per block */
  return 0;
}
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned tx, unsigned ty,
                   unsigned tz, unsigned shared, void* stream, void** params, void** extra) {
  ++launches;
  last_threads = tx;
  last_shared = shared;
  for (int i = 0; i < 4; ++i) last_params[i] = *(intptr_t*)params[i]; /* the test's 2 + 2 */
  return 0;
}
"""

SHIM_CHILD = r"""
import ctypes, json, sys
from sdk.plugins.cuda_triton import native, records

fake = ctypes.CDLL("libcuda.so.1")
assert native._shim() is not None
lib = native._shim()
out = {}


def launch(n, args, ctx):
    ctypes.c_void_p.in_dll(fake, "current").value = ctx
    ptrs = (ctypes.c_int64 * len(args))(*args)
    return lib.sdk_triton_launch(ctypes.addressof(n.state), None, ptrs, len(args))


def count(name):
    return ctypes.c_int.in_dll(fake, name).value


rec = records.KernelRecord(
    name="k", cubin=b"\x7fELF" + b"\0" * 60, threads=128, num_warps=4, shared=65536, extra=2,
    grid=(4, 1, 1), signature=("*fp32", "*fp32"), aligned=(True, False), arch=90,
    triton="x", hash="h",
)
n = native.Native("k", (4, 1, 1), 2)
out["adopted"] = n.adopt(rec)
out["no_context"] = launch(n, [4096, 8192], 0)  # nothing current: nothing loaded
out["first"] = launch(n, [4096, 8193], 0x100)  # loads in context 0x100, then launches
out["second"] = launch(n, [8192, 3], 0x100)
out["other_context"] = launch(n, [4096, 8192], 0x200)
out["unaligned"] = launch(n, [4100, 8192], 0x100)  # Triton took argument 0 as aligned
out["loads"], out["launches"] = count("loads"), count("launches")
out["set_attributes"] = count("set_attributes")  # shared memory over 48 KB opted in
out["threads"], out["shared"] = count("last_threads"), count("last_shared")
out["params"] = list((ctypes.c_int64 * 4).in_dll(fake, "last_params"))
out["from_record"] = n.from_record
out["why_unaligned"] = n.not_launched((4100, 8192))
out["why_context"] = n.not_launched((4096, 8192))
other = native.Native("k", (8, 1, 1), 2)
out["other_grid"] = [other.adopt(rec), other.refused]

bad = native.Native("k", (4, 1, 1), 2)
bad.adopt(records.KernelRecord(**{**rec.__dict__, "cubin": b"not a cubin", "shared": 0}))
out["bad_first"] = launch(bad, [4096, 8192], 0x100)
out["bad_again"] = launch(bad, [4096, 8192], 0x100)  # not loaded again
out["bad_loads"] = count("loads") - out["loads"]
out["bad_status"] = bad.state.status
out["bad_from_record"] = bad.from_record

# no context current (a thread the runtime has not used): device 0's primary context made
# current where an argument is device 0's memory, not where none is, nor for another device
on0 = native.Native("k", (4, 1, 1), 2)
on0.adopt(rec, 0)
out["none_elsewhere"] = launch(on0, [0x100000, 0x100010], 0)  # device 1's memory
out["none_elsewhere_current"] = ctypes.c_void_p.in_dll(fake, "current").value
out["none_scalar"] = launch(on0, [0x40, 0x40], 0)
out["none_primary"] = launch(on0, [0x40, 4096], 0)  # the second argument: device 0's
out["primary_current"] = ctypes.c_void_p.in_dll(fake, "current").value
out["retains"] = count("retains")
unbound = native.Native("k", (4, 1, 1), 2)
unbound.adopt(rec)  # no device given: never made current
out["unbound"] = launch(unbound, [4096, 8192], 0)
out["why_bad"] = bad.not_launched((4096, 8192))
print("INFO " + json.dumps(out))
"""


def test_the_shim_loads_a_record_once_in_the_current_context(cache, tmp_path):
    """The shim against a driver of the test's own (named libcuda.so.1, found first): the
    record's cubin is loaded at the first launch with a context current, in that context,
    once; launches then pass the record's threads, shared memory and NULL scratch pointers;
    another context or an unaligned pointer Triton took as aligned is NOT_NATIVE (Triton's
    path); a cubin the driver refuses is tried once, then NOT_NATIVE with its status; with no
    context current, the kernel's device's primary context is made current where an argument
    is that device's memory (autograd's backward thread at its first kernel)."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    from sdk import toolchain

    built = toolchain.compile_library(
        FAKE_DRIVER, language="c", flags=("-O0", "-shared", "-fPIC"), namespace="test-fake-cuda"
    )
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy(built, libdir / "libcuda.so.1")
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "SDK_CACHE_DIR": str(tmp_path / "sdk"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SHIM_CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("INFO "))[5:])
    not_native = native.NOT_NATIVE
    assert got["adopted"]
    assert got["no_context"] == not_native
    assert (got["first"], got["second"]) == (0, 0)
    assert (got["other_context"], got["unaligned"]) == (not_native, not_native)
    assert (got["loads"], got["launches"]) == (1, 2)
    assert got["set_attributes"] == 1
    assert (got["threads"], got["shared"]) == (128, 65536)
    assert got["params"] == [8192, 3, 0, 0]  # the kernel's two, then two NULL scratch pointers
    assert got["from_record"]
    assert (got["bad_first"], got["bad_again"]) == (not_native, not_native)
    assert got["bad_loads"] == 1 and got["bad_status"] == -200
    assert not got["bad_from_record"]
    # what the warm-start count says of each kernel that went through Triton after all
    assert got["why_unaligned"].startswith("argument 0 is not 16-byte aligned"), got
    assert got["why_context"].startswith("another CUDA context"), got
    assert got["why_bad"] == "its cubin did not load (CUresult -200)", got
    assert got["other_grid"] == [False, "the record's grid is (4, 1, 1), the launch's (8, 1, 1)"]
    assert (got["none_elsewhere"], got["none_scalar"]) == (not_native, not_native)
    assert not got["none_elsewhere_current"]  # nothing made current for another device
    assert (got["none_primary"], got["primary_current"], got["retains"]) == (0, 0x300, 1)
    assert got["unbound"] == not_native
