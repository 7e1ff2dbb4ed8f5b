"""``python -m sdk bench --suite models``: row selection, argument errors, the kernel-name
classifier of the launch counts, and a few rows end to end on the CPU at the small size."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import types
from pathlib import Path

import pytest
import torch

import sdk.cache
from sdk import cli
from sdk.tools import bench, bench_models, bench_timing

# ---------------------------------------------------------------------------
# Rows and arguments
# ---------------------------------------------------------------------------


def test_every_model_has_a_bf16_and_an_fp32_row():
    names = list(bench_models.rows())
    assert len(names) == 2 * len(bench_models.MODELS)
    for m in bench_models.MODELS:
        assert f"{m.name}_bf16" in names and f"{m.name}_fp32" in names
    assert {m.kind for m in bench_models.MODELS} == {"inference", "train"}


@pytest.mark.parametrize(
    ("only", "dtype", "expected"),
    [
        ("resnet18", None, ["resnet18_bf16", "resnet18_fp32"]),
        ("resnet18", "fp32", ["resnet18_fp32"]),
        ("gpt2_train_fp32, resnet18_bf16", "all", ["resnet18_bf16", "gpt2_train_fp32"]),
        (
            "*_train_fp32",
            None,
            [
                "resnet50_train_fp32",
                "mobilenet_v3_large_train_fp32",
                "convnext_tiny_train_fp32",
                "efficientnet_b0_train_fp32",
                "timm_convnext_tiny_train_fp32",
                "regnety_008_train_fp32",
                "timm_resnet50_train_fp32",
                "gpt2_train_fp32",
                "distilbert_train_fp32",
                "qwen2_train_fp32",
                "whisper_train_fp32",
                "t5_train_fp32",
                "bart_train_fp32",
                "mixtral_train_fp32",
                "hf_convnext_tiny_train_fp32",
            ],
        ),
        ("resnet18_bf16", "fp32", []),
    ],
)
def test_select(only, dtype, expected):
    assert bench_models.select(only, dtype) == expected


def test_select_without_filters_is_the_whole_suite():
    assert bench_models.select(None, None) == list(bench_models.rows())
    assert all(n.endswith("_bf16") for n in bench_models.select(None, "bf16"))


def test_unknown_row_exits_2_and_names_the_rows(capsys):
    assert cli.main(["bench", "--suite", "models", "--only", "gpt2_train_fp32,nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown row(s) nope" in err
    for name in ("resnet18_bf16", "gpt2_train_fp32", "qwen2_train_fp32"):
        assert name in err


def test_empty_selection_exits_2(capsys):
    assert (
        cli.main(["bench", "--suite", "models", "--only", "resnet18_bf16", "--dtype", "fp32"]) == 2
    )
    assert "select no row" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--size", "small"], ["--dtype", "fp32"], ["--profile"]])
def test_models_options_are_refused_for_the_kernels_suite(capsys, extra):
    assert cli.main(["bench", *extra]) == 2
    assert "only with --suite models" in capsys.readouterr().err


def test_the_compile_mode_reaches_every_row_and_the_record(monkeypatch, capsys, tmp_path):
    seen = []

    def run_workload(name, make, dev, clock, backend, probe=None, mode=None):
        seen.append((name, mode))
        row = bench_timing.Row(name)
        row.skipped = "not run"
        return row

    monkeypatch.setattr(bench_timing, "_run_workload", run_workload)
    monkeypatch.setattr(bench_timing, "_prewarm", lambda dev, backend: 0.0)
    # (the run's process-wide settings: torch's compile caches off, fresh cache directories;
    # this test's worker runs other tests after it)
    monkeypatch.setattr(sdk.cache, "cold_compiles", lambda: None)
    monkeypatch.setattr(bench_timing, "_fresh_cache_dirs", dict)
    out = tmp_path / "ro.json"
    argv = ["bench", "--suite", "models", "--only", "resnet18", "--mode", "reduce-overhead"]
    cli.main([*argv, "--json", str(out)])
    assert seen == [("resnet18_bf16", "reduce-overhead"), ("resnet18_fp32", "reduce-overhead")]
    assert "torch.compile mode reduce-overhead, both" in capsys.readouterr().out
    assert json.loads(out.read_text())["method"]["mode"] == "reduce-overhead"


def test_bad_choice_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--suite", "models", "--dtype", "fp16"])
    assert e.value.code == 2
    assert "--dtype" in capsys.readouterr().err


def test_list(capsys):
    assert cli.main(["bench", "--suite", "models", "--list", "--dtype", "fp32"]) == 0
    lines = capsys.readouterr().out.split("\n")
    names = [ln.split()[0] for ln in lines if ln.strip()]
    assert names == bench_models.select(None, "fp32")


# ---------------------------------------------------------------------------
# Launch counts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("triton_poi_fused_add_relu_0", "triton"),
        ("triton_red_fused__softmax_1", "triton"),
        ("triton_tem_fused_mm_2", "triton"),
        ("k_add_mul_relu", "triton"),
        ("Memcpy DtoD (Device -> Device)", "copy"),
        ("Memset (Device)", "copy"),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", "gemm"),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>(Params)",
            "gemm",
        ),
        ("ampere_sgemm_128x64_tn", "gemm"),
        ("void splitKreduce_kernel<32, 16, int, float, float, float>(...)", "gemm"),
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "conv"),
        ("void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(...)", "conv"),
        ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false>(...)", "conv"),
        ("void at::native::conv_depthwise2d_forward_kernel<float, int>(...)", "conv"),
        ("winograd_nonfused_fprop_kernel", "conv"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Params)", "attention"),
        (
            "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)",
            "attention",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            "other",
        ),
        ("void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda, convert>", "other"),
        ("void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float>>>(...)", "other"),
    ],
)
def test_classify_kernel(name, cls):
    assert bench_models.classify_kernel(name) == cls


def _event(name: str, us: float, device: str = "CUDA") -> types.SimpleNamespace:
    span = types.SimpleNamespace(elapsed_us=lambda: us)
    return types.SimpleNamespace(
        name=name, time_range=span, device_type=getattr(torch.autograd.DeviceType, device)
    )


def test_summarize_device_events_counts_device_activities_only():
    events = [
        _event("triton_poi_fused_0", 10.0),
        _event("triton_poi_fused_0", 30.0),
        _event("nvjet_tst_64x8", 100.0),
        _event("Memcpy HtoD (Pageable -> Device)", 5.0),
        _event("cudaLaunchKernel", 2.0, device="CPU"),
    ]
    out = bench_models.summarize_device_events(events)
    assert out["launches"] == 4
    assert out["by_class"]["triton"] == {"launches": 2, "ms": pytest.approx(0.04)}
    assert out["by_class"]["gemm"] == {"launches": 1, "ms": pytest.approx(0.1)}
    assert out["by_class"]["copy"]["launches"] == 1
    assert out["by_class"]["other"]["launches"] == 0
    assert out["device_ms"] == pytest.approx(0.145)
    assert out["top_kernels"][0] == {"name": "nvjet_tst_64x8", "ms": pytest.approx(0.1)}
    assert out["top_kernels"][1] == {"name": "triton_poi_fused_0", "ms": pytest.approx(0.04)}


def test_summarize_reads_real_profiler_events():
    """The attributes used exist on torch's own events; CPU events are no launches."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x).relu()
    assert bench_models.summarize_device_events(prof.events())["launches"] == 0


