#!/usr/bin/env bash
# Device runs, batched: bash scripts/gpu_check.sh budget|tests|bench|all|regime|final|gate|ttf|check|soak|last|leak|gpusoak|breadth|hostcpu|ci|nearlimit|docs
#   budget: time to a figure with the default budget (first bench, 9 bf16 shapes, the GEMM A/B),
#           the budget CI calibration, the GPU tests, the ceilings per precision, the drop-in
#   check: the GPU tests (pytest -m gpu), then time to a figure (as ttf)
#   ci: benchmarks/gpu_ci_calibration.py (how often each run's CI holds the other runs' median:
#       two capped GEMMs and two adds, CI_RUNS runs each, and a CI_LONG_S run of each GEMM);
#       every run's samples in h200_ci_calibration_samples.npz; TTF=1 adds time to a figure
#   hostcpu: the CPU benchmarks (cpu_time_to_figure.py, cpu_ci_calibration.py) on the GPU
#            machine's host CPU (16 vCPUs, a 300 MB L3 in sysfs) beside the 2-core CI VM;
#            pytest-benchmark from wheels carried in .whl/pb (`pip download --no-deps -d .whl/pb
#            pytest-benchmark==5.2.3 py-cpuinfo`; without them those rounds are left out)
#   breadth: the GPU tests, then benchmarks/gpu_breadth.py (kbench's defaults on other kinds of
#            callables against a cold, queued torch.profiler) with what is left of BREADTH_BUDGET_S
#   nearlimit: the GPU tests, then benchmarks/gpu_near_limit.py (loads near the power limit, or
#              that reach it once timed: time course from idle, kbench's defaults, a long bench);
#              TTF=1 adds time to a figure
#   ttf: benchmarks/gpu_time_to_figure.py alone (a second call after `final`, whose capped GEMMs
#        now sample until their widened CI is met: both together may not fit one 600 s call),
#        with each kbench case's NVML trace, and benchmarks/settle_replay.py over those traces
#   gpusoak: the GPU tests (pytest -m gpu), then the soak of every mode (250 benches x 4);
#            TTF=1 adds benchmarks/gpu_time_to_figure.py
#   final: peaks, the GPU tests, the regression gate and benchmarks/gpu_regime.py; TTF=1 adds
#          benchmarks/gpu_time_to_figure.py (with FlashInfer's timer where .whl/flashinfer is
#          carried: scripts/fetch_flashinfer_timer.sh)
#   tests: build, kbench info, kbench peaks, the whole pytest suite (GPU tests included)
#   bench: build, benchmarks/gpu_agreement.py, the vLLM-style drop-in script twice, the GPU notebook,
#          the docs' GPU blocks (as docs)
#   gate: the GPU tests, the regression gate (unchanged three times, a planted 2x once), the
#         docs' GPU blocks
#   docs: the code blocks of docs/*.md marked <!-- gpu --> (tests/test_docs_blocks.py runs the
#         others on the CPU and writes these out), each run with $PY
#   regime: build, kbench peaks, the GPU tests, benchmarks/gpu_regime.py (figures against the
#          GPU's history, both regimes; graph-cold) and a pytest regression gate re-run three
#          times against its own baseline
# Prints a short table last (scripts/gpu_summary.py over the files in $OUT). Results land in
# $OUT (the device tool brings back at most 8 files, so logs that only matter on failure stay
# in $LOGS and are tailed here instead).
# KBENCH_GIT_COMMIT: the commit being tested, from the sender (a copied tree's .git can lag).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kbench_out}; mkdir -p "$OUT"
LOGS=${LOGS:-/tmp/kbench_logs}; mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 KBENCH_CACHE_DIR="${KBENCH_CACHE_DIR:-$LOGS/cache}" MPLBACKEND=Agg
PY=${PY:-python3}
mode=${1:-all}
# benchmarks/gpu_time_to_figure.py, with FlashInfer's CUPTI timer where .whl/flashinfer was
# carried (scripts/fetch_flashinfer_timer.sh: its timer's file and the cupti-python wheel)
# FI: the arguments that give gpu_time_to_figure.py FlashInfer's timer (empty without it)
flashinfer_args() {
  FI=()
  if [ -f .whl/flashinfer/flashinfer_testing_utils.py ]; then
    FI=(--flashinfer-utils .whl/flashinfer/flashinfer_testing_utils.py)
    rm -rf "$LOGS/fi_site"
    # a wheel is a zip: unpacked with its dist-info, which FlashInfer reads for the version
    if $PY -m zipfile -e .whl/flashinfer/cupti_python-*.whl "$LOGS/fi_site" > "$LOGS/fi_unpack.log" 2>&1; then
      FI+=(--flashinfer-site "$LOGS/fi_site")
    else
      echo "cupti-python did not unpack (FlashInfer falls back to CUDA events):"; tail -3 "$LOGS/fi_unpack.log"
    fi
  fi
}
time_to_figure() {
  flashinfer_args
  local fi=(${FI[@]+"${FI[@]}"})
  timeout 150 $PY benchmarks/gpu_time_to_figure.py --budget-s 80 ${fi[@]+"${fi[@]}"} \
    --out "$OUT/h200_time_to_figure.json" --md "$OUT/h200_time_to_figure.md" \
    --traces "$OUT/h200_time_to_figure_traces.json" 2>&1 | tail -18
  echo "== the carried settle rule replayed on those traces (refresh margins)"
  if [ -f "$OUT/h200_time_to_figure_traces.json" ]; then
    timeout 60 $PY benchmarks/settle_replay.py "$OUT/h200_time_to_figure_traces.json" \
      "$OUT/h200_time_to_figure.json" --md "$OUT/h200_settle_replay.md" 2>&1 | tail -16
  else
    echo "no traces were written (the time-to-figure run failed before its first save)"
  fi
}
# the GPU tests (pytest -m gpu) within GPU_TESTS_S, their log in $OUT
gpu_tests() {
  echo "== GPU tests (pytest -m gpu)"
  timeout "${GPU_TESTS_S:-210}" $PY -m pytest -q -rfEs --tb=short --timeout=120 -m gpu tests/ 2>&1 \
    | tee "$OUT/h200_pytest_gpu.log" | grep -E "^(FAILED|ERROR)|^E |passed|failed" | head -30
}
# the docs' code blocks marked <!-- gpu -->, written out by tests/test_docs_blocks.py with their
# page's files beside them; python blocks run with $PY, bash blocks with bash
docs_gpu_blocks() {
  echo "== docs: the code blocks marked <!-- gpu -->"
  rm -rf "$LOGS/docs_gpu"
  $PY tests/test_docs_blocks.py --emit-gpu "$LOGS/docs_gpu" > "$LOGS/docs_gpu.list" 2> "$LOGS/docs_gpu.err" \
    || { echo "could not write them out:"; tail -3 "$LOGS/docs_gpu.err"; return; }
  local f rc run
  while read -r f; do
    case "$f" in *.py) run=($PY "$f") ;; *) run=(bash "$f") ;; esac
    (cd "$LOGS/docs_gpu" && timeout "${DOCS_BLOCK_S:-120}" "${run[@]}") > "$f.log" 2>&1
    rc=$?; echo "$(basename "$f") rc=$rc"; [ $rc = 0 ] || tail -8 "$f.log"
  done < "$LOGS/docs_gpu.list"
}
# a user's regression gate (benchmarks/regime_gate): saved, compared unchanged three times at 8%
# (each must pass: rc 0), then once with a planted 2x (each GEMM twice: it must fail, rc 1)
regression_gate() {
  echo "== regression gate: save, compare unchanged three times and a planted 2x once (8%)"
  rm -f "$LOGS/gate_base.json"
  { timeout 90 $PY -m pytest -q -p no:cacheprovider benchmarks/regime_gate --kbench-save="$LOGS/gate_base.json" 2>&1 | tail -1
    for i in 1 2 3 planted; do
      KBENCH_GATE_PLANT=$([ $i = planted ] && echo 1 || echo 0) timeout 90 $PY -m pytest -q -p no:cacheprovider \
        benchmarks/regime_gate --kbench-compare="$LOGS/gate_base.json" --kbench-fail=8% 2>&1 \
        | grep -E "test_gemm|passed|failed" | tail -5; echo "gate run $i rc=${PIPESTATUS[0]}"
    done; } 2>&1 | tee "$OUT/gate.txt"
}
# TTF=1 adds time to a figure to a mode
time_to_figure_if_asked() {
  if [ "${TTF:-0}" = 1 ]; then
    echo "== time to a figure"
    time_to_figure
  fi
}
echo "== build"
if [ "${KBENCH_PREBUILT:-0}" = 1 ] && $PY -c "import kbench._core" 2>/dev/null; then
  # not installed, so no pytest11 entry point: name the plugin, as the installed package would
  echo "(a _core built for this Python was carried: no build)"; export PYTHONPATH=$PWD PYTEST_PLUGINS=kbench.workflow.pytest_plugin
