#!/usr/bin/env bash
# cupti_config_probe.sh -- build benchmarks/cupti_config_probe.c and run every CUPTI config,
# one process each, appending one JSON line per run to OUT and printing a table at the end.
#
#   [MATRIX=configs|flush] bash benchmarks/cupti_config_probe.sh [out.jsonl]
#   (default /tmp/cupti_probe.jsonl)
#
# Environment: N (launches per run, default 4000), LIBCUDA (a libcuda.so[.1] to link against,
# default: the driver's libcuda.so.1, else the toolkit's stubs), CUDA_HOME (default /usr/local/cuda),
# BIN (default /tmp/cupti_config_probe). Needs a GPU to run; builds without one.
set -u
cd "$(dirname "$0")/.."

OUT=${1:-/tmp/cupti_probe.jsonl}
N=${N:-4000}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
BIN=${BIN:-/tmp/cupti_config_probe}

find_libcuda() {
    if [ -n "${LIBCUDA:-}" ]; then echo "$LIBCUDA"; return 0; fi
    local c
    for c in /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 /usr/lib/libcuda.so.1 \
             "$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')" \
             "$CUDA_HOME/lib64/stubs/libcuda.so" "$CUDA_HOME/targets/x86_64-linux/lib/stubs/libcuda.so"; do
        if [ -n "$c" ] && [ -e "$c" ]; then echo "$c"; return 0; fi
    done
    return 1
}

CUPTI_LIBDIR=$CUDA_HOME/lib64
[ -e "$CUPTI_LIBDIR/libcupti.so" ] || CUPTI_LIBDIR=$CUDA_HOME/extras/CUPTI/lib64

if ! LIBCUDA_PATH=$(find_libcuda); then
    echo "cupti_config_probe.sh: no libcuda.so.1 (driver) nor $CUDA_HOME/lib64/stubs/libcuda.so" \
         "to link against; set LIBCUDA=/path/to/libcuda.so.1" >&2
    exit 1
fi

# libcuda is linked by path (the driver ships libcuda.so.1 without the libcuda.so dev link); its
# soname libcuda.so.1 is what the binary records, so the driver's copy is loaded at run time.
set -x
gcc -O2 -std=c11 -Wall -Wextra -pthread \
    -I"$CUDA_HOME/include" -I"$CUDA_HOME/extras/CUPTI/include" \
    benchmarks/cupti_config_probe.c -o "$BIN" \
    -L"$CUPTI_LIBDIR" -Wl,-rpath,"$CUPTI_LIBDIR" -lcupti "$LIBCUDA_PATH" -lm || exit 1
{ set +x; } 2>/dev/null

# MATRIX=configs: every CUPTI setting, bursts of 200 (first run, 2026-11-30: only the forced
# flush moved the figure). MATRIX=flush (default): the flush against burst size and a pre-roll.
if [ "${MATRIX:-flush}" = configs ]; then
  RUNS=(
    "conc gated_events" "conc_mem gated_events" "conc_api gated_events"
    "kbench gated_events" "kbench_nopush gated_events" "kbench_nosub gated_events"
    "kineto gated_events" "kbench_flush gated_events" "kbench_latency gated_events"
    "conc gated_bare" "kbench gated_bare"
    "conc host" "kbench host"
  )
else
  RUNS=(
    "kbench gated_events 200 0" "kbench_flush gated_events 200 0" "kbench_flush0 gated_events 200 0"
    "kbench gated_events 4 0" "kbench_flush gated_events 4 0" "kbench_flush0 gated_events 4 0"
    "kbench_flush_idle gated_events 4 0" "kbench_flush gated_events 4 2"
    "kbench_flush gated_events 4 8" "kbench_flush gated_events 200 2"
  )
fi

THIS_RUN=$(mktemp /tmp/cupti_probe_run.XXXXXX)
ERR=$(mktemp /tmp/cupti_probe_err.XXXXXX)
FAILED=0
trap 'rm -f "$THIS_RUN" "$ERR"' EXIT
for r in "${RUNS[@]}"; do
    set -- $r
    cfg=$1 pat=$2 burst=${3:-200} pre=${4:-0}
    echo "== $cfg $pat burst $burst preroll $pre" >&2
    timeout 60 "$BIN" "$cfg" "$N" "$pat" "$burst" "$pre" >>"$THIS_RUN" 2>"$ERR"
    rc=$?
    cat "$ERR" >&2
    if [ $rc -ne 0 ]; then
        FAILED=1
        echo "{\"config\": \"$cfg\", \"pattern\": \"$pat\", \"error\": \"exit $rc\"}" >>"$THIS_RUN"
        if grep -q "cuInit(0) failed" "$ERR"; then
            echo "cupti_config_probe.sh: no usable GPU; stopping" >&2
            break
        fi
    fi
done
cat "$THIS_RUN" >>"$OUT"
echo "appended $(wc -l <"$THIS_RUN") line(s) to $OUT" >&2

awk '
function num(key,   re) {
    re = "\"" key "\": -?[0-9.]+"
    if (!match($0, re)) return "-"
    return substr($0, RSTART + length(key) + 4, RLENGTH - length(key) - 4)
}
function str(key,   re) {
    re = "\"" key "\": \"[^\"]*\""
    if (!match($0, re)) return "-"
    return substr($0, RSTART + length(key) + 5, RLENGTH - length(key) - 6)
}
function tophist(   h, k, parts, i, j, m, bv, bc, used, out, best) {
    if (!match($0, /"hist": \{[^}]*\}/)) return "-"
    h = substr($0, RSTART + 9, RLENGTH - 10)
    m = split(h, parts, ", ")
    for (i = 1; i <= m; i++) {
        k = parts[i]; gsub(/"/, "", k)
        split(k, kv, ": "); bv[i] = kv[1]; bc[i] = kv[2] + 0; used[i] = 0
    }
    out = ""
    for (j = 1; j <= 4 && j <= m; j++) {
        best = 0
        for (i = 1; i <= m; i++) if (!used[i] && (best == 0 || bc[i] > bc[best])) best = i
        used[best] = 1
        out = out (out == "" ? "" : " ") bv[best] ":" bc[best]
    }
    return out
}
BEGIN {
    printf "%-17s %-12s %5s %3s %5s %4s %6s %5s %5s %7s  %-23s %s\n", "config", "pattern", "burst",
           "pre", "n", "drop", "median", "p10", "p90", "ev_med", "by position 1/2/3-10/+",
           "top hist bins (ns:count)"
}
{
    if (str("error") != "-") {
        printf "%-17s %-12s  FAILED (%s)\n", str("config"), str("pattern"), str("error")
        next
    }
    printf "%-17s %-12s %5s %3s %5s %4s %6s %5s %5s %7s  %-23s %s\n", str("config"),
           str("pattern"), num("burst"), num("preroll"), num("n"), num("dropped"),
           num("median_ns"), num("p10_ns"), num("p90_ns"), num("events_median_ns"),
           num("1st") "/" num("2nd") "/" num("3rd-10th") "/" num("later"), tophist()
}' "$THIS_RUN"
exit $FAILED