def test_a_failing_probe_is_recorded_not_raised():
    case = bench.Case(lambda t: t + 1, lambda f: f(torch.ones(4)), lambda r: [("out", r)], "t")

    def probe(step):
        step()
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    clock = bench._Clock(False, 2)
    res, _, step = bench._prepare("t", case, clock, None, None, None)
    bench._time_interleaved("t", case, clock, [(res, step)], probe)
    assert res.check == "" and res.ms is not None
    assert res.profile == {"error": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"}


def test_backends_are_timed_in_interleaved_rounds_without_recompiling(monkeypatch):
    """Each backend is compiled once; the timing rounds alternate between the compiled
    steps, and the first backend's frames survive the second one's compile."""
    compiles: list[int] = []

    def counting(gm, example_inputs):
        compiles.append(1)
        return gm.forward

    real_compile = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda f, backend=counting, **kw: real_compile(f, backend=backend, **kw)
    )
    order: list[str] = []
    real_samples = bench._Clock.samples

    def samples(self, call, share=1.0):
        order.append(call)
        return real_samples(self, call, share)

    monkeypatch.setattr(bench._Clock, "samples", samples)
    case = bench.Case(
        lambda t: torch.sin(t) + 1, lambda f: f(torch.ones(8)), lambda r: [("out", r)], "t"
    )
    row = bench._run_workload(
        "t", lambda dev: case, torch.device("cpu"), bench._Clock(False, 6), "sdk:cpu_cpp"
    )
    assert (row.inductor.check, row.sdk.check) == ("ok", "ok")
    assert len(compiles) == 1, "the first backend recompiled after the sdk's compile"
    for res in (row.eager, row.inductor, row.sdk):
        assert len(res.round_ms) == bench.ROUNDS
        assert len(res.samples_ms) == bench.ROUNDS * 2  # 6 calls, a third per round
        assert res.ms is not None
    assert len(order) == 3 * bench.ROUNDS and len(set(order[:3])) == 3
    assert order[:3] == order[3:6] == order[6:9]  # the same turn in every round


