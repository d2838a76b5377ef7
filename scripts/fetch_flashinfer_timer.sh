#!/usr/bin/env bash
# Fetch FlashInfer's CUPTI timer for the device, which has no network, into .whl/flashinfer/
# (git-ignored; carry it with the run):
#   flashinfer_testing_utils.py  flashinfer/testing/utils.py from the flashinfer-python wheel,
#                                unmodified: bench_gpu_time_with_cupti lives there
#   cupti_python-*.whl           the CUPTI Python bindings that timer needs (without them it
#                                falls back to CUDA events with only a warning)
#   SOURCE.txt                   versions and sha256 of what was taken
# The whole flashinfer-python wheel (101 MB at 0.7.4) is over the device tool's 64 MiB carry
# limit and its import needs cutlass-dsl, tvm-ffi and cudnn-frontend besides; the timer file's
# only import from the package is flashinfer.utils.round_up, which
# benchmarks/gpu_time_to_figure.py stands in for when it loads the file on its own.
# cupti-python 13.0.x: its libcupti requirement (~=13.0) is the one torch's cu130 wheels carry.
#   bash scripts/fetch_flashinfer_timer.sh [flashinfer-version] [python-version]
set -euo pipefail
cd "$(dirname "$0")/.."
FI_VERSION=${1:-0.7.4}
PY_VERSION=${2:-3.12}
CUPTI_PY_VERSION=13.0.1
DEST=.whl/flashinfer
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$TMP" "flashinfer-python==$FI_VERSION"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
  --platform manylinux2014_x86_64 -d "$TMP" "cupti-python==$CUPTI_PY_VERSION"
rm -rf "$DEST"; mkdir -p "$DEST"
fi_whl=$(ls "$TMP"/flashinfer_python-*.whl)
unzip -p "$fi_whl" flashinfer/testing/utils.py > "$DEST/flashinfer_testing_utils.py"
grep -q "def bench_gpu_time_with_cupti" "$DEST/flashinfer_testing_utils.py" \
  || { echo "flashinfer $FI_VERSION: no bench_gpu_time_with_cupti in flashinfer/testing/utils.py" >&2; exit 1; }
cp "$TMP"/cupti_python-*.whl "$DEST/"
{ echo "flashinfer-python $FI_VERSION: flashinfer/testing/utils.py of $(basename "$fi_whl")"
  echo "  wheel sha256 $(sha256sum "$fi_whl" | cut -d' ' -f1)"
  echo "  file  sha256 $(sha256sum "$DEST/flashinfer_testing_utils.py" | cut -d' ' -f1)"
  for w in "$DEST"/cupti_python-*.whl; do echo "$(basename "$w") sha256 $(sha256sum "$w" | cut -d' ' -f1)"; done
} > "$DEST/SOURCE.txt"
cat "$DEST/SOURCE.txt"
du -sh "$DEST"