else
$PY -m pip install -q --no-build-isolation --no-deps -e . > "$LOGS/build.log" 2>&1 \
  || { echo "pip -e failed, building in place"; tail -5 "$LOGS/build.log"; $PY setup.py -q build_ext --inplace 2>&1 | tail -20; export PYTHONPATH=$PWD; }
fi
$PY -c "import kbench._core as c; print('HAVE_CUDA', c.HAVE_CUDA)" || exit 1
{ echo "commit ${KBENCH_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)} (checkout's own HEAD: $(git rev-parse --short HEAD 2>/dev/null))"
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,memory.used --format=csv 2>&1
} | tee "$([ "$mode" = budget ] && echo "$LOGS" || echo "$OUT")/env.txt"
if [ "$mode" = tests ] || [ "$mode" = all ]; then
  echo "== info"; $PY -m kbench info 2>&1 | tee "$OUT/info.txt" | tail -8
  echo "== peaks"; timeout 150 $PY -m kbench peaks --seconds 2 2>&1 | tee "$OUT/peaks.txt"
  echo "== tests"
  timeout "${TESTS_S:-420}" $PY -m pytest -q -rfEs --tb=short --timeout=90 tests/ 2>&1 | tee "$OUT/pytest.log" \
    | grep -E "^(FAILED|ERROR|SKIPPED)|^E |passed|failed" | head -60
