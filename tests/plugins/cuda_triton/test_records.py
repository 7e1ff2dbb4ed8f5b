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
