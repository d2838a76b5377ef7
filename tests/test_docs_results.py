"""docs/results.md is what scripts/results_page.py writes from benchmarks/results/README.md:
a new or changed result row without a regenerated page fails here."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "results_page.py"
README = ROOT / "benchmarks" / "results" / "README.md"
pytestmark = pytest.mark.skipif(not (SCRIPT.exists() and README.exists()),
                                reason="scripts/ and benchmarks/ are not beside tests/ "
                                       "(a copy of the suite)")


def load_script():
    spec = importlib.util.spec_from_file_location("results_page", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_results_page_is_generated_from_the_current_readme():
    p = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr + " -- run python3 scripts/results_page.py"


def test_every_readme_row_is_on_the_page():
    mod = load_script()
    sections = mod.rows_of(README.read_text())
    page = (ROOT / "docs" / "results.md").read_text()
    assert len(sections) == 2 and len(sections[0]) >= 15
    for rows in sections:
        for benchmark, files, machine, headline in rows:
            assert f"| {benchmark} | {files} | {machine} | {headline} |" in page


def test_check_fails_on_a_stale_page(tmp_path, monkeypatch):
    mod = load_script()
    page = tmp_path / "results.md"
    monkeypatch.setattr(mod, "PAGE", str(page))
    assert mod.main(["--check"]) == 1                   # no page at all
    assert mod.main([]) == 0 and mod.main(["--check"]) == 0
    page.write_text(page.read_text().replace("| H200, ", "| H100, ", 1))
    assert mod.main(["--check"]) == 1


def test_a_row_with_a_missing_cell_is_refused():
    mod = load_script()
    text = ("| benchmark | what it measures | latest result | machine, date | headline |\n"
            "|---|---|---|---|---|\n"
            "| `a.py` | x | `a.json` | H200, 2026-12-02 |\n")
    with pytest.raises(ValueError, match="4 cells"):
        mod.rows_of(text)
