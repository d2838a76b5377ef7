#!/usr/bin/env bash
# Run the test suite against a kbench wheel as installed.
#
#   bash scripts/test_wheel.sh WHEEL [PYTHON] [PYTEST ARGS ...]
#
# A fresh venv outside the source tree (PYTHON, default python3, must match the wheel's tag)
# gets the wheel with its test extras from PyPI; tests/, notebooks/ (test_notebooks runs
# quickstart.ipynb) and pyproject.toml (pytest's configuration: the gpu marker) are copied to a
# temporary folder and pytest runs there, so the checkout's kbench/ cannot shadow the install.
# KBENCH_TEST_INSTALLED=1 turns on tests/test_install.py's checks that it is the install under
# test, built from the pinned header packages.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ $# -ge 1 ] || { echo "usage: $0 WHEEL [PYTHON] [PYTEST ARGS ...]" >&2; exit 2; }
WHEEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
PY=${2:-python3}
shift $(( $# >= 2 ? 2 : 1 ))
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kbench-installed.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "== fresh venv in $WORK/venv ($("$PY" --version)), installing $(basename "$WHEEL")[test]"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check "$WHEEL[test]" \
  > "$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; exit 1; }
mkdir -p "$WORK/run"
cp -r tests notebooks pyproject.toml "$WORK/run/"
rm -rf "$WORK/run/tests/__pycache__"
cd "$WORK/run"
"$WORK/venv/bin/python" - <<'EOF'
import kbench, kbench._core as c
print("kbench imported from", kbench.__file__)
print("  _core:", c.__file__)
print("  BUILD:", c.BUILD)
EOF
echo "== pytest in $WORK/run, against the installed kbench"
KBENCH_TEST_INSTALLED=1 "$WORK/venv/bin/python" -m pytest -p no:cacheprovider -q -rs "$@" tests/
