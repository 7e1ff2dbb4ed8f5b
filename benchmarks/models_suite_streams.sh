#!/usr/bin/env bash
# The models suite on a 2-GPU host in one call: 8 processes side by side, 4 per card, each
# pinned to 4 cores (taskset), one `python -m sdk bench --suite models --profile` process per
# row (a row's eager, Inductor and sdk in one process, in interleaved rounds, as always).
# Rows from $ROWS (default: the bf16 rows and resnet50_train_fp32); the rows' JSON merged
# into $OUT/suite.json and the tails of their logs into $OUT/logs.txt (the device tool
# returns 8 files). Each process is cut at $LIMIT seconds from the start (default 575).
#   OUT=out bash benchmarks/models_suite_streams.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-suite-out}; LIMIT=${LIMIT:-575}; mkdir -p "$OUT"
python3 -m pip install --no-deps --no-build-isolation -q -e . >/dev/null 2>&1
work=$(mktemp -d)
# (the heaviest rows first, so that each stream starts with one)
default="resnet50_train_bf16 mobilenet_v3_large_train_bf16 efficientnet_b0_train_bf16
 regnety_008_train_bf16 timm_resnet50_train_bf16 timm_convnext_tiny_train_bf16 convnext_tiny_train_bf16
 hf_convnext_tiny_train_bf16 t5_train_bf16 whisper_train_bf16 mixtral_train_bf16 gpt2_train_bf16
 distilbert_train_bf16 qwen2_train_bf16 swin_tiny_bf16 efficientnet_b0_bf16 mobilenet_v3_large_bf16
 regnety_008_bf16 timm_convnext_tiny_bf16 convnext_tiny_bf16 deit_tiny_bf16 resnet34_bf16 resnet18_bf16
 resnet50_train_fp32 bart_train_bf16"
# shellcheck disable=SC2206
rows=(${ROWS:-$default})
stream() {
    local i=$1 card=$(($1 % 2)) lo=$(($1 * 4))
    for ((k = i; k < ${#rows[@]}; k += 8)); do
        local r=${rows[$k]} left=$((LIMIT - SECONDS))
        ((left > 15)) || left=15
        CUDA_VISIBLE_DEVICES=$card taskset -c $lo-$((lo + 3)) timeout $left \
            python3 -m sdk bench --suite models --profile --only "$r" --json "$work/$r.json" \
            >"$work/$r.log" 2>&1
    done
}
for s in 0 1 2 3 4 5 6 7; do stream $s & done
wait
WORK=$work OUT=$OUT python3 - <<'P'
import glob, json, os
rows = {os.path.basename(f)[:-5]: json.load(open(f)) for f in sorted(glob.glob(os.environ["WORK"] + "/*.json"))}
json.dump(rows, open(os.environ["OUT"] + "/suite.json", "w"), indent=1)
print(f"{len(rows)} rows in {os.environ['OUT']}/suite.json")
P
for f in "$work"/*.log; do echo "== $f"; tail -25 "$f"; done >"$OUT/logs.txt"
rm -rf "$work"
