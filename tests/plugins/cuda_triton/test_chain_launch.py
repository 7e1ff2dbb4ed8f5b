"""A split reduction's kernels as one entry of the native runner (``native.Chain``): what the
shim refuses before it touches the CUDA driver, on any machine. The launches themselves are
tests/gpu/test_runner_gpu.py's (``test_split_reductions_launch_natively_as_chains``)."""

from __future__ import annotations

import ctypes
import types

import pytest

pytest.importorskip("triton")

from sdk.plugins.cuda_triton import native  # noqa: E402


def _launch_chain(state: native._ChainState, n: int) -> int:
    try:
        lib = native.library()
    except Exception as exc:  # noqa: BLE001 - a machine without a C compiler
        pytest.skip(f"the shim cannot be built here: {exc}")
    fn = lib.sdk_triton_launch_chain
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
    args = (ctypes.c_int64 * max(1, n))()
    return fn(ctypes.addressof(state), None, args, n)


def test_a_chain_launches_nothing_until_its_scratch_is_registered():
    state = native._ChainState()
    state.nkernels = 2
    assert _launch_chain(state, 3) == native.NOT_NATIVE
    assert state.launched == 0


@pytest.mark.parametrize(
    ("field", "value", "n"),
    [
        ("nkernels", native.CHAIN_KERNELS + 1, 3),
        ("nkernels", 0, 3),
        ("nscratch", native.CHAIN_SCRATCH + 1, 3),
        ("nscratch", 2, 127),  # 129 parameters
        ("nscratch", -1, 3),
    ],
)
def test_a_chain_out_of_the_shims_limits_is_not_launched(field, value, n):
    state = native._ChainState()
    state.nkernels, state.nscratch, state.ready = 1, 1, 1
    setattr(state, field, value)
    assert _launch_chain(state, n) == native.NOT_NATIVE
    assert state.launched == 0


def test_a_chain_the_shim_cannot_hold_has_no_entry_and_says_why():
    shim = types.SimpleNamespace(lib=object(), state=native._State())
    many = native.Chain("k", [shim] * (native.CHAIN_KERNELS + 1), 4, 2)
    assert many.entry is None and f"over the shim's {native.CHAIN_KERNELS}" in many.refused
    wide = native.Chain("k", [shim, shim], 120, 9)
    assert wide.entry is None and "over 128" in wide.refused
    none = native.Chain("k", [types.SimpleNamespace(lib=None, state=native._State())], 4, 2)
    assert none.entry is None and none.refused == "no shim"
    none.register([])  # nothing to register, nothing raised