def _sized_halves(x):
    def g(t):
        y = torch.sin(t) * 2
        torch._dynamo.graph_break()
        return y + 1

    return g(x[:, :5]).sum() + g(x).sum()


def test_a_second_backend_compiles_the_graphs_a_fresh_process_would():
    """Kept frames stay compiled, but the sizes the first backend's calls showed Dynamo do
    not make the second backend's graphs dynamic (they did before: the sdk got symbolic
    sizes and fell back on Whisper)."""
    from sdk.core.adapters.torch_private import reset_dynamo

    graphs: dict[str, list] = {"first": [], "second": []}

    def recording(tag):
        def backend(gm, example_inputs):
            graphs[tag].append(
                [
                    tuple(map(str, t.shape)) if isinstance(t, torch.Tensor) else str(t)
                    for t in example_inputs
                ]
            )
            return gm.forward

        return backend

    x = torch.randn(4, 10)
    reset_dynamo()
    first = torch.compile(_sized_halves, backend=recording("first"))
    for _ in range(3):
        first(x)
    reset_dynamo(keep_compiled=True)
    second = torch.compile(_sized_halves, backend=recording("second"))
    for _ in range(3):
        second(x)
    n = len(graphs["first"])
    first(x)
    assert len(graphs["first"]) == n, "the first backend's frames were recompiled"
    assert graphs["second"] == graphs["first"]
    assert any("s" in str(g) for g in graphs["first"]), "the workload should go dynamic"


# ---------------------------------------------------------------------------
# End to end: the small suite on the CPU
# ---------------------------------------------------------------------------

#: Rows run end to end, with the package each needs (a test of a row whose package cannot
#: be imported here is skipped with the reason). One transformer training row: GPT-2's
#: (tests/e2e/test_models.py, test_symbolic_sizes.py and tests/iree train it) cost a minute more.
E2E_ROWS = {
    "qwen2_train_fp32": "transformers",
    "resnet18_fp32": "torchvision",
}


