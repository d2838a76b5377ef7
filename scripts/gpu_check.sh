#!/usr/bin/env bash
# Device runs, batched: bash scripts/gpu_check.sh tests|bench|all
#   tests: build, kbench info, kbench peaks, the whole pytest suite (GPU tests included)
#   bench: build, benchmarks/gpu_agreement.py, the vLLM-style drop-in script twice, the GPU notebook
# Prints a short table last. Results land in $OUT (the device tool brings them back).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kbench_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR="${KBENCH_CACHE_DIR:-$OUT/cache}" MPLBACKEND=Agg
PY=${PY:-python3}
mode=${1:-all}
echo "== build"
$PY -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 \
  || { echo "pip -e failed, building in place"; tail -5 "$OUT/build.log"; $PY setup.py -q build_ext --inplace 2>&1 | tail -20; export PYTHONPATH=$PWD; }
$PY -c "import kbench._core as c; print('HAVE_CUDA', c.HAVE_CUDA)" || exit 1
git rev-parse HEAD 2>/dev/null | tee "$OUT/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
if [ "$mode" = tests ] || [ "$mode" = all ]; then
  echo "== info"; $PY -m kbench info 2>&1 | tee "$OUT/info.txt" | tail -8
  echo "== peaks"; timeout 150 $PY -m kbench peaks --seconds 2 2>&1 | tee "$OUT/peaks.txt"
  echo "== tests"
  timeout 200 $PY -m pytest -q -rfEs --tb=short --timeout=90 tests/ 2>&1 | tee "$OUT/pytest.log" \
    | grep -E "^(FAILED|ERROR|SKIPPED)|^E |passed|failed" | head -60
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  [ -d "$KBENCH_CACHE_DIR" ] || timeout 150 $PY -m kbench peaks --seconds 2 > "$OUT/peaks.txt" 2>&1
  echo "== drop-in: the same vLLM-style script with triton's and kbench's imports"
  KBENCH_DROPIN=triton timeout 90 $PY benchmarks/gpu_dropin_vllm.py --out "$OUT" 2>&1 | tail -6
  KBENCH_DROPIN=kbench timeout 120 $PY benchmarks/gpu_dropin_vllm.py --out "$OUT" 2>&1 | tail -6
  echo "== GPU notebook"
  timeout 120 $PY notebooks/run_notebook_as_script.py notebooks/gpu_kernels.ipynb "$OUT/gpu_notebook.png" > "$OUT/gpu_notebook.log" 2>&1; echo "notebook rc=$?"; tail -3 "$OUT/gpu_notebook.log"
  echo "== agreement"
  timeout 380 $PY benchmarks/gpu_agreement.py --out "$OUT/h200_agreement.json" --md "$OUT/h200_agreement.md" \
    2>&1 | tee "$OUT/agreement.log" | tail -14
fi
