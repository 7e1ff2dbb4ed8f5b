"""``python -m sdk run``: compile a small real model, check it against eager mode, time it.

The README's main job. With the default plugin (``cuda_triton`` on a GPU, else
``cpu_cpp``) it compiles a small GPT-2 (Hugging Face ``transformers``, random
weights, nothing downloaded) or a small MLP, then

1. runs one training step (forward + loss + backward) and one inference forward
   compiled and in eager mode and compares the loss, the logits and every
   parameter's gradient (max abs diff, PASS/FAIL per check);
2. prints what the compile produced (the numbers ``sdk.explain`` reports:
   graphs, kernels, library calls, fallbacks, share of the ATen calls that run
   code in generated kernels);
3. times ``steps`` training steps compiled and eager, in alternating rounds (median per
   step, the ratio's spread over the rounds, and whether it is within noise).

The exit status is 1 if any check fails, 2 if the plugin cannot be used here.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sdk.errors import describe

#: fp32 tolerance of the checks: a compiled model may reorder reductions (softmax,
#: layer norm, gradient sums), so exact equality is not expected.
RTOL, ATOL = 1e-4, 1e-5


@dataclass
class _Model:
    module: Any
    inputs: dict[str, Any]  # keyword arguments of one training step; labels included
    desc: str


def _gpt2(dev: Any) -> _Model:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = GPT2Config(
        n_layer=2,
        n_embd=256,
        n_head=4,
        vocab_size=2048,
        n_positions=256,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).to(dev).train()
    # the loss named, as transformers asks: else its first call logs a warning, and
    # Dynamo cannot trace logging.Logger's methods (a graph break in the model)
    model.loss_type = "ForCausalLM"
    ids = torch.randint(0, cfg.vocab_size, (4, 128), device=dev)
    n = sum(p.numel() for p in model.parameters())
    return _Model(
        model,
        {"input_ids": ids, "labels": ids},
        f"GPT-2 (transformers GPT2LMHeadModel: 2 layers, n_embd 256, 4 heads, vocab 2048; "
        f"{n / 1e6:.1f}M parameters, random weights, dropout 0), batch 4 x 128 tokens, fp32",
    )


class _MLP:
    """Built lazily so that importing this module does not import torch."""

    @staticmethod
    def build(dev: Any) -> _Model:
        import torch

        class MLP(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = torch.nn.Sequential(
                    torch.nn.Linear(128, 512),
                    torch.nn.GELU(),
                    torch.nn.LayerNorm(512),
                    torch.nn.Linear(512, 512),
                    torch.nn.GELU(),
                    torch.nn.Linear(512, 10),
                )

            def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
                logits = self.net(x)
                loss = None
                if labels is not None:
                    loss = torch.nn.functional.cross_entropy(logits, labels)
                return loss, logits

        torch.manual_seed(0)
        model = MLP().to(dev).train()
        x = torch.randn(256, 128, device=dev)
        y = torch.randint(0, 10, (256,), device=dev)
        return _Model(
            model,
            {"x": x, "labels": y},
            "MLP 128 -> 512 -> 512 -> 10 (GELU, LayerNorm), cross-entropy loss, batch 256, fp32",
        )


def _loss_logits(out: Any) -> tuple[Any, Any]:
    if isinstance(out, tuple):
        return out[0], out[1]
    return out.loss, out.logits


def _train_step(model: Any, fn: Callable[..., Any], inputs: dict[str, Any]) -> tuple[Any, Any]:
    model.zero_grad(set_to_none=True)
    loss, logits = _loss_logits(fn(**inputs))
    loss.backward()
    return loss, logits


def _inference(fn: Callable[..., Any], inputs: dict[str, Any]) -> Any:
    import torch

    kwargs = {k: v for k, v in inputs.items() if k != "labels"}
    with torch.no_grad():
        return _loss_logits(fn(**kwargs))[1]


def _grads(model: Any) -> list[tuple[str, Any]]:
    return [
        (n, None if p.grad is None else p.grad.detach().clone())
        for n, p in model.named_parameters()
    ]


class _Checks:
    def __init__(self) -> None:
        self.failed = 0

    def tensors(self, what: str, ref: list[tuple[str, Any]], res: list[tuple[str, Any]]) -> None:
        import torch

        worst, worst_name, bad = 0.0, "", []
        for (name, a), (_, b) in zip(ref, res):
            if a is None or b is None:
                if (a is None) != (b is None):
                    bad.append(f"{name} (gradient missing on one side)")
                continue
            diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
            if not diff <= worst:  # NaN counts as worst
                worst, worst_name = diff, name
            if not torch.allclose(b, a, rtol=RTOL, atol=ATOL):
                bad.append(name)
        ok = not bad and len(ref) == len(res)
        self.failed += not ok
        where = f" ({worst_name})" if len(ref) > 1 and worst_name else ""
        line = f"  {'PASS' if ok else 'FAIL'}  {what}: max abs diff {worst:.3g}{where}"
        if bad:
            line += f"; not within rtol={RTOL:g}, atol={ATOL:g}: {', '.join(bad[:5])}" + (
                f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            )
        print(line, flush=True)


def _step_ms(fn: Callable[[], Any], steps: int, sync: Callable[[], None]) -> list[float]:
    times = []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


#: rounds the timed steps are split into, compiled and eager alternating
ROUNDS = 5


def _timing_line(compiled: list[list[float]], eager: list[list[float]]) -> str:
    """Median step of each, and their ratio with its spread: the ratio of each round's
    medians, lowest to highest. A spread that holds 1 is within noise."""
    ms_c = statistics.median([t for r in compiled for t in r])
    ms_e = statistics.median([t for r in eager for t in r])
    ratios = sorted(
        statistics.median(c) / statistics.median(e) for c, e in zip(compiled, eager, strict=True)
    )
    ratio = ms_c / ms_e
    if ratios[0] <= 1.0 <= ratios[-1]:
        verdict = "within noise: no clear difference on this machine now"
    elif ratio <= 1:
        verdict = f"{1 / ratio:.2f}x faster"
    else:
        verdict = f"{ratio:.2f}x slower"
    steps = sum(len(r) for r in compiled)
    return (
        f"training step, median of {steps} in {len(compiled)} alternating rounds: compiled "
        f"{ms_c:.2f} ms, eager {ms_e:.2f} ms; compiled/eager {ratio:.2f} (rounds "
        f"{ratios[0]:.2f}-{ratios[-1]:.2f}): {verdict}"
    )


def _plugin_devices(plugin: str) -> str:
    import sdk

    for row in sdk.list_plugins():
        if row["name"] == plugin:
            return row["devices"]
    return ""


def _demo_model(model: str, dev: Any) -> tuple[str, Any]:
    """The model the demo runs (the MLP in place of GPT-2 without transformers), built on
    ``dev``."""
    if model == "gpt2":
        try:
            import transformers  # noqa: F401
        except ImportError:
            print(
                "note: transformers is not installed, so the demo uses the MLP instead of "
                "GPT-2 (pip install transformers to run GPT-2)"
            )
            model = "mlp"
    return model, (_gpt2(dev) if model == "gpt2" else _MLP.build(dev))


def _print_step_times(
    m: Any, compiled: Any, inputs: Any, steps: int, sync: Callable[[], None]
) -> None:
    """The median training step, compiled and eager, after one warm-up step each, timed in
    :data:`ROUNDS` alternating rounds so that a slow moment of the machine hits both."""

    def train_c():
        return _train_step(m, compiled, inputs)

    def train_e():
        return _train_step(m, m, inputs)

    for fn in (train_c, train_e):
        fn()  # one warm-up step each
    per_round = max(1, steps // ROUNDS)
    times_c: list[list[float]] = []
    times_e: list[list[float]] = []
    for _ in range(ROUNDS):
        times_c.append(_step_ms(train_c, per_round, sync))
        times_e.append(_step_ms(train_e, per_round, sync))
    print(_timing_line(times_c, times_e))


@contextlib.contextmanager
def _still_working(what: str, every: float = 15.0) -> Iterator[None]:
    """Say every ``every`` seconds that ``what`` is still running (a cold compile of the
    model can take a minute or more)."""
    done = threading.Event()
    start = time.perf_counter()

    def tick() -> None:
        while not done.wait(every):
            print(f"  ... still {what} ({time.perf_counter() - start:.0f} s)", flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def run_demo(plugin: str | None, model: str, steps: int) -> int:
    import torch

    import sdk

    cuda = torch.cuda.is_available()
    plugin = plugin or ("cuda_triton" if cuda else "cpu_cpp")
    plugin = plugin.removeprefix("sdk:")
    try:
        backend = sdk.backend(plugin)
    except sdk.SDKError as e:
        print(
            f"error: sdk:{plugin} cannot be used here: {e}\n"
            "`python -m sdk list` shows the installed plugins and their status.",
            file=sys.stderr,
        )
        return 2
    dev = torch.device("cuda" if cuda and "cuda" in _plugin_devices(plugin).split(",") else "cpu")

    model, built = _demo_model(model, dev)
    m, inputs = built.module, built.inputs

    where = (
        torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads"
    )
    print(f"sdk {sdk.__version__}, torch {torch.__version__}: sdk:{plugin} on {dev.type} ({where})")
    print(f"model: {built.desc}")

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    # Eager reference.
    ref_loss, ref_logits = _train_step(m, m, inputs)
    ref_loss, ref_logits = ref_loss.detach().clone(), ref_logits.detach().clone()
    ref_grads = _grads(m)
    ref_infer = _inference(m, inputs).clone()

    # Compiled: one training step and one inference forward, reports collected.
    sdk.reset()
    compiled = torch.compile(m, backend=backend)
    checks = _Checks()
    with sdk.collect_reports() as collected:
        try:
            sync()
            t0 = time.perf_counter()
            with _still_working("compiling the training step"):
                loss, logits = _train_step(m, compiled, inputs)
                sync()
            t_train = time.perf_counter() - t0
            grads = _grads(m)
            t0 = time.perf_counter()
            infer = _inference(compiled, inputs)
            sync()
            t_infer = time.perf_counter() - t0
        except Exception:  # noqa: BLE001 - the demo's job is to say what went wrong
            print(f"FAIL: compiling or running {model} with sdk:{plugin} raised:", file=sys.stderr)
            traceback.print_exc()
            return 1
    reports, breaks = collected.graphs, collected.breaks
    print(
        f"compile + first call: training step {t_train:.1f} s, inference forward "
        f"{t_infer:.1f} s (the on-disk kernel cache makes later runs faster)"
    )

    print("checks against eager mode:")
    checks.tensors("training loss", [("loss", ref_loss)], [("loss", loss.detach())])
    checks.tensors("training logits", [("logits", ref_logits)], [("logits", logits.detach())])
    checks.tensors(f"gradients ({len(ref_grads)} parameters)", ref_grads, grads)
    checks.tensors("inference logits", [("logits", ref_infer)], [("logits", infer)])

    report = sdk.ExplainReport(graphs=reports, breaks=breaks)
    _print_explain(report)
    if not any(g.kind == "backward" for g in reports):
        print(
            "  note: no backward graph was reported although the training step ran a "
            "compiled backward: autograd compiled it where the report collector does not "
            "reach (on CUDA, autograd's device thread, outside the collector's ContextVar); "
            "the numbers above cover the forward and inference graphs only"
        )

    if steps > 0:
        _print_step_times(m, compiled, inputs, steps, sync)

    if checks.failed:
        print(f"FAIL: {checks.failed} check(s) failed")
        return 1
    print("PASS: compiled outputs and gradients match eager mode")
    return 0


def _print_explain(report: Any) -> None:
    aten = sum(g.aten_ops for g in report.graphs)
    fraction = report.generated_fraction
    share = f"{fraction:.0%}" if fraction is not None else "-"
    kinds = ", ".join(f"{g.name} [{g.kind}]" for g in report.graphs)
    print(
        f"what was compiled (sdk.explain's numbers): {len(report.graphs)} graph(s) ({kinds}), "
        f"{len(report.kernels)} generated kernel(s), {len(report.externs)} library call(s), "
        f"{len(report.fallbacks)} fallback(s), {report.graph_breaks} graph break(s); "
        f"{aten} ATen calls, {share} of those that run code in generated kernels"
    )
    reasons: dict[str, int] = {}
    for f in report.fallbacks:
        key = f"{f.op}: {f.reason.splitlines()[0][:160]}"
        reasons[key] = reasons.get(key, 0) + 1
    for key, n in list(reasons.items())[:8]:
        print(f"  fallback x{n} {key}")
    for b in report.breaks:  # Dynamo's reason, the user's line, torch's hint
        where = b.where.split(":")[0]
        lib = next((p for p in ("transformers", "timm", "torchvision") if f"/{p}/" in where), None)
        print(f"  {b}" + (f" (in {lib}'s code: the model's, not yours)" if lib else ""))


#: What ``python -m sdk explain TARGET`` takes (its help says the same).
TARGET_RULE = (
    "TARGET must be MODULE:FUNCTION or path/to/file.py:FUNCTION, a function of no arguments "
    "returning (model or function, tuple of example inputs)"
)


def _target(spec: str) -> tuple[Any, tuple]:
    """``MODULE:FUNCTION`` or ``path/to/file.py:FUNCTION`` -> what the function returns:
    (model or function, example inputs).

    MODULE is imported as ``python -m`` imports it, the current directory first on
    ``sys.path`` (the ``sdk`` console script's own ``sys.path`` lacks it); a file is
    imported from its path, its directory first on ``sys.path`` (as ``python file.py`` runs
    it). Raises ImportError, AttributeError or ValueError, each with a one-line message, for
    a target that is not such a function, or one that raised."""
    import inspect

    module, _, name = spec.rpartition(":")
    if not module or not name:
        raise ValueError(
            f"{spec!r} is not MODULE:FUNCTION (e.g. mymodels:tiny_bert) or path/to/file.py:FUNCTION"
        )
    try:
        imported = _import_target(module)
    except _TargetNotFound:
        raise
    except Exception as exc:  # the module's own code failed (SyntaxError, RuntimeError, ...)
        raise ValueError(f"importing {module!r} raised {_one_line(exc)}") from exc
    fn = getattr(imported, name)
    if not callable(fn):
        raise ValueError(
            f"{spec} is not a function (its type is {type(fn).__name__}): {TARGET_RULE}"
        )
    try:
        inspect.signature(fn).bind()
    except TypeError as exc:
        raise ValueError(
            f"{spec} cannot be called without arguments ({exc}): {TARGET_RULE}"
        ) from exc
    except ValueError:  # no signature to read (some builtins): the call below tells
        pass
    try:
        made = fn()
    except Exception as exc:
        raise ValueError(f"{spec}() raised {_one_line(exc)}") from exc
    if not (
        isinstance(made, tuple)
        and len(made) == 2
        and callable(made[0])
        and isinstance(made[1], tuple)
    ):
        raise ValueError(
            f"{spec} must return (model or function, tuple of example inputs), "
            f"got {_shape_of(made)}"
        )
    return made


class _TargetNotFound(ImportError):
    """No module or file of that name (one raised while importing it is the module's)."""


def _import_target(module: str) -> Any:
    """The module of an explain target: a file path (``.py``, or with a ``/``), else a module
    name looked up from the current directory, then the rest of ``sys.path``."""
    import importlib
    import importlib.util
    import os

    cwd = os.getcwd()
    if module.endswith(".py") or "/" in module or os.sep in module:
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise _TargetNotFound(
                f"no file {module!r} (looked for {path}): give path/to/file.py:FUNCTION, "
                "or MODULE:FUNCTION of a module importable from the current directory"
            )
        stem = os.path.splitext(os.path.basename(path))[0]
        # its own name where free (pickling and dataclasses look a module up by name)
        name = stem if stem.isidentifier() and stem not in sys.modules else f"_sdk_target_{stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise _TargetNotFound(f"cannot import {module!r} as Python source: {TARGET_RULE}")
        if os.path.dirname(path) not in sys.path:  # its siblings import, as under python file.py
            sys.path.insert(0, os.path.dirname(path))
        imported = importlib.util.module_from_spec(spec)
        sys.modules[name] = imported
        try:
            spec.loader.exec_module(imported)
        except BaseException:
            del sys.modules[name]
            raise
        return imported
    if cwd not in sys.path and "" not in sys.path:  # python -m puts it first; the script not
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        parts = module.split(".")
        if exc.name not in {".".join(parts[: i + 1]) for i in range(len(parts))}:
            raise  # one the module imports: the module's error
        raise _TargetNotFound(
            f"No module named {exc.name!r}: looked for {module!r} in the current directory "
            f"({cwd}) and the rest of sys.path; run from the directory that holds it, or "
            f"give a file: path/to/{parts[-1]}.py:FUNCTION"
        ) from exc


def _one_line(exc: BaseException) -> str:
    """``sdk.errors.describe`` of ``exc`` on one line (its lines joined)."""
    return " ".join(describe(exc).split())


def _shape_of(value: Any) -> str:
    """``tuple(str, int)`` for a tuple, else the type's name: what a wrong return was."""
    if isinstance(value, tuple):
        return f"tuple({', '.join(type(v).__name__ for v in value)})"
    return type(value).__name__


def explain_model(
    plugin: str | None,
    model: str,
    target: str | None,
    inference: bool,
    options: dict[str, Any],
    verbose: bool = False,
) -> int:
    """``python -m sdk explain``: compile one step and print sdk.explain's report (every
    detail with ``verbose``)."""
    import torch

    import sdk

    plugin = (plugin or ("cuda_triton" if torch.cuda.is_available() else "cpu_cpp")).removeprefix(
        "sdk:"
    )
    try:
        backend = sdk.backend(plugin, **options)
        if target:
            fn, args = _target(target)
            names: tuple[str, ...] = ()
        else:
            cuda = torch.cuda.is_available() and "cuda" in _plugin_devices(plugin).split(",")
            built = _gpt2("cuda" if cuda else "cpu") if model == "gpt2" else _MLP.build("cpu")
            fn, names, args = built.module, tuple(built.inputs), tuple(built.inputs.values())
    except (sdk.SDKError, ValueError, ImportError, AttributeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def call(*a: Any) -> Any:
        return fn(**dict(zip(names, a, strict=True))) if names else fn(*a)

    def step(*a: Any) -> Any:  # sdk.explain runs the backward of what needs grad
        return _loss_of(call(*a))

    run = call if inference else step
    grad = torch.no_grad() if inference else contextlib.nullcontext()
    try:
        with grad:
            report = sdk.explain(run, *args, backend=backend, verbose=verbose)
    except Exception:
        # bad input (a model that fails on its own example inputs, an output with no loss)
        # fails in eager mode too: one line. A failure of the compile alone is the SDK's:
        # its traceback is wanted.
        try:
            with grad:
                run(*args)
        except Exception as eager:
            what = target or f"--model {model}"
            print(f"error: {what} fails without compiling too: {_one_line(eager)}", file=sys.stderr)
            return 2
        raise
    print(report)
    return 0


def _loss_of(out: Any) -> Any:
    """A scalar to differentiate: the model's loss where it returns one, else a sum."""
    import torch

    if isinstance(out, torch.Tensor):
        return out.sum() if out.dim() else out
    if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        return _loss_of(out[0])
    loss = getattr(out, "loss", None)
    if loss is not None:
        return loss
    raise ValueError(f"cannot find a loss in a {type(out).__name__}: pass --inference")
