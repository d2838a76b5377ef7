#!/usr/bin/env bash
# One device call: build kbench there, run every test (GPU tests included), the benchmarks,
# and print a short table last. Usage (device tool): bash scripts/gpu_check.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kbench_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR="$OUT/cache"
PY=${PY:-python3}
mode=${1:-full}
echo "== build"
$PY -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 \
  || { echo "pip -e failed, building in place"; tail -5 "$OUT/build.log"; $PY setup.py -q build_ext --inplace 2>&1 | tail -20; export PYTHONPATH=$PWD; }
$PY -c "import kbench._core as c; print('HAVE_CUDA', c.HAVE_CUDA)" || exit 1
echo "== info"
$PY -m kbench info 2>&1 | tee "$OUT/info.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used --format=csv 2>&1 | tee -a "$OUT/info.txt"
echo "== peaks"
[ "$mode" = tests ] || timeout 120 $PY -m kbench peaks --seconds 2 2>&1 | tee "$OUT/peaks.txt"
echo "== tests"
if [ "$mode" = quick ] || [ "$mode" = tests ]; then
  timeout 420 $PY -m pytest -v -rfE --tb=short --timeout=60 tests/test_gpu_bench.py tests/test_gpu_loaders.py 2>&1 | tee "$OUT/pytest.log" | grep -E "PASS|FAIL|ERROR|Error|error|Timeout|^E |File .*kbench|passed|failed" | head -120
else
  timeout 420 $PY -m pytest -q -ra tests/ 2>&1 | tee "$OUT/pytest.log" | tail -40
fi
if [ "$mode" != tests ]; then
  echo "== benchmarks"
  timeout 400 $PY benchmarks/gpu_agreement.py ${mode:+$( [ "$mode" = quick ] && echo --quick)} \
     --out "$OUT/h200_agreement.json" 2>&1 | tee "$OUT/agreement.log" | tail -25
  echo "== drop-in: the same vLLM-style script with triton's and kbench's imports"
  KBENCH_DROPIN=triton timeout 200 $PY benchmarks/gpu_dropin_vllm.py --out "$OUT" 2>&1 | tail -7
  KBENCH_DROPIN=kbench timeout 200 $PY benchmarks/gpu_dropin_vllm.py --out "$OUT" 2>&1 | tail -7
fi
cp -r "$OUT/cache" "$OUT/cache_copy" 2>/dev/null; true