fi
if [ "$mode" = regime ]; then
  echo "== peaks"; timeout 150 $PY -m kbench peaks --seconds 2 2>&1 | tee "$OUT/peaks.txt" | tail -6
  echo "== GPU tests"
  timeout 300 $PY -m pytest -q -rfEs --tb=short --timeout=120 tests/test_gpu_regime.py \
    tests/test_gpu_bench.py tests/test_workflow_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log" \
    | grep -E "^(FAILED|ERROR)|^E |passed|failed" | head -30
  regression_gate
  echo "== soak: device memory and RSS over rounds of short benches"
  timeout 200 $PY benchmarks/gpu_soak.py --benches "${SOAK_BENCHES:-100}" --rounds "${SOAK_ROUNDS:-3}" \
    --out "$OUT/h200_soak.json" 2>&1 | grep -E "growth|round|released" | tail -12
  echo "== regime benchmark"
  (cd benchmarks && timeout 330 $PY gpu_regime.py --out "$OUT/h200_regime.json" --md "$OUT/h200_regime.md" 2>&1 | tail -40)
fi
if [ "$mode" = final ]; then
  echo "== peaks"; timeout 150 $PY -m kbench peaks --seconds 2 2>&1 | tee "$OUT/peaks.txt" | tail -5
  echo "== GPU tests (pytest -m gpu)"
  timeout 260 $PY -m pytest -q -rfEs --tb=short --timeout=120 -m gpu tests/ 2>&1 \
    | tee "$OUT/pytest_gpu.log" | grep -E "^(FAILED|ERROR)|^E |passed|failed" | head -30
  regression_gate
  echo "== regime benchmark"
  (cd benchmarks && timeout 240 $PY gpu_regime.py --out "$OUT/h200_regime.json" --md "$OUT/h200_regime.md" 2>&1 | tail -34)
  time_to_figure_if_asked
fi
if [ "$mode" = gate ]; then
  gpu_tests
  regression_gate
  docs_gpu_blocks
