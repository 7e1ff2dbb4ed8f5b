"""The models suite's rows: how each model is built on a device, in a dtype and at a size,
with its inputs, its fp64 reference and Dynamo's tolerance for its family (:class:`Model`).
Here the torchvision and timm rows and what every row shares; the HF transformers rows are
:mod:`sdk.tools.bench_hf_cases`'s.

:mod:`sdk.tools.bench_models` describes the rows, the sizes and the checks; a row whose package
is missing or does not import raises :class:`~sdk.tools.bench_timing.Skip` with the reason and
the command that installs it (:func:`_import_error`).
"""

from __future__ import annotations

import copy
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdk.tools import bench_check
from sdk.tools.bench_timing import Case, Skip

#: Dynamo's benchmark tolerances for these families (torchbench, timm_models, huggingface).
_TOL_TORCHVISION = 1e-4
#: torchbench's rule for training on a GPU (``torchbench.py``: 1e-3 when training on CUDA).
_TOL_TORCHVISION_TRAIN = 1e-3
_TOL_TIMM = 1e-3
_TOL_HF_TRAIN = 1e-2


# ---------------------------------------------------------------------------
# Packages
# ---------------------------------------------------------------------------


#: How to install each package without letting pip replace torch: an unpinned
#: ``pip install torchvision`` resolves the newest torchvision and, with it, a newer torch;
#: PyPI's Linux torchvision wheels are CUDA builds, which do not load on a CPU-only torch.
_INSTALL_HINT = {
    "torchvision": "pip install --no-deps torchvision==<the release made for this torch>, "
    "from https://download.pytorch.org/whl/cpu for a CPU-only torch",
    "timm": "pip install --no-deps timm (it needs torchvision, huggingface_hub, safetensors, "
    "pyyaml)",
    "transformers": "pip install -e '.[test]'",
}


@functools.cache
def _import_error(module: str) -> str | None:
    """Why ``module`` cannot be imported here, or ``None`` when it can. A wheel built for
    another torch (a CUDA torchvision on a CPU torch) fails with a RuntimeError or an
    OSError rather than an ImportError, so any exception counts."""
    hint = _INSTALL_HINT.get(module, f"pip install {module}")
    try:
        importlib.import_module(module)
    except ImportError as e:
        return f"{module} cannot be imported ({e}); {hint}"
    except Exception as e:  # noqa: BLE001 - a broken install is a reason to skip, not to crash
        import torch

        first = (str(e).strip().splitlines() or [""])[0][:200]
        return (
            f"{module} is installed but does not import with torch {torch.__version__} "
            f"({type(e).__name__}: {first}), a build for another torch?; {hint}"
        )
    return None


def _need(module: str) -> Any:
    reason = _import_error(module)
    if reason is not None:
        raise Skip(reason)
    return importlib.import_module(module)


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


