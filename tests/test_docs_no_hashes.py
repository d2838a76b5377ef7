"""The docs state what holds now: no page names a commit hash or a GPU UUID (history is in git,
and each result file records its own commit and GPU).

Checked: docs/*.md, docs/design/*.md, NOTES.md and benchmarks/results/README.md.

Refused:
- a GPU UUID's first block, `GPU-` and 8 hex digits (any case);
- a commit-hash-like token: 7 to 40 lower-case hex digits standing alone (no letter, digit or
  underscore on either side), with at least one letter a-f and at least one digit, so a short
  hash in a range (`e9f440e-0b711fa`), after a slash or with a `+` is caught.

Allowed: hex after `0x` (an address or a constant), a number in exponent notation made of
hex-looking characters (`1e10000`), tokens of digits only (`2026120`) or letters only
(`defaced`), and hex runs inside a longer word or identifier (`sha256`, a file name).
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UUID = re.compile(r"GPU-[0-9a-f]{8}", re.IGNORECASE)
TOKEN = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
EXPONENT = re.compile(r"[0-9]+e[0-9]+")


def pages():
    found = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "design").glob("*.md"))
    found += [p for p in (ROOT / "NOTES.md", ROOT / "benchmarks" / "results" / "README.md")
              if p.exists()]
    return found


def hash_like(text):
    """The commit-hash-like tokens and GPU UUIDs of text, each with a little context."""
    hits = [m for m in UUID.finditer(text)]
    for m in TOKEN.finditer(text):
        tok = m.group()
        if text[max(0, m.start() - 2):m.start()].lower() == "0x":
            continue
        if EXPONENT.fullmatch(tok):
            continue
        if re.search(r"[a-f]", tok) and re.search(r"[0-9]", tok):
            hits.append(m)
    return [text[max(0, m.start() - 30):m.end() + 10].replace("\n", " ") for m in hits]


def test_the_rule_catches_hashes_and_uuids_and_allows_numbers():
    caught = ["at 8bc694c, H200", "(GPU-46db77c8)", "e9f440e-0b711fa", "98e041e+",
              "commit/5c8f5e9)", "bd82575a | 100%", "a4e9f2c.", "full: 8bc694c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7"]
    allowed = ["0x7fffdeadbeef", "1e10000 samples", "2026-12-02", "4000x4096x11008",
               "defaced", "1234567", "sha256sum", "cp312 wheel", "12,834.39 us",
               "KB_CUDA_REQUIRED_PRE13", "h200_agreement.json", "abc123"]
    for text in caught:
        assert hash_like(text), text
    for text in allowed:
        assert not hash_like(text), text


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_commit_hash_or_a_gpu_uuid(page):
    hits = hash_like(page.read_text())
    assert not hits, (f"{page.relative_to(ROOT)} names commits or GPUs (say 'an H200', or "
                      f"'measured before <change>'; history is in git): {hits[:10]}")


def test_the_pages_are_there():
    names = {p.relative_to(ROOT).as_posix() for p in pages()}
    assert {"NOTES.md", "docs/results.md", "docs/design/measured.md",
            "benchmarks/results/README.md"} <= names or not (ROOT / "docs").exists()
