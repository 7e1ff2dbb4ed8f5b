"""The Triton-CUDA plugin: renders loop-IR kernels to Triton and launches them.

With ``TRITON_INTERPRET=1`` Triton runs kernels on CPU tensors; the plugin then
accepts CPU graphs, which is how CI checks its generated code without a GPU.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

import sdk

__version__ = "0.1.0"


_ATOMIC = "CUDA's kernel adds with atomics: the order of the additions, and so the rounding, changes from run to run"
_WRITES = "CUDA's kernel writes duplicate indices in no fixed order"

#: ATen ops whose CUDA kernels may give other bits from run to run (torch's documentation of
#: ``torch.use_deterministic_algorithms``, and embedding_dense_backward measured on an H200:
#: a 32-row table under 262,144 indices). The kernels this plugin generates are
#: deterministic: none of them adds with atomics, and a split reduction sums its partials
#: in a second kernel, in order.
NONDETERMINISTIC_OPS = {
    "aten.index_add": _ATOMIC,
    "aten.scatter_add": _ATOMIC,
    "aten.scatter_reduce": _ATOMIC,
    "aten.put": _ATOMIC,
    "aten.index_copy": _WRITES,
    "aten.scatter": _WRITES,
    "aten.embedding_dense_backward": _ATOMIC,
    "aten._embedding_bag_backward": _ATOMIC,
    "aten._embedding_bag_dense_backward": _ATOMIC,
    "aten.upsample_linear1d_backward": _ATOMIC,
    "aten.upsample_bilinear2d_backward": _ATOMIC,
    "aten.upsample_bicubic2d_backward": _ATOMIC,
    "aten.upsample_trilinear3d_backward": _ATOMIC,
    "aten._adaptive_avg_pool2d_backward": _ATOMIC,
    "aten._adaptive_avg_pool3d_backward": _ATOMIC,
    "aten.adaptive_max_pool2d_backward": _ATOMIC,
    "aten.avg_pool3d_backward": _ATOMIC,
    "aten.max_pool3d_with_indices_backward": _ATOMIC,
    "aten.fractional_max_pool2d_backward": _ATOMIC,
    "aten.fractional_max_pool3d_backward": _ATOMIC,
    "aten.reflection_pad1d_backward": _ATOMIC,
    "aten.reflection_pad2d_backward": _ATOMIC,
    "aten.reflection_pad3d_backward": _ATOMIC,
    "aten.replication_pad1d_backward": _ATOMIC,
    "aten.replication_pad2d_backward": _ATOMIC,
    "aten.replication_pad3d_backward": _ATOMIC,
    "aten.grid_sampler_2d_backward": _ATOMIC,
    "aten.grid_sampler_3d_backward": _ATOMIC,
    "aten.nll_loss2d_forward": _ATOMIC,
    "aten._ctc_loss_backward": _ATOMIC,
    "aten._scaled_dot_product_efficient_attention_backward": _ATOMIC,
    # (measured on an H200, bf16, causal, fwd+bwd twice on the same inputs: flash attention's
    # gradients differed at 8x12x512x64 and 16x16x1024x64, cuDNN's at 16x16x1024x64; and a
    # bf16 GPT-2 step's gradients differed run to run through cuDNN's)
    "aten._scaled_dot_product_flash_attention_backward": (
        "flash attention's backward adds the query gradient with atomics (measured on an "
        "H200), as in eager; torch.use_deterministic_algorithms(True) takes its deterministic "
        "mode"
    ),
    "aten._scaled_dot_product_cudnn_attention_backward": (
        "cuDNN's attention backward gives other bits from run to run (measured on an H200); "
        "torch.use_deterministic_algorithms(True) takes another attention kernel"
    ),
    "aten.histc": _ATOMIC,
    "aten.bincount": _ATOMIC,
    "aten.cumsum": "CUDA's scan of floating values sums in an order that depends on the launch",
    # (measured on an H200: a BatchNorm convnet's first weight gradient, as in eager)
    "aten.convolution_backward": (
        "cuDNN's backward algorithms, chosen by its heuristics, may add with atomics, as in "
        "eager; torch.backends.cudnn.deterministic = True (or "
        "torch.use_deterministic_algorithms(True)) selects deterministic ones"
    ),
}


def interpreting() -> bool:
    return sdk.plugin.environment_variable("TRITON_INTERPRET") == "1"


@sdk.hookimpl
def sdk_plugin_info() -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name="cuda_triton",
        version=__version__,
        hook_api=8,
        device_types=("cuda", "cpu") if interpreting() else ("cuda",),
        kind=sdk.PluginKind.CODEGEN,
        capabilities=frozenset(
            {
                sdk.Capability.REDUCTIONS,
                sdk.Capability.MULTI_STAGE,
                sdk.Capability.SYMBOLIC_SIZES,
            }
        ),
        description="Triton kernels on NVIDIA GPUs (CPU tensors under TRITON_INTERPRET=1)",
        # (under the interpreter, the graphs run on the CPU)
        nondeterministic_ops={} if interpreting() else NONDETERMINISTIC_OPS,
    )


#: Channels-last activations in training graphs too. Column reductions split by the grid's size
#: (heuristics.SPLIT_BY_GRID): BatchNorm's statistics over channels-last activations cost about
#: what they do over NCHW (BENCHMARKS.md, "Issues 48 and 49, fourth session"). Read once, when
#: the plugin loads (``sdk_preferences``): setting it later changes no compile; one compile
#: takes ``options={"channels_last": False}``.
CHANNELS_LAST_TRAINING = True


@sdk.hookimpl
def sdk_preferences() -> sdk.Preferences:
    return sdk.Preferences(
        # cuDNN: NHWC kernels, and a bias in the call is a separate, slower kernel
        channels_last=True,
        channels_last_training=CHANNELS_LAST_TRAINING,
        conv_bias_in_kernel=True,
        mm_bias_in_kernel=True,
        # sin/exp/erf run on the special-function units
        cheap_transcendentals=True,
    )


@sdk.hookimpl
def sdk_plugin_status() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return (
            "Triton is not installed; pip install 'torch-backend-sdk[triton]' "
            "(or pip install triton)"
        )
    if interpreting():
        return None
    if not torch.cuda.is_available():
        return (
            "no CUDA device visible (torch.cuda.is_available() is False); run on a machine "
            "with an NVIDIA GPU, or set TRITON_INTERPRET=1 to run kernels on CPU tensors"
        )
    return None


@sdk.hookimpl
def sdk_cache_key(ctx: sdk.CompileContext) -> str | None:
    """Triton's version, the device model (or the interpreter) and this plugin's sources."""
    if interpreting():
        return _cache_key("interpreter")
    return device_cache_key(torch.cuda.current_device())


@functools.cache
def device_cache_key(index: int) -> str:
    """:func:`sdk_cache_key` for CUDA device ``index``: Triton's version, the device's model
    and capability, CUDA's version and this plugin's sources."""
    name = torch.cuda.get_device_name(index)
    return _cache_key(f"{name}|{torch.cuda.get_device_capability(index)}|{torch.version.cuda}")


@functools.cache
def _cache_key(device: str) -> str:
    import triton

    from sdk.cache import source_digest, stable_hash

    return stable_hash(triton.__version__, device, source_digest(__name__))


@sdk.hookimpl
def sdk_decompositions(ctx: sdk.CompileContext) -> dict:
    """Pad large matrix products to the 16-byte alignment the BLAS libraries want; a
    convolution's bias gradient as a generated sum.

    An early hook of each graph's compile (AOTAutograd asks for the decompositions before
    it traces): the compile workers (``sdk.workers``, unless ``SDK_COMPILE_WORKERS`` is 0)
    start here on a GPU, to be ready when the kernels are rendered."""
    from . import conv_backward, pad_mm

    if not interpreting() and torch.cuda.is_available():
        from sdk.workers import compile_workers

        compile_workers().start()

    return {**pad_mm.decompositions(), **conv_backward.decompositions()}


@sdk.hookimpl
def sdk_op_support(
    ctx: sdk.CompileContext, op: sdk.ir.OpOverload, node: torch.fx.Node
) -> sdk.Support | None:
    from .ops import unsupported_dtype

    for t in _tensors(node.meta.get("val")):
        why = unsupported_dtype(t.dtype)
        if why:
            return sdk.Support.no(why)
    for arg in node.all_input_nodes:
        for t in _tensors(arg.meta.get("val")):
            why = unsupported_dtype(t.dtype)
            if why:
                return sdk.Support.no(f"input {arg.name}: {why}")
    return None


def _tensors(val: object) -> list[torch.Tensor]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (list, tuple)):
        return [t for v in val for t in _tensors(v)]
    return []


@sdk.hookimpl
def sdk_can_fuse(
    ctx: sdk.CompileContext,
    first: sdk.ir.FusionGroup,
    second: sdk.ir.FusionGroup,
    merged: sdk.ir.FusionGroup,
) -> sdk.Support | None:
    """No fusion makes a reduction gather along what it reduces.

    Triton 3.6 on an H200 computed wrong sums in such kernels: a max pool's backward (each
    element gathered from its windows) inside BatchNorm's backward over NCHW, fp32 and bf16,
    at 1, 2 or 4 warps by the shape, while the same kernel was exact under the interpreter,
    with another warp count, or with a debug store added (the layouts of its gathered and
    plain loads meet in conversions within a warp). Stored by its own kernel, the gathered
    value is read by the reduction at plain indices, as Inductor keeps it. A group that
    gathers so before any fusion is left as it is."""
    if merged.gathers_along_reduction and not (
        first.gathers_along_reduction or second.gathers_along_reduction
    ):
        return sdk.Support.no(
            "the fused reduction would gather along what it reduces (Triton 3.6 computed "
            "wrong sums in such kernels); the gathered values are stored instead"
        )
    return None


@sdk.hookimpl
def sdk_render_kernel(ctx: sdk.CompileContext, kernel: object) -> sdk.KernelSource:
    from .render import render

    # debug: the option or SDK_DEBUG=1 (compiled with device-side asserts)
    return render(kernel, debug=ctx.core_options.debug)  # type: ignore[arg-type]


@sdk.hookimpl
def sdk_compile_kernels(
    ctx: sdk.CompileContext, sources: list[sdk.KernelSource]
) -> list[sdk.KernelFn]:
    from .launch import compile_sources

    return compile_sources(sources)


@sdk.hookimpl
def sdk_kernel_choices(
    ctx: sdk.CompileContext, kernel: object, source: sdk.KernelSource
) -> sdk.KernelChoices | None:
    """On a GPU, a static kernel's other launch configurations: the few nearest the default,
    every candidate with the ``autotune`` option (``mode="max-autotune"``). The core measures
    them within its budget and keeps the fastest (nothing under the interpreter)."""
    from .launch import kernel_choices

    return kernel_choices(source, many=ctx.core_options.autotune)