def _small_suite(out: Path, runnable: list[str]):
    """One ``python -m sdk bench --suite models --size small`` over ``runnable`` rows:
    (exit status, JSON rows by name, the JSON, stdout)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    # bench points the compile caches at temporary directories it removes at the end and
    # switches Inductor's persistent caches off: put both back afterwards. The options go
    # back through torch's own config.patch: pytest's MonkeyPatch (9.2) deletes an option
    # of a torch config module on undo, and every later test in the process then fails.
    with (
        pytest.MonkeyPatch.context() as mp,
        inductor_config.patch(fx_graph_cache=inductor_config.fx_graph_cache),
        functorch_config.patch(enable_autograd_cache=functorch_config.enable_autograd_cache),
    ):
        for var in sdk.cache.CACHE_VARIABLES:
            if var in os.environ:
                mp.setenv(var, os.environ[var])
            else:
                mp.setenv(var, "")
                mp.delenv(var)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = cli.main(
                [
                    "bench",
                    "--suite",
                    "models",
                    "--size",
                    "small",
                    "--repeat",
                    "3",
                    "--only",
                    ",".join(runnable),
                    "--json",
                    str(out),
                    *(["--plot", str(out.with_suffix(".png"))] if _has_matplotlib() else []),
                ]
            )
    data = json.loads(out.read_text())
    return rc, {r["name"]: r for r in data["rows"]}, data, buf.getvalue()


def _has_matplotlib():
    from sdk.tools import bench_plot

    return bench_plot.missing() is None


@pytest.mark.slow
def test_the_small_suite_on_cpu(tmp_path):
    """The rows of :data:`E2E_ROWS` whose package imports, in one run (one test, not one per
    row: each xdist worker would run the suite again, a minute each), then its exit status,
    summary, each row's JSON and the plot."""
    runnable = [n for n, pkg in E2E_ROWS.items() if bench_models._import_error(pkg) is None]
    if not runnable:
        pytest.skip("none of " + ", ".join(E2E_ROWS) + " can run here")
    rc, rows, data, stdout = _small_suite(tmp_path / "models.json", runnable)
    assert rc == 0, stdout[-3000:]
    assert data["method"]["suite"] == "models" and data["method"]["size"] == "small"
    assert data["targets"]["limit"] == 1.1
    assert "geomean" in stdout and "targets: sdk/ind <= 1.1" in stdout
    assert sorted(rows) == sorted(runnable), rows.keys()
    for name, r in rows.items():
        assert name in stdout
        assert r["skipped"] is None, name
        assert r["size"] == "small"
        assert r["sdk"]["check"] == "ok", (name, r["sdk"]["detail"], r["sdk"]["error"])
        assert r["eager"]["median_ms"] > 0 and r["sdk"]["median_ms"] > 0
        assert r["sdk"]["cold_s"] > 0 and r["inductor"]["cold_s"] > 0
        assert r["sdk_graphs"]["graphs"] >= 1 and r["sdk_graphs"]["kernels"] >= 1
        checked = int(r["sdk"]["detail"].split()[0])  # "<n> tensor(s) ok (...)"
        assert checked > 2 if r["kind"] == "train" else checked == 1  # loss, logits, grads
        if not torch.cuda.is_available():
            assert r["profile"] == {"skipped": "launches are counted on CUDA only"}
    if _has_matplotlib():
        both = [
            r for r in rows.values() if r["sdk_over_inductor"] is not None and r["sdk_over_eager"]
        ]
        assert f"({len(both)} rows with both ratios;" in stdout, stdout
        png = next(line.split()[1] for line in stdout.splitlines() if line.startswith("plot: "))
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_text_and_json_on_cuda_rows():
    """The CUDA-only output paths, from a row with made-up profiles."""
    prof = bench_models.summarize_device_events(
        [_event("triton_poi_fused_0", 10.0), _event("sm90_xmma_fprop_implicit_gemm", 50.0)]
    )
    row = bench.Row("resnet18_bf16", desc="d")
    for res, ms in ((row.eager, 2.0), (row.inductor, 1.0), (row.sdk, 1.05)):
        res.ms, res.profile = ms, prof
    row.inductor.check = row.sdk.check = "ok"
    row.sdk.profile = {"error": "RuntimeError: no CUPTI"}
    text = bench_models.profile_text([row], cuda=True)
    assert "resnet18_bf16" in text and "2 launches" in text and "conv 1/0.050" in text
    assert "profile failed: RuntimeError: no CUPTI" in text
    model, dtype = bench_models.rows()["resnet18_bf16"]
    out = bench_models._row_json(row, model, dtype, "full", cuda=True)
    assert out["profile"]["inductor"]["launches"] == 2
    assert out["profile"]["sdk"] == {"error": "RuntimeError: no CUPTI"}
    assert out["sdk_over_inductor"] == pytest.approx(1.05)
    assert out["sdk_over_best"] == pytest.approx(1.05) and out["target"] == "met"
    assert "CUDA only" in bench_models.profile_text([row], cuda=False)
    table, summary = bench_models.table([row])
    assert "met" in table and summary["targets"]["sdk_over_best_met"] == 1


def test_plot_draws_missing_ratios_as_na(tmp_path):
    if not _has_matplotlib():
        pytest.skip("matplotlib is not installed (the test extra installs it)")
    from sdk.tools import bench_plot

    rows = [
        {"name": "a_fp32", "sdk_over_inductor": 0.8, "sdk_over_eager": 0.5},
        {"name": "b_fp32", "sdk_over_inductor": None, "sdk_over_eager": None},  # a mismatch
    ]
    path = tmp_path / "r.svg"
    assert bench_plot.plot(rows, str(path), "t") == 1
    svg = path.read_text()
    assert "n/a" in svg and "a_fp32" in svg and "b_fp32" in svg


def test_plot_without_matplotlib_is_one_line_before_the_run(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises
    rc = cli.main(["bench", "--only", "pw_chain", "--plot", str(tmp_path / "p.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "matplotlib" in err[0] and "torch-backend-sdk[plot]" in err[0]
    assert not (tmp_path / "p.json").exists()


def test_each_backend_compiles_a_code_object_of_its_own():
    """Dynamo keeps compiled entries per code object: two backends compiled on the same
    module's forward made each call of the one compiled first fail the other's guards (17 us
    a call on the CPU, 29 on an H200 host: the whole margin of a bs1 row)."""
    model = torch.nn.Linear(4, 2)
    first, second = bench_timing._own_code(model), bench_timing._own_code(model)
    assert first.__code__ is not second.__code__
    x = torch.randn(3, 4)
    torch.testing.assert_close(first(x), model(x))
    torch.testing.assert_close(second(input=x), model(x))