def _dtype(name: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp32": torch.float32}[name]


def _inference_case(
    dev: Any,
    dtype: str,
    make_model: Callable[[], Any],
    make_input: Callable[[], Any],
    desc: str,
    tol: float,
) -> Case:
    import torch

    torch.manual_seed(0)
    model = make_model().eval()
    x = make_input()
    holder = [copy.deepcopy(model).double().to(dev)]  # dropped once the reference is taken
    model = model.to(device=dev, dtype=_dtype(dtype))
    x = x.to(dev)
    x64, x = x.double(), x.to(_dtype(dtype))

    def step(f: Callable[..., Any]) -> Any:
        with torch.no_grad():
            return f(x)

    def fp64_outputs() -> list[tuple[str, Any]]:
        model64 = holder.pop()
        with torch.no_grad():
            return [("out", model64(x64))]

    return Case(
        model,
        step,
        lambda out: [("out", out)],
        f"{desc}, {dtype}, eval, no_grad",
        fp64_outputs=fp64_outputs,
        rule_tol=tol,
    )


def _train_case(
    dev: Any,
    dtype: str,
    model: Any,
    batch: dict[str, Any],
    desc: str,
    reference: Callable[[Any], None] | None = None,
) -> Case:
    """A training step of an HF model: ``model(**batch)``, ``.loss.backward()``.
    ``reference`` adjusts the fp64 copy (an implementation fp64 lacks)."""
    model.train()
    holder = [copy.deepcopy(model).double().to(dev)]
    if reference is not None:
        reference(holder[0])
    model = model.to(device=dev, dtype=_dtype(dtype))
    batch = {k: v.to(dev) for k, v in batch.items()}
    batch64 = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
    batch = {k: v.to(_dtype(dtype)) if v.is_floating_point() else v for k, v in batch.items()}

    def forward(f: Callable[..., Any], inputs: dict[str, Any]) -> tuple[Any, Any]:
        out = f(**inputs)
        return out.loss, out.logits

    return _loss_and_grads_case(
        model,
        holder,
        forward,
        batch,
        batch64,
        f"{desc}, {dtype}, train, loss + backward",
        _TOL_HF_TRAIN,
    )


def _loss_and_grads_case(
    model: Any,
    holder: list[Any],
    forward: Callable[[Callable[..., Any], Any], tuple[Any, Any]],
    inputs: Any,
    inputs64: Any,
    desc: str,
    tol: float,
) -> Case:
    """A training step checked by its loss, its logits and every parameter's gradient:
    ``forward(f, inputs)`` gives (loss, logits) through ``f`` (the model, or its compiled
    form), the gradients cleared before and ``loss.backward()`` after; the fp64 reference
    runs the copy in ``holder`` on ``inputs64``."""

    def run(m: Any, f: Callable[..., Any], inp: Any) -> tuple[Any, Any]:
        m.zero_grad(set_to_none=True)
        loss, logits = forward(f, inp)
        loss.backward()
        return loss, logits

    def collect(m: Any, out: tuple[Any, Any]) -> list[tuple[str, Any]]:
        return [("loss", out[0]), ("logits", out[1])] + [
            (f"grad {n}", p.grad) for n, p in m.named_parameters()
        ]

    def fp64_outputs() -> list[tuple[str, Any]]:
        model64 = holder.pop()
        return bench_check._named(collect(model64, run(model64, model64, inputs64)))

    return Case(
        model,
        lambda f: run(model, f, inputs),
        lambda out: collect(model, out),
        desc,
        fp64_outputs=fp64_outputs,
        rule_tol=tol,
    )


# --- torchvision -----------------------------------------------------------

_CONVNET_SIZES = {"small": (2, 64), "full": (32, 224)}


def _torchvision(arch: str) -> Callable[[Any, str, str], Case]:
    def build(dev: Any, dtype: str, size: str) -> Case:
        import torch

        tv = _need("torchvision")
        bs, hw = _CONVNET_SIZES[size]
        return _inference_case(
            dev,
            dtype,
            lambda: getattr(tv.models, arch)(weights=None),
            lambda: torch.randn(bs, 3, hw, hw),
            f"torchvision {arch}(weights=None), bs {bs}, {hw}x{hw}",
            _TOL_TORCHVISION,
        )

    return build


#: Training steps run at a smaller batch than inference: ResNet-50 at bs 16, 224x224, is the
#: configuration issue 28 measured (and torchbench's training batch for it).
_CONVNET_TRAIN_SIZES = {"small": (2, 64), "full": (16, 224)}

#: Keyword arguments that make a training step deterministic: every dropout and stochastic
#: depth probability 0 (a random mask differs between backends, so no check could pass).
_TORCHVISION_TRAIN_KW = {
    "mobilenet_v3_large": {"dropout": 0.0},
    "efficientnet_b0": {"dropout": 0.0, "stochastic_depth_prob": 0.0},
    "convnext_tiny": {"stochastic_depth_prob": 0.0},
}


def _torchvision_train(arch: str) -> Callable[[Any, str, str], Case]:
    """A training step of a torchvision classifier: ``train()`` mode (batch norm uses the
    batch's statistics and updates its running ones), cross-entropy over 1000 classes,
    ``loss.backward()``; the loss, the logits and every parameter gradient are checked."""

    def build(dev: Any, dtype: str, size: str) -> Case:
        tv = _need("torchvision")
        kw = _TORCHVISION_TRAIN_KW.get(arch, {})
        extra = "".join(f", {k}={v}" for k, v in kw.items())
        return _classifier_train_case(
            dev,
            dtype,
            size,
            lambda: getattr(tv.models, arch)(weights=None, **kw),
            f"torchvision {arch}(weights=None{extra})",
            _TOL_TORCHVISION_TRAIN,
        )

    return build


def _classifier_train_case(
    dev: Any, dtype: str, size: str, make_model: Callable[[], Any], desc: str, tol: float
) -> Case:
    """A classifier's training step: ``train()`` mode, cross-entropy over 1000 classes,
    ``loss.backward()``; the loss, the logits and every parameter gradient are checked."""
    import torch

    bs, hw = _CONVNET_TRAIN_SIZES[size]
    torch.manual_seed(0)
    model = make_model().train()
    x = torch.randn(bs, 3, hw, hw)
    labels = torch.randint(0, 1000, (bs,))
    holder = [copy.deepcopy(model).double().to(dev)]
    model = model.to(device=dev, dtype=_dtype(dtype))
    x64, x = x.to(dev).double(), x.to(device=dev, dtype=_dtype(dtype))
    labels = labels.to(dev)

    def forward(f: Callable[..., Any], inp: Any) -> tuple[Any, Any]:
        logits = f(inp)
        return torch.nn.functional.cross_entropy(logits, labels), logits

    return _loss_and_grads_case(
        model,
        holder,
        forward,
        x,
        x64,
        f"{desc}, bs {bs}, {hw}x{hw}, {dtype}, train, cross-entropy + backward",
        tol,
    )


# --- timm --------------------------------------------------------------------

_TIMM = {
    "deit_tiny": (
        "deit_tiny_patch16_224",
        {
            "small": {"img_size": 64, "depth": 2},
            "full": {},
        },
    ),
    "swin_tiny": (
        "swin_tiny_patch4_window7_224",
        {
            "small": {
                "img_size": 64,
                "window_size": 4,
                "embed_dim": 32,
                "depths": (2, 2, 2, 2),
                "num_heads": (1, 2, 4, 8),
            },
            "full": {},
        },
    ),
    # convnets not tuned for: ConvNeXt as timm builds it (LayerNorm2d: F.layer_norm on a
    # permuted view, permuted back; the head's LayerNorm2d after a mean over (H, W)), and
    # RegNetY (grouped 3x3 convolutions, squeeze-excitation, BatchNorm + ReLU)
    "timm_convnext_tiny": ("convnext_tiny", {"small": {}, "full": {}}),
    # (small: timm zero-initialises each block's last BatchNorm weight, so a block's output
    # starts as relu(shortcut); at 64x64, batch 2, the last stage's BatchNorm averages 8
    # values and a ReLU input lands within fp32 noise of 0 (1.4e-6 in fp64): any fp32 run
    # may flip that mask, and one flip moved every shortcut gradient past the fp64 rule)
    "regnety_008": ("regnety_008", {"small": {"zero_init_last": False}, "full": {}}),
    # timm's ResNet-50 (the issue 49 row where both compilers lost to eager), same
    # zero-initialised last BatchNorm weights as RegNetY's at the small size
    "timm_resnet50": ("resnet50", {"small": {"zero_init_last": False}, "full": {}}),
}

#: Keyword arguments that make a timm training step deterministic (see
#: ``_TORCHVISION_TRAIN_KW``): no dropout, no stochastic depth.
_TIMM_TRAIN_KW = {"drop_rate": 0.0, "drop_path_rate": 0.0}


def _timm_train(key: str) -> Callable[[Any, str, str], Case]:
    """A training step of a timm classifier (see :func:`_classifier_train_case`)."""

    def build(dev: Any, dtype: str, size: str) -> Case:
        timm = _need("timm")
        arch, by_size = _TIMM[key]
        kw = {**by_size[size], **_TIMM_TRAIN_KW}
        extra = "".join(f", {k}={v}" for k, v in kw.items() if k != "img_size")
        return _classifier_train_case(
            dev,
            dtype,
            size,
            lambda: timm.create_model(arch, pretrained=False, **kw),
            f"timm {arch}(pretrained=False{extra})",
            _TOL_TIMM,
        )

    return build


def _timm(key: str) -> Callable[[Any, str, str], Case]:
    def build(dev: Any, dtype: str, size: str) -> Case:
        import torch

        timm = _need("timm")
        arch, by_size = _TIMM[key]
        kw = by_size[size]
        bs, hw = _CONVNET_SIZES[size]
        extra = "".join(f", {k}={v}" for k, v in kw.items() if k != "img_size")
        return _inference_case(
            dev,
            dtype,
            lambda: timm.create_model(arch, pretrained=False, **kw),
            lambda: torch.randn(bs, 3, hw, hw),
            f"timm {arch}(pretrained=False{extra}), bs {bs}, {hw}x{hw}",
            _TOL_TIMM,
        )

    return build


# ---------------------------------------------------------------------------
# A row's model
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    name: str  # the row name without the dtype suffix
    kind: str  # "inference" or "train"
    package: str
    build: Callable[[Any, str, str], Case]  # (device, "bf16"/"fp32", "small"/"full")
