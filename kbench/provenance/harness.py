"""Harness provenance: what produced a figure, recorded in every result's metadata["harness"].

    {"script":   {"path", "md5", "line"}                   the file that called kbench, or
                 {"notebook", "cell_md5", "execution_count"}  the IPython cell that did,
     "callable": {"qualname", "module", "source_md5" | "source_why", "file"},
     "args":     {"signature", "md5"}                       shapes and dtypes of the arguments,
     "carried":  {"signature", "md5"}                       and of what the callable carries,
     "kbench":   {"version", "build", "path", "git"},       kbench itself,
     "git":      {"commit", "dirty"} | None}                the project around the script.

The caller is the first frame outside the kbench package: the test function under the pytest
plugin, the script or cell that called kbench.sweep or kbench.bench. A sweep(isolate=True)
worker has no such frame: it records the caller of sweep, made in the parent and passed to it
(with "via" saying so), or failing that (another worker process) the parent's main script. A
script's md5 covers the whole file, so a kernel defined in the script changes it as well; keep
kernels in modules of their own to tell a harness change from a kernel change.
``different(old, new)`` says which of script, cell, callable and arguments differ between two
results; `kbench compare` prints it.

Never raises: a field it cannot find is None with a ``*_why`` beside it.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..report._format import describe
from .metadata import git_cached

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))    # kbench/
_md5_cache: Dict[Tuple[str, int, int], str] = {}


def md5_text(text: str) -> str:
    return hashlib.md5(text.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


def md5_file(path: str) -> Optional[str]:
    """The file's md5, cached by (path, mtime, size); None when it cannot be read."""
    try:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
        if key not in _md5_cache:
            h = hashlib.md5(usedforsecurity=False)
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            _md5_cache[key] = h.hexdigest()
        return _md5_cache[key]
    except OSError:
        return None


# The standard library's process-pool machinery: in sweep(isolate=True)'s spawned worker it is
# the first frame outside kbench, and was recorded as the calling script (with the git of
# whatever checkout holds the interpreter).
_STDLIB = os.path.dirname(os.path.abspath(os.__file__))
_POOL_DIRS = tuple(os.path.join(_STDLIB, d) for d in ("concurrent", "multiprocessing"))


def caller_frame(skip_dirs: Tuple[str, ...] = (_PKG_DIR,),
                 stop_dirs: Tuple[str, ...] = _POOL_DIRS) -> Any:
    """The innermost frame whose code is not in kbench (nor in skip_dirs); None if none, or if
    a frame of stop_dirs (a process pool's worker loop) comes first: the caller is then in
    another process, and the frames below are the spawn bootstrap's."""
    f = sys._getframe(1)
    while f is not None:
        fname = os.path.abspath(f.f_code.co_filename) if not f.f_code.co_filename.startswith("<") \
            else f.f_code.co_filename
        if any(fname.startswith(d + os.sep) for d in stop_dirs):
            return None
        if not any(fname.startswith(d + os.sep) for d in skip_dirs):
            return f
        f = f.f_back
    return None


def _is_ipython_cell(filename: str) -> bool:
    return filename.startswith("<ipython-input-") or \
        os.path.basename(os.path.dirname(filename)).startswith("ipykernel_")


def _notebook_name(frame: Any) -> Optional[str]:
    g = frame.f_globals
    for key in ("__session__", "__vsc_ipynb_file__"):     # ipykernel >= 6.? / VS Code
        if isinstance(g.get(key), str) and g[key]:
            return g[key]
    return os.environ.get("JPY_SESSION_NAME") or None


def script_of(frame: Any) -> Dict[str, Any]:
    """Where the call came from: a file (path, md5, line) or an IPython cell (notebook name,
    the cell's source md5, its execution count)."""
    if frame is None:
        return {"path": None, "md5": None, "why": "no caller outside kbench"}
    filename = frame.f_code.co_filename
    if _is_ipython_cell(filename):
        import linecache
        source = "".join(linecache.getlines(filename))
        out: Dict[str, Any] = {"notebook": _notebook_name(frame) or "(unsaved or unknown)",
                               "cell_md5": md5_text(source) if source else None,
                               "line": frame.f_lineno}
        ip = sys.modules.get("IPython")
        try:
            shell = ip.get_ipython() if ip is not None else None
            if shell is not None:
                out["execution_count"] = shell.execution_count
        except Exception:
            pass
        return out
    if filename.startswith("<"):
        return {"path": filename, "md5": None, "line": frame.f_lineno,
                "why": "code without a file (exec, -c or an interactive prompt)"}
    path = os.path.abspath(filename)
    return {"path": path, "md5": md5_file(path), "line": frame.f_lineno}


