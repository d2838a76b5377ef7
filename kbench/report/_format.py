"""Units and small text/HTML table helpers shared by the reports."""
from __future__ import annotations

import html
import os
import math
from typing import Any, Dict, Optional, Sequence


def fmt_time(seconds: Optional[float]) -> str:
    """A duration with the unit that keeps 3-4 significant digits readable."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = abs(seconds)
    if s == 0:
        return "0 s"
    if s < 1e-6:
        return f"{seconds * 1e9:.1f} ns"
    if s < 1e-3:
        return f"{seconds * 1e6:.3f} us"
    if s < 1:
        return f"{seconds * 1e3:.4f} ms"
    return f"{seconds:.4f} s"


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_rate(value: Optional[float], unit: str) -> str:
    """value in base units per second (FLOP/s or B/s) -> 'x.xx GFLOP/s' / 'TB/s'."""
    if value is None or math.isnan(value):
        return "-"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}/s"
    return f"{value:.3g} {unit}/s"


def fmt_pct(x: Optional[float]) -> str:
    if x is None or math.isnan(x):
        return "-"
    # a FLOP count off by orders of magnitude gave 65859820893992226445095600128.0%
    return f"{100 * x:.1f}%" if abs(x) < 1e4 else f"{100 * x:.3g}%"


def _pct_short(x: float) -> str:
    """A percentage with the digits its size needs: 12%, 2.1%, 0.35%."""
    p = round(100 * x, 9)          # 0.1 is 9.999...%: not a 1-decimal figure
    return f"{p:.0f}%" if p >= 10 else f"{p:.1f}%" if p >= 1 else f"{p:.2f}%"


#: A CI whose two sides differ by more than this factor is shown as a range, not +-.
LOPSIDED_CI = 1.5


def fmt_ci(median: Optional[float], ci_low: Optional[float], ci_high: Optional[float]) -> str:
    """The CI of the median relative to it: '+-0.5%' when its sides are about equal, else the
    two sides, '-0.3%/+2.1%' (the order-statistic CI is lopsided on skewed samples, and one
    symmetric figure would misstate both sides)."""
    vals = (median, ci_low, ci_high)
    if any(v is None or not math.isfinite(v) for v in vals) or median <= 0:
        return "-"
    below, above = (median - ci_low) / median, (ci_high - median) / median
    if max(below, above) <= LOPSIDED_CI * min(below, above) or max(below, above) < 5e-4:
        return "+-" + _pct_short(0.5 * (below + above))
    return f"-{_pct_short(below)}/+{_pct_short(above)}"


def text_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if k and _numeric(c) else c.ljust(w)
                               for c, w in zip(r, widths)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _numeric(cell: str) -> bool:
    return bool(cell) and (cell[0].isdigit() or cell[0] in "+-.")


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
               caption: Optional[str] = None) -> str:
    out = ['<table class="kbench">']
    if caption:
        out.append(f"<caption>{html.escape(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
               + "</tr></thead><tbody>")
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def dump_json(doc, path=None, indent: int = 1) -> str:
    """JSON text of doc (NaN/inf kept), also written to path when given."""
    import json
    text = json.dumps(doc, indent=indent, allow_nan=True)
    if path is not None:
        write_atomic(path, text)
    return text


def write_atomic(path: str, text: str, newline: Optional[str] = None) -> None:
    """Write text to path through a temporary file of its own in the same directory, then
    os.replace: a failed write (disk full, Ctrl-C) leaves the old file whole, and two writers
    never share a temporary file. The file gets the permissions open(path, "w") would give."""
    import tempfile
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".",
                                   suffix=".tmp")
    except OSError as e:
        raise _naming(e, path, directory) from None
    try:
        with os.fdopen(fd, "w", newline=newline) as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)      # mkstemp's 0600 would hide a shared baseline
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise _naming(e, path, directory) from None
        raise


def _naming(e: OSError, path: str, directory: str) -> OSError:
    """e, of the same type and errno, naming the path the caller gave rather than the
    temporary file beside it (a name the caller never saw)."""
    reason = e.strerror or str(e)
    import errno        # here, not at import: `import kbench` stays light (test_cli)
    if e.errno == errno.ENOENT and not os.path.isdir(directory):
        reason = f"No such directory {directory}"
    return OSError(e.errno, reason, path)   # OSError picks the subclass from errno


def load_json_as(path: str, what: str, from_dict: Any) -> Any:
    """from_dict of the JSON document in path (a file its to_json wrote); ValueError naming the
    file, and what it is not, for a file that is not JSON or not that document."""
    import json
    with open(path) as f:
        try:
            doc = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not {what}: not JSON ({e})") from None
    try:
        return from_dict(doc)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


def library_status(st: Dict[str, Any]) -> str:
    """Where a GPU library was found, or why not: the loader's first line with the paths it
    tried after it (never a dangling "Tried:"), then its advice on an indented line."""
    if st.get("loaded"):
        return str(st.get("path"))
    raw = (st.get("error") or "not found").splitlines()
    head = raw[0].strip()
    tried = [l.strip().split(":")[0] for l in raw[1:] if l.startswith((" ", "\t")) and l.strip()]
    advice = [l.strip() for l in raw[1:] if l.strip() and not l.startswith((" ", "\t"))]
    if head.endswith("Tried:"):
        head = head[:-len("Tried:")].rstrip()
    if tried:
        head = head.rstrip(".") + f" (tried {', '.join(tried)})"
    return "\n".join([head] + [f"         {a}" for a in advice])


def describe(x: Any) -> str:
    """An argument as a harness records it: type, dtype, shape and device, not its values; a
    short repr for a scalar or string."""
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        dev = getattr(x, "device", None)
        where = f"@{dev}" if dev is not None and str(dev) != "cpu" else ""
        return f"{type(x).__name__}[{dtype}]{tuple(shape)}{where}"
    if isinstance(x, (int, float, bool, str)) or x is None:
        return repr(x)[:40]
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(describe(v) for v in x[:8]) + (", ..." if len(x) > 8 else "") + ")"
    return type(x).__name__
