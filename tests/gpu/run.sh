#!/usr/bin/env bash
# The GPU suite in one call, on a lent GPU machine (torch and Triton preinstalled, no
# network): install the project, then
#   1. tests/gpu (the reported crashes, models, fp32 and bf16 training) and the op,
#      model, dynamic and mutation suites through cuda_triton on the GPU;
#   2. the mode matrix (tests/gpu/test_mode_matrix.py): each model trained and run for
#      inference in default, reduce-overhead and dynamic modes, fp32 and bf16, vs eager;
#   3. compute-sanitizer memcheck over small graphs of each kernel shape;
#   4. the OpInfo first-sample sweep, sdk:cuda_triton beside Inductor.
# Everything runs as a user's process would, the compile workers (sdk.workers) included: the
# sanitizer follows them too (its default, --target-processes all).
# Writes logs under $OUT (or ./gpu-out) and prints a short summary last.
#   STEPS="tests matrix sanitize sweep" SWEEP_BUDGET=420 PYTEST_N=6 bash tests/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
STEPS=${STEPS:-"tests matrix sanitize sweep"}
export PYTHONUNBUFFERED=1
# one install at a time: two streams of one call (a card each) start run.sh together, and
# concurrent pip installs of the project race over its entry-point script
flock /tmp/sdk-gpu-install.lock \
    python3 -m pip install --no-deps --no-build-isolation -q -e . >"$OUT/install.log" 2>&1 \
    || { cat "$OUT/install.log"; exit 1; }
# the OpInfo database imports expecttest, which the GPU image lacks: carried as a wheel in
# .whl/ (python3 -m pip download --no-deps -d .whl expecttest), installed aside
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
summary=()
if [[ " $STEPS " == *" tests "* ]]; then
    python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n ${PYTEST_N:-6} \
        --ignore=tests/gpu/test_mode_matrix.py ${PYTEST_ARGS:-tests/gpu tests/e2e/test_ops.py tests/e2e/test_models.py tests/e2e/test_dynamic.py tests/e2e/test_mutation.py tests/plugins/cuda_triton/test_pad_mm.py tests/core/test_layout.py tests/core/test_scatters.py tests/core/test_stage_reuse.py tests/e2e/test_softmax.py tests/core/test_recompute_cost.py tests/core/test_scheduler_incremental.py tests/contract/test_runtime.py tests/plugins/cudagraphs/test_cudagraphs_policy.py tests/e2e/test_symbolic_sizes.py tests/core/test_index_add_in_place.py tests/core/test_permutations.py tests/e2e/test_reproducible.py tests/plugins/cuda_triton/test_split_reductions.py tests/plugins/cuda_triton/test_gathers_along_reduction.py tests/plugins/cuda_triton/test_symbolic_launch.py tests/plugins/cuda_triton/test_compile_workers.py tests/core/test_warm_start.py tests/core/test_aot_key_memo.py tests/core/test_round_intermediates.py tests/tools/test_fresh.py tests/core/test_equal_sizes.py tests/core/test_max_pool_offsets.py} \
        >"$OUT/pytest.log" 2>&1
    summary+=("pytest: $(tail -1 "$OUT/pytest.log")")
    grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -30
fi
if [[ " $STEPS " == *" matrix "* ]]; then
    python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n ${PYTEST_N:-6} -rA \
        tests/gpu/test_mode_matrix.py >"$OUT/matrix.log" 2>&1
    summary+=("mode matrix: $(tail -1 "$OUT/matrix.log")")
    # one line per case: model, mode, dtype, train/infer and PASSED/FAILED
    grep -oE "^(PASSED|FAILED) tests/gpu/test_mode_matrix.py::test_mode_matrix\[[^]]*\]" \
        "$OUT/matrix.log" | sed -E 's/tests.*\[(.*)\]/\1/' | sort -k2 | awk '{printf "  %-7s %s\n", $1, $2}' | head -60
fi
if [[ " $STEPS " == *" sanitize "* ]]; then
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --print-limit 20 \
        python3 tests/gpu/sanitize_graphs.py >"$OUT/sanitize.log" 2>&1
    summary+=("compute-sanitizer: $(grep -E 'ERROR SUMMARY' "$OUT/sanitize.log" | tail -1); $(grep -E 'sanitize_graphs:' "$OUT/sanitize.log")")
    grep -E "Invalid|MISMATCH|Error" "$OUT/sanitize.log" | head -20
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --print-limit 20 \
        python3 tests/gpu/sanitize_graphs.py --dynamic >"$OUT/sanitize_dyn.log" 2>&1
    summary+=("compute-sanitizer (dynamic): $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_dyn.log" | tail -1); $(grep -E 'sanitize_graphs:' "$OUT/sanitize_dyn.log")")
    grep -E "Invalid|MISMATCH|Error" "$OUT/sanitize_dyn.log" | head -20
    # CUDA graphs record into the caching allocator's private pools: run with it on
    compute-sanitizer --tool memcheck --print-limit 20 \
        python3 tests/gpu/sanitize_graphs.py --cudagraphs >"$OUT/sanitize_cg.log" 2>&1
    summary+=("compute-sanitizer (cudagraphs): $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_cg.log" | tail -1); $(grep -E 'sanitize_graphs:' "$OUT/sanitize_cg.log")")
    grep -E "Invalid|MISMATCH|Error" "$OUT/sanitize_cg.log" | head -20
fi
if [[ " $STEPS " == *" sweep "* ]]; then
    python3 tests/gpu/opinfo_sweep.py --workers ${SWEEP_WORKERS:-12} --budget ${SWEEP_BUDGET:-420} \
        --json "$OUT/opinfo.json" >"$OUT/opinfo.log" 2>&1
    sed -n '/OpInfo first-sample sweep/,$p' "$OUT/opinfo.log" | head -60
fi
printf '%s\n' "${summary[@]}"