fi
if [ "$mode" = hostcpu ]; then
  echo "== host CPU"; { nproc; lscpu | grep -E "Model name|^CPU\(s\)|L3|Thread|Hypervisor"; uptime; } 2>&1 | tee "$OUT/host.txt"
  pbs=()
  if ls .whl/pb/*.whl > /dev/null 2>&1; then
    rm -rf "$LOGS/pb" && $PY -m pip install -q --no-deps --no-index --target "$LOGS/pb" .whl/pb/*.whl 2>&1 | tail -2
    export PYTHONPATH="${PYTHONPATH:-$PWD}:$LOGS/pb"
  else
    pbs=(--no-pytest-benchmark)
  fi
  # the kbench plugin is named by PYTEST_PLUGINS only for the GPU suite; the pytest-benchmark
  # rounds run without it, as a user of that tool would
  unset PYTEST_PLUGINS
  echo "== CPU time to a figure: kbench vs timeit vs pytest-benchmark"
  timeout 330 $PY benchmarks/cpu_time_to_figure.py --rounds "${CPU_ROUNDS:-7}" --out-dir "$OUT" \
    --stem h200host_cpu_time_to_figure \
    ${pbs[@]+"${pbs[@]}"} 2>&1 | tail -12
  echo "== CPU CI calibration"
  timeout 200 $PY benchmarks/cpu_ci_calibration.py --out-dir "$OUT" --stem h200host_cpu_ci_calibration \
    2>&1 | tail -8
fi
if [ "$mode" = ci ]; then
  echo "== CI calibration (GPU)"
  timeout "${CI_CAL_S:-420}" $PY benchmarks/gpu_ci_calibration.py --runs "${CI_RUNS:-8}" \
    --long-s "${CI_LONG_S:-20}" --out "$OUT/h200_ci_calibration.json" \
    --md "$OUT/h200_ci_calibration.md" --samples "$OUT/h200_ci_calibration_samples.npz" 2>&1 | tail -40
  time_to_figure_if_asked
fi
if [ "$mode" = nearlimit ]; then
  gpu_tests
  echo "== loads near the power limit: time course, defaults, long bench"
  (cd benchmarks && timeout "${NEAR_LIMIT_S:-220}" $PY gpu_near_limit.py --out "$OUT/h200_near_limit.json" \
    --md "$OUT/h200_near_limit.md" 2>&1 | tail -40)
  time_to_figure_if_asked
fi
if [ "$mode" = docs ]; then
  docs_gpu_blocks
fi
if [ "$mode" = ttf ]; then
  echo "== time to a figure"
  time_to_figure
fi
if [ "$mode" = check ]; then
  gpu_tests
  echo "== time to a figure"
  time_to_figure
fi
if [ "$mode" = breadth ]; then
  gpu_tests
  rest=$(( ${BREADTH_BUDGET_S:-580} - SECONDS ))
  echo "== breadth: kbench defaults against a cold, queued torch.profiler ($rest s left; the json keeps every case done)"
  [ "$rest" -gt 30 ] && timeout "$rest" $PY benchmarks/gpu_breadth.py --out "$OUT/h200_breadth.json" \
    --md "$OUT/h200_breadth.md" 2>&1 | tail -25
fi
if [ "$mode" = gpusoak ]; then
  gpu_tests
  echo "== soak: 1000 benches per mode"
  timeout "${SOAK_S:-150}" $PY benchmarks/gpu_soak.py --benches 250 --rounds 4 --out "$OUT/h200_soak.json" \
    2>&1 | grep -E "growth|round|released|before"
  time_to_figure_if_asked
fi
if [ "$mode" = soak ]; then
  echo "== peaks (burst)"; timeout 150 $PY -m kbench peaks --seconds 2 2>&1 | tee "$OUT/peaks.txt" | tail -4
  echo "== CUPTI attach tests"
  timeout 150 $PY -m pytest -q -rfEs --tb=short --timeout=120 tests/test_gpu_regime.py \
    tests/test_gpu_bench.py -k "detach or back_to_back or profiler or regime or burst" 2>&1 \
    | tee "$OUT/pytest_gpu_attach.log" | grep -E "^(FAILED|ERROR)|^E |passed|failed" | head -20
  echo "== soak: 1000 benches per mode"
  timeout 260 $PY benchmarks/gpu_soak.py --benches 250 --rounds 4 --out "$OUT/h200_soak.json" 2>&1 | grep -E "growth|round|released"
  echo "== regime benchmark"
  (cd benchmarks && timeout 200 $PY gpu_regime.py --out "$OUT/h200_regime.json" --md "$OUT/h200_regime.md" 2>&1 | grep -E "^\| (sus|bur|clamp)|^- " | head -40)
fi
if [ "$mode" = last ]; then
  echo "== GPU tests (pytest -m gpu)"
  timeout 220 $PY -m pytest -q -rfEs --tb=short --timeout=120 -m gpu tests/ 2>&1 \
    | tee "$OUT/pytest_gpu.log" | grep -E "^(FAILED|ERROR)|^E |passed|failed" | head -30
  echo "== the cp312 wheel installed with --no-deps, against the source build"
  rm -rf /tmp/kbwheel
  $PY -m pip install -q --no-deps --no-index --target /tmp/kbwheel .whl/kbench-*-cp312-*.whl 2>&1 | tail -2
  REPO=$PWD
  (cd /tmp && PYTHONPATH=/tmp/kbwheel timeout 90 $PY "$REPO/benchmarks/gpu_wheel_check.py" --label wheel \
     --out "$OUT/h200_wheel_wheel.json" | cut -c1-400)
  (cd /tmp && timeout 90 $PY "$REPO/benchmarks/gpu_wheel_check.py" --label source \
     --out "$OUT/h200_wheel_source.json" | cut -c1-400)
  echo "== graph soak: 1000 benches"
  timeout 130 $PY benchmarks/gpu_soak.py --modes graph --benches 250 --rounds 4 \
    --out "$OUT/h200_soak.json" 2>&1 | grep -E "growth|round|released"
  echo "== time to a figure (sweep and single cases, kbench and do_bench)"
  timeout 80 $PY benchmarks/gpu_time_to_figure.py --out "$OUT/h200_time_to_figure.json" 2>&1 | tail -6
fi
if [ "$mode" = leak ]; then
  echo "== GPU tests"
  timeout 200 $PY -m pytest -q -rfEs --tb=short --timeout=120 tests/test_gpu_regime.py \
    tests/test_gpu_bench.py -k "floor or regime or cold or facts or burst" 2>&1 | tail -4
  echo "== peaks"; timeout 150 $PY -m kbench peaks --seconds 2 2>&1 | tee "$OUT/peaks.txt" | tail -6
  echo "== soak cupti (default detach)"
  timeout 100 $PY benchmarks/gpu_soak.py --benches 100 --rounds 3 --modes cupti 2>&1 | grep -E "growth|round|released"
  echo "== soak cupti (KBENCH_CUPTI_DETACH=0)"
  KBENCH_CUPTI_DETACH=0 timeout 100 $PY benchmarks/gpu_soak.py --benches 100 --rounds 3 --modes cupti 2>&1 | grep -E "growth|round|released"
  echo "== soak graph"
  timeout 100 $PY benchmarks/gpu_soak.py --benches 50 --rounds 3 --modes graph 2>&1 | grep -E "growth|round|released"
fi
if [ "$mode" = wrap ]; then
  # one short call (nvidia-h200-x2 where lent; else world 1), most needed first: the TP GEMM in both modes, the
  # world-1 agreement and stream= tests, time to a figure, the soak of every mode
  echo "== canary: one bench per mode, printed as a user sees it"
  timeout 40 $PY -c "
import torch, kbench
x = torch.randn(1 << 22, device='cuda'); y = torch.empty_like(x)
for m in ('cupti', 'events', 'graph'):
    print(kbench.bench(torch.mul, x, 2.0, kwargs={'out': y}, mode=m, max_time_s=0.3))
" 2>&1 | tail -60
  ngpu=$(nvidia-smi -L | wc -l); nproc=$(( ngpu >= 2 ? 2 : 1 ))
  echo "== TP GEMM + reduce_scatter on $nproc GPU(s), eager and graph (stream=side)"
  timeout 75 $PY -m torch.distributed.run --nproc_per_node=$nproc benchmarks/gpu_multi.py --phases tp \
    --max-time-s 0.5 --out "$OUT/h200x${nproc}_tp.json" --md "$OUT/h200x${nproc}_tp.md" > "$LOGS/tp.log" 2>&1
  rc=$?; echo "tp rc=$rc"; [ $rc = 0 ] || cp "$LOGS/tp.log" "$OUT/tp.log"
  grep -E "^\| (events|graph)" "$OUT/h200x${nproc}_tp.md" 2>/dev/null || tail -5 "$LOGS/tp.log"
  echo "== GPU tests: world 1 against the single-GPU path, stream=, graph mode, the regimes"
  timeout 90 $PY -m pytest -q -rfEs --tb=short --timeout=60 tests/test_distributed_gpu.py \
    tests/test_gpu_bench.py tests/test_gpu_regime.py \
    -k "world_size_1 or stream_passed or graph_mode or names_its_regime or burst_batches" 2>&1 \
    | tee "$OUT/pytest_gpu.log" | grep -E "^(FAILED|ERROR)|^E |passed|failed|single-GPU path" | head -12
  echo "== time to a figure"
  timeout 70 $PY benchmarks/gpu_time_to_figure.py --out "$OUT/h200_time_to_figure.json" \
    --md "$OUT/h200_time_to_figure.md" 2>&1 | tail -14
  echo "== soak: every mode, ${SOAK_BENCHES:-250} benches x 4 rounds (#12)"
  timeout 160 $PY benchmarks/gpu_soak.py --modes cupti,events,graph --benches "${SOAK_BENCHES:-250}" \
    --rounds 4 --out "$OUT/h200_soak.json" 2>&1 | grep -E "growth"
  echo "== the rest of the GPU suite, one line a test (appended to pytest_gpu.log; cut by the timeout)"
  rest=$(( ${WRAP_BUDGET_S:-210} - SECONDS )); echo "($rest s left of WRAP_BUDGET_S)"
  [ "$rest" -gt 15 ] && timeout "$rest" $PY -m pytest -v -p no:cacheprovider -rfE --tb=line --timeout=60 -m gpu tests/ \
    --deselect tests/test_distributed_gpu.py -k "not (stream_passed or graph_mode or names_its_regime or burst_batches)" \
    2>&1 | tee -a "$OUT/pytest_gpu.log" | grep -E "FAILED|ERROR|passed|failed" | head -30
fi
if [ "$mode" = budget ]; then
  # issue 44's record in one call, most needed first: time to a figure (first bench, the 9-shape
  # sweep, the GEMM A/B) with kbench's new defaults against do_bench; the CI calibration of the
  # default (burst) on a capped GEMM and an add; the GPU tests; the ceilings and the drop-in
  echo "== time to a figure: first bench, 9 shapes, A/B (defaults)"
  flashinfer_args
  timeout "${TTF_S:-150}" $PY benchmarks/gpu_time_to_figure.py --sections first,shapes,ab,flashinfer \
    ${FI[@]+"${FI[@]}"} \
    --out "$OUT/gpu_time_to_figure.json" --md "$OUT/gpu_time_to_figure.md" 2>&1 | tail -28
  echo "== CI calibration of the default budget"
  timeout "${CAL_S:-110}" $PY benchmarks/ci_budget_calibration.py --device cuda --runs 10 --gap-s 1 \
    --cases "bf16 mm 4096x28672x4096,add 64M f32" --regimes default \
    --out "$OUT/gpu_ci_budget.json" --md "$OUT/gpu_ci_budget.md" 2>&1 | tail -6
  echo "== ceilings per precision"
  timeout "${CEIL_S:-100}" $PY benchmarks/gpu_ceilings.py --out "$OUT/gpu_ceilings.json" \
    --md "$LOGS/gpu_ceilings.md" 2>&1 | tail -3; cat "$LOGS/gpu_ceilings.md" 2>/dev/null | head -40
  echo "== drop-in bench_gpu_time against FlashInfer's"
  timeout "${DROPIN_S:-40}" $PY benchmarks/gpu_dropin_flashinfer.py --out "$OUT/gpu_dropin_flashinfer.json" 2>&1 | tail -4
  gpu_tests
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  # the notebook's peak line and the % of peak: measured, unless this GPU's ceilings are cached
  # (the cache directory alone may hold only CPU peaks: then the line was the theoretical one)
  ls "$KBENCH_CACHE_DIR"/gpu-peaks-*.json > /dev/null 2>&1 \
    || timeout 150 $PY -m kbench peaks --seconds 2 > "$LOGS/peaks.txt" 2>&1
  echo "== drop-in: the same vLLM-style script with triton's and kbench's imports"
  KBENCH_DROPIN=triton timeout 90 $PY benchmarks/gpu_dropin_vllm.py --out "$OUT" 2>&1 | tail -6
  KBENCH_DROPIN=kbench timeout 120 $PY benchmarks/gpu_dropin_vllm.py --out "$OUT" 2>&1 | tail -6
  echo "== GPU notebook"
  timeout 120 $PY notebooks/run_notebook_as_script.py notebooks/gpu_kernels.ipynb "$OUT/gpu_notebook.png" > "$LOGS/gpu_notebook.log" 2>&1; echo "notebook rc=$?"; tail -3 "$LOGS/gpu_notebook.log"
  docs_gpu_blocks
  echo "== agreement"
  timeout 380 $PY benchmarks/gpu_agreement.py --out "$OUT/h200_agreement.json" --md "$OUT/h200_agreement.md" \
    2>&1 | tee "$LOGS/agreement.log" | tail -22
fi
# last, whatever the mode: a short table of the results it left in $OUT
$PY scripts/gpu_summary.py "$OUT"