# In sweep(isolate=True)'s worker: the record of sweep's caller, made in the parent process
# (caller_script) and set around the case (parent_script); collect uses it there.
_parent_record: Optional[Dict[str, Any]] = None
PARENT_VIA = "the caller of kbench.sweep(isolate=True), recorded in the parent process"


def caller_script() -> Optional[Dict[str, Any]]:
    """The script record collect would make for a bench call from here (the first frame
    outside kbench: sweep's caller), marked as the parent's, for an isolated worker to record
    in its place; None when there is no such caller. Never raises."""
    try:
        frame = caller_frame()
        if frame is None:
            return None
        record = script_of(frame)
        del frame
        record["via"] = PARENT_VIA
        return record
    except Exception:
        return None


@contextlib.contextmanager
def parent_script(record: Optional[Dict[str, Any]]) -> Iterator[None]:
    """While it lasts, collect records this script (the parent's caller_script()) when it
    finds no caller of its own, as in a sweep(isolate=True) worker."""
    global _parent_record
    saved, _parent_record = _parent_record, record
    try:
        yield
    finally:
        _parent_record = saved


def _worker_main_script() -> Optional[Dict[str, Any]]:
    """In a multiprocessing child (sweep(isolate=True)'s worker) with no caller of its own: the
    parent's main script, which spawn re-imports as __mp_main__ (fork inherits __main__).
    Its md5 still tells an edited sweep script apart; the line that called is the parent's."""
    mp = sys.modules.get("multiprocessing")
    if mp is None or mp.parent_process() is None:
        return None
    main = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return None
    path = os.path.abspath(path)
    return {"path": path, "md5": md5_file(path), "line": None,
            "via": "a worker process: the parent's main script"}


def callable_info(fn: Any) -> Dict[str, Any]:
    """Qualified name, module, and the md5 of the source Python can find (inspect.getsource);
    partials, bound methods and decorated functions are unwrapped, a callable object's class
    is read."""
    import functools
    import inspect
    target, wrapped = fn, []
    for _ in range(8):
        if isinstance(target, functools.partial):
            wrapped.append("partial")
            target = target.func
        elif inspect.ismethod(target):
            target = target.__func__
        else:
            break
    try:
        target = inspect.unwrap(target)
    except Exception:
        pass
    source_of = target
    if not (inspect.isfunction(target) or inspect.isclass(target) or inspect.isbuiltin(target)) \
            and callable(target) and hasattr(type(target), "__call__") \
            and not type(target).__module__.startswith(("numpy", "builtins")):
        source_of = type(target)          # a module object (torch.nn.Module), a functor
    qual = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or \
        type(target).__qualname__
    out: Dict[str, Any] = {"qualname": qual, "module": getattr(target, "__module__", None) or
                           type(target).__module__}
    if wrapped:
        out["wrapped"] = wrapped
    try:
        src = inspect.getsource(source_of)
        out["source_md5"] = md5_text(src)
        out["file"] = inspect.getsourcefile(source_of)
    except (OSError, TypeError) as e:
        out["source_md5"] = None
        out["source_why"] = (f"no Python source ({type(target).__name__})"
                             if isinstance(e, TypeError) else f"source not found: {e}")
    return out


def args_info(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The arguments' shapes, dtypes and devices (not their values), and its md5."""
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in sorted(kwargs.items())]
    sig = ", ".join(parts)
    return {"signature": sig if len(sig) <= 400 else sig[:400] + "...", "md5": md5_text(sig)}


def carried_info(fn: Any) -> Dict[str, Any]:
    """What the callable carries besides its arguments (a closure's or a partial's arrays, the
    globals it names), shapes and dtypes as args_info, and its md5."""
    from ..measure.prepare import carried_signature
    sig = carried_signature(fn)
    return {"signature": sig if len(sig) <= 400 else sig[:400] + "...", "md5": md5_text(sig)}


def kbench_info() -> Dict[str, Any]:
    from .._version import __version__
    from .._build import build_info
    return {"version": __version__, "build": build_info(), "path": _PKG_DIR,
            "git": git_cached(_PKG_DIR, project=False)}     # not KBENCH_GIT_COMMIT's


