"""Run time, for wrapper plugins (CUDA graphs): when a step begins, and the storages and
reference counts of tensors handed out over memory a wrapper keeps (``sdk.runtime``, through
the private-torch seam: ``core/adapters/torch_private.py`` re-exports these)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

#: torch's check of many tensors' addresses in one call (CUDA builds), looked up once
_PTRS_EQUAL = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def step_token() -> tuple[int, int]:
    """``(compiled calls, mark-step calls)``: Dynamo counts each call of a torch.compile'd
    function (``GenerationTracker.generation``, the counter Inductor's CUDA-graph trees
    read; a backward does not count), and ``torch.compiler.cudagraph_mark_step_begin()``
    counts down ``MarkStepBox.mark_step_counter``."""
    if not _STEP:  # imported at first use: cudagraph_trees pulls in much of Inductor
        from torch._dynamo.mutation_guard import GenerationTracker
        from torch._inductor.cudagraph_trees import MarkStepBox

        _STEP.extend((GenerationTracker, MarkStepBox))
    gen, mark = _STEP
    return gen.generation, mark.mark_step_counter


_STEP: list[Any] = []


def storage_weakref(storage: torch.UntypedStorage) -> Any:
    """A weak reference to ``storage``; its ``cdata`` is for :func:`use_counters`."""
    return StorageWeakRef(storage)


def storage_new_alias() -> Callable[[int, torch.device, int], torch.UntypedStorage]:
    """``(data_ptr, device, nbytes) -> storage``: a storage object over that memory, owning
    none of it."""
    return torch._C._construct_storage_from_data_pointer


def storage_impl(storage: torch.UntypedStorage) -> int:
    """The address of ``storage``'s StorageImpl, for :func:`use_counters`' storage count
    (valid while something holds the storage)."""
    return storage._cdata


def use_counters() -> tuple[Callable[[torch.Tensor], int], Callable[[int], int]]:
    """``(tensor_count, storage_count)``: how many C++ references hold a tensor (views,
    autograd's saved tensors; Python references do not count), ``tensor_count(t)``, and how
    many hold a storage (tensors over it, views included, and Python storage objects),
    ``storage_count(storage_impl(s))`` or ``storage_count(storage_weakref(s).cdata)``. The
    functions themselves, for loops over many tensors."""
    return torch.Tensor._use_count, torch._C._storage_Use_Count


def cuda_tensor_constructor() -> (
    Callable[[dict[str, Any], torch.UntypedStorage], torch.Tensor] | None
):
    """``(metadata, storage) -> tensor`` in one C++ call: a tensor of the CUDA dispatch key over
    ``storage`` with ``metadata``'s ``size``, ``stride``, ``storage_offset`` and ``dtype``
    (Inductor's CUDA-graph trees rebuild their outputs with it). None where this build of
    torch lacks it (CPU builds)."""
    return getattr(torch._C, "_construct_CUDA_Tensor_From_Storage_And_Metadata", None)


def data_ptrs_equal(tensors: list[Any], ptrs: list[int], at: list[int]) -> bool:
    """Is ``tensors[i].data_ptr() == ptrs[i]`` for every ``i`` in ``at``? (``ptrs`` is
    indexed like ``tensors``.) One C++ call where torch has it (CUDA builds)."""
    if _PTRS_EQUAL is not None:
        return bool(_PTRS_EQUAL(tensors, ptrs, at))
    return all(tensors[i].data_ptr() == ptrs[i] for i in at)


def set_access_error(t: torch.Tensor, message: str) -> bool:
    """Make every later access to ``t``'s storage raise ``message``; False where this torch
    cannot (the call exists in CUDA builds only)."""
    fn = getattr(torch._C, "_set_storage_access_error_msg", None)
    if fn is None:
        return False
    fn(t, message)
    return True