def collect(fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """metadata["harness"] for one bench call. Never raises."""
    out: Dict[str, Any] = {}
    try:
        frame = caller_frame()
        out["script"] = (frame is None and (dict(_parent_record) if _parent_record else
                                            _worker_main_script())) or script_of(frame)
        path = out["script"].get("path")
        out["git"] = git_cached(os.path.dirname(path) if path and os.path.isabs(path)
                                else os.getcwd())
        del frame
    except Exception as e:
        out["script"] = {"path": None, "md5": None, "why": f"{type(e).__name__}: {e}"}
    for key, get in (("callable", lambda: callable_info(fn)),
                     ("args", lambda: args_info(tuple(args), kwargs)),
                     ("carried", lambda: carried_info(fn)),
                     ("kbench", kbench_info)):
        try:
            out[key] = get()
        except Exception as e:          # provenance must never lose a measurement
            out[key] = {"error": f"{type(e).__name__}: {e}"}
    return out


def _harness(d: Dict[str, Any]) -> Dict[str, Any]:
    md = d.get("metadata") if isinstance(d, dict) else None
    h = (md or {}).get("harness")
    return h if isinstance(h, dict) else {}


def _short(md5: Optional[str]) -> str:
    return (md5 or "?")[:8]


def different(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    """How the harnesses of two result dicts differ, in words; [] when they match or either
    result has no provenance. The callable's own source is reported apart from the harness
    ("callable source changed"): that is often the change under test."""
    a, b = _harness(old), _harness(new)
    if not a or not b:
        return []
    out = []
    sa, sb = a.get("script") or {}, b.get("script") or {}
    if "cell_md5" in sa or "cell_md5" in sb:
        if sa.get("cell_md5") != sb.get("cell_md5") or sa.get("notebook") != sb.get("notebook"):
            out.append(f"different harness cell ({sa.get('notebook') or sa.get('path')} "
                       f"{_short(sa.get('cell_md5'))} -> {sb.get('notebook') or sb.get('path')} "
                       f"{_short(sb.get('cell_md5'))})")
    elif sa.get("md5") and sb.get("md5") and sa["md5"] != sb["md5"]:
        name_a = os.path.basename(sa.get("path") or "?")
        name_b = os.path.basename(sb.get("path") or "?")
        names = name_a if name_a == name_b else f"{name_a} -> {name_b}"
        out.append(f"different harness script ({names}: md5 {_short(sa['md5'])} -> "
                   f"{_short(sb['md5'])})")
    ca, cb = a.get("callable") or {}, b.get("callable") or {}
    qa = ".".join(x for x in (ca.get("module"), ca.get("qualname")) if x)
    qb = ".".join(x for x in (cb.get("module"), cb.get("qualname")) if x)
    if qa and qb and qa != qb:
        out.append(f"different callable ({qa} -> {qb})")
    elif ca.get("source_md5") and cb.get("source_md5") and ca["source_md5"] != cb["source_md5"]:
        out.append(f"callable source changed (md5 {_short(ca['source_md5'])} -> "
                   f"{_short(cb['source_md5'])})")
    aa, ab = a.get("args") or {}, b.get("args") or {}
    if aa.get("md5") and ab.get("md5") and aa["md5"] != ab["md5"]:
        out.append(f"different arguments ({aa.get('signature')} -> {ab.get('signature')})")
    return out


def summary(h: Dict[str, Any]) -> str:
    """One line for the printed result."""
    if not h:
        return ""
    s, c = h.get("script") or {}, h.get("callable") or {}
    if "cell_md5" in s:
        where = f"notebook {s.get('notebook')} cell md5 {_short(s.get('cell_md5'))}"
    elif s.get("path") and s.get("md5"):
        where = f"{s['path']}:{s.get('line')} (md5 {_short(s['md5'])})"
    elif s.get("path"):
        where = f"{s['path']}:{s.get('line')} (no file to hash)"
    else:
        where = "unknown caller"
    src = f"source md5 {_short(c['source_md5'])}" if c.get("source_md5") else "no source"
    git = h.get("git") or {}
    commit = (f"; git {str(git.get('commit'))[:10]}"
              + ("-dirty" if git.get("dirty") else "")) if git.get("commit") else ""
    k = h.get("kbench") or {}
    return (f"{where}; {c.get('qualname')} ({src}){commit}; kbench {k.get('version')}")
