"""Host metadata recorded next to every measurement: what ran, where, and how.

``collect_host_metadata()`` never raises: a field it cannot find is ``"unknown"`` (or ``None``
where the absence itself is meaningful, e.g. no git repository). subprocess and platform are
imported inside the functions that use them so that ``import kbench`` stays cheap.
"""
from __future__ import annotations

import os
import re
import sys

UNKNOWN = "unknown"

#: Environment variables recorded verbatim: those that change what a kernel or benchmark does.
ENV_PREFIXES = ("KBENCH_", "CUDA_", "OMP_", "MKL_", "OPENBLAS_", "PYTORCH_", "TORCH_",
                "TRITON_", "NVIDIA_", "VLLM_", "FLASHINFER_", "NCCL_", "CUBLASLT_", "CUDNN_",
                "HIP_", "HSA_", "ROCR_", "ROCBLAS_", "HIPBLASLT_", "MIOPEN_")
ENV_NAMES = ("CUBLAS_WORKSPACE_CONFIG", "LD_PRELOAD")
# names of credentials: their values are never recorded
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
SECRET_MASK = "<masked: the name says it is a credential>"

_SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


def cpu_model(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name from /proc/cpuinfo ("model name" on x86, "Model"/"Hardware"/
    "cpu model" elsewhere), else platform.processor(), else "unknown"."""
    keys = ("model name", "cpu model", "model", "hardware", "processor")
    found = {}
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                key, value = key.strip().lower(), value.strip()
                if sep and value and key in keys and key not in found:
                    found[key] = value
                if not line.strip() and "model name" in found:
                    break           # the first CPU's block is enough
    except OSError:
        pass
    for key in keys:
        value = found.get(key)
        # on x86 "model" is a number and "processor" the CPU index: not names
        if value and not value.isdigit():
            return value
    try:
        import platform
        return platform.processor() or UNKNOWN
    except Exception:
        return UNKNOWN


def cpu_hypervisor(cpuinfo_path: str = "/proc/cpuinfo") -> bool | None:
    """Whether the CPU runs under a hypervisor: the x86 "hypervisor" flag in /proc/cpuinfo.
    None where there is no flags line (other architectures, no /proc). A VM's figures drift
    with its neighbours' load, so a reader of a result needs to know."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() == "flags":
                    return "hypervisor" in value.split()
    except OSError:
        pass
    return None


def _parse_size(text: str) -> int | None:
    """sysfs cache sizes look like "48K", "2048K", "300M"; return bytes or None."""
    text = text.strip().upper()
    if text.endswith("B"):
        text = text[:-1]
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    try:
        return int(digits) * scale
    except ValueError:
        return None


def cpu_caches(sysfs_dir: str = _SYSFS_CACHE) -> list[dict]:
    """CPU0's caches from sysfs, one dict per cache: {"level", "type", "size_bytes"}, sorted by
    level then type ("Data", "Instruction", "Unified"). Empty when sysfs does not say."""
    caches = []
    try:
        names = sorted(n for n in os.listdir(sysfs_dir) if n.startswith("index"))
    except OSError:
        return caches
    for name in names:
        d = os.path.join(sysfs_dir, name)
        try:
            with open(os.path.join(d, "level")) as f:
                level = int(f.read().strip())
            with open(os.path.join(d, "type")) as f:
                ctype = f.read().strip()
            with open(os.path.join(d, "size")) as f:
                size = _parse_size(f.read())
        except (OSError, ValueError):
            continue
        if size is None:
            continue
        caches.append({"level": level, "type": ctype, "size_bytes": size})
    caches.sort(key=lambda c: (c["level"], c["type"]))
    return caches


def cache_sizes_by_level(caches: list[dict]) -> dict:
    """{"L1d": bytes, "L1i": bytes, "L2": bytes, "L3": bytes, ...} from ``cpu_caches()``."""
    out = {}
    for c in caches:
        suffix = {"Data": "d", "Instruction": "i"}.get(c["type"], "")
        out[f"L{c['level']}{suffix}"] = c["size_bytes"]
    return out


def logical_cores() -> dict:
    """{"cpu_count": os.cpu_count(), "affinity": CPUs this process may run on}."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"cpu_count": os.cpu_count(), "affinity": affinity}


def package_version(name: str) -> str:
    """The installed distribution's version, else the module's __version__, else "unknown"."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version(name)
        except PackageNotFoundError:
            pass
    except Exception:
        pass
    module = sys.modules.get(name)
    return str(getattr(module, "__version__", UNKNOWN)) if module is not None else UNKNOWN


_git_cache: dict = {}   # (directory, project, KBENCH_GIT_COMMIT) -> (monotonic time, git_info)
GIT_CACHE_S = 5.0       # a sweep's cases share one `git status`; an edit shows within seconds


def git_cached(directory: str, project: bool = True) -> dict | None:
    """git_info(directory, project=project), re-read at most every GIT_CACHE_S: the harness
    record and the host record of one result share one `git status`."""
    import time
    now = time.monotonic()
    key = (directory, project, os.environ.get("KBENCH_GIT_COMMIT", ""))   # git_info reads it
    hit = _git_cache.get(key)
    if hit is None or now - hit[0] > GIT_CACHE_S:
        hit = (now, git_info(directory, project=project))
        _git_cache[key] = hit
    return hit[1]


def git_info(cwd: str | None = None, timeout: float = 2.0, project: bool = True) -> dict | None:
    """{"commit": sha, "dirty": bool} of the git work tree around ``cwd`` (default: the current
    directory); None when it is not in one, git is missing, or `git rev-parse` is too slow; a
    `git status` too slow for ``timeout`` (a large monorepo) keeps the commit, with
    {"dirty": None, "dirty_why"}. Never raises.

    project=True (the project's checkout): an untracked file -- a kernel module not added yet --
    makes it dirty, and the first untracked paths are listed under "untracked", since the
    commit does not hold what was measured. KBENCH_GIT_COMMIT, when set, is taken as the commit
    instead ({"commit", "dirty": None, "source": "KBENCH_GIT_COMMIT"}): for a copy of a
    checkout whose .git lags or is absent (a tree shipped to a GPU machine, a CI artifact).
    project=False (kbench's own checkout): the variable names the project's commit, not
    kbench's, and untracked files are its build outputs, so neither applies."""
    given = os.environ.get("KBENCH_GIT_COMMIT", "").strip() if project else ""
    if given:
        return {"commit": given, "dirty": None, "source": "KBENCH_GIT_COMMIT"}
    try:
        import subprocess

        def git(*args):
            return subprocess.run(("git",) + args, cwd=cwd, capture_output=True, text=True,
                                  timeout=timeout, check=False)

        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        commit = head.stdout.strip()
        try:
            status = git("status", "--porcelain",
                         "--untracked-files=" + ("normal" if project else "no"))
        except subprocess.TimeoutExpired:
            return {"commit": commit, "dirty": None,
                    "dirty_why": f"git status took longer than {timeout:g} s"}
        if status.returncode != 0:
            return {"commit": commit, "dirty": None,
                    "dirty_why": f"git status failed: {status.stderr.strip()[:200]}"}
        lines = status.stdout.splitlines()
        info = {"commit": commit, "dirty": bool(lines)}
        untracked = [line[3:] for line in lines if line.startswith("?? ")]
        if untracked:
            info["untracked"] = untracked[:10] + ([f"... {len(untracked) - 10} more"]
                                                  if len(untracked) > 10 else [])
        return info
    except Exception:          # FileNotFoundError (no git), TimeoutExpired, OSError, ...
        return None


def command_line(argv=None) -> list:
    """sys.argv with the value of an option whose name says it is a credential masked
    (`--api-key=...`, `--token ...`), as relevant_env masks such variables."""
    out, mask_next = [], False
    for a in list(sys.argv if argv is None else argv):
        name, eq, _ = a.partition("=")
        if mask_next:
            out.append(SECRET_MASK)
        elif a.startswith("-") and eq and _SECRET_NAME.search(name):
            out.append(f"{name}={SECRET_MASK}")
        else:
            out.append(a)
        mask_next = a.startswith("-") and not eq and bool(_SECRET_NAME.search(a))
    return out


def interpreter_command() -> dict:
    """{"orig_argv", "executable"}: the interpreter's whole command line, masked as argv is --
    sys.argv alone is ['-c'] for `python -O -c "..."`, keeping neither the code nor -O."""
    out = {"executable": sys.executable or UNKNOWN}
    orig = getattr(sys, "orig_argv", None)          # Python >= 3.10
    if orig is not None:
        out["orig_argv"] = command_line(orig)
    return out


def relevant_env(environ=None) -> dict:
    """The environment variables that change what kernels do (see ENV_PREFIXES, ENV_NAMES);
    the value of one whose name says it is a credential (NVIDIA_API_KEY, KBENCH_UPLOAD_TOKEN)
    is masked: results are written to files that get committed and shared."""
    environ = os.environ if environ is None else environ
    return {k: SECRET_MASK if _SECRET_NAME.search(k) else environ[k] for k in sorted(environ)
            if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


_FRAMEWORKS = ("torch", "triton", "cupy", "jax", "jaxlib", "ml_dtypes")


def framework_info() -> dict:
    """Versions of the frameworks this process has already imported (torch, triton, CuPy, JAX):
    an upgrade changes their kernels. For torch also its CUDA/HIP and cuDNN versions and its
    CPU thread counts (a CPU torch kernel's speed follows them). Imports nothing, never
    initialises a GPU, never raises."""
    out: dict = {}
    for name in _FRAMEWORKS:
        if sys.modules.get(name) is not None:
            out[name] = package_version(name)
    torch = sys.modules.get("torch")
    if torch is not None:
        for key, get in (("torch_cuda", lambda: torch.version.cuda),
                         ("torch_hip", lambda: getattr(torch.version, "hip", None)),
                         ("torch_cudnn", lambda: torch.backends.cudnn.version()
                          if torch.backends.cudnn.is_available() else None),
                         ("torch_num_threads", torch.get_num_threads),
                         ("torch_num_interop_threads", torch.get_num_interop_threads)):
            try:
                value = get()
            except Exception:       # a partial or mocked torch: record what can be read
                continue
            if value is not None:
                out[key] = value if isinstance(value, (int, float)) else str(value)
    return out


# The GPU libraries whose kernels or launches a benchmark may time: name -> (the file's stem,
# how to read its version from the copy already loaded). An upgrade of any of them changes the
# kernels a torch.matmul or an all-reduce runs, without a line of the caller's code changing.
_PROPERTY = "property"      # fn(libraryPropertyType, int *): MAJOR 0, MINOR 1, PATCH 2
_GPU_LIBRARIES = {
    "cudart": ("libcudart", ("cudaRuntimeGetVersion", "runtime")),
    "cublas": ("libcublas", ("cublasGetProperty", _PROPERTY)),
    "cublasLt": ("libcublasLt", ("cublasLtGetVersion", "cublas_int")),
    "cudnn": ("libcudnn", ("cudnnGetVersion", "cudnn_int")),
    "nccl": ("libnccl", ("ncclGetVersion", "nccl_ptr")),
    "cufft": ("libcufft", ("cufftGetProperty", _PROPERTY)),
    "curand": ("libcurand", ("curandGetProperty", _PROPERTY)),
    "cusparse": ("libcusparse", ("cusparseGetProperty", _PROPERTY)),
    "cusolver": ("libcusolver", ("cusolverGetProperty", _PROPERTY)),
    "nvrtc": ("libnvrtc", ("nvrtcVersion", "two_ints")),
    "nvJitLink": ("libnvJitLink", ("nvJitLinkVersion", "two_ints")),
    "cupti": ("libcupti", None),
    "amdhip64": ("libamdhip64", None),  # hipRuntimeGetVersion may start the runtime: path only
    "rocblas": ("librocblas", ("rocblas_get_version_string", "string")),
    "hipblaslt": ("libhipblaslt", None),
    "MIOpen": ("libMIOpen", ("miopenGetVersion", "three_size_t")),
    "rccl": ("librccl", ("ncclGetVersion", "nccl_ptr")),
}
_STEM_TO_NAME = {stem: name for name, (stem, _) in _GPU_LIBRARIES.items()}
# a mapped file of one of them, found by its name: one search over the whole map (a torch
# process maps ~10^4 files; a loop over its lines cost 26 ms a result)
_LIB_FILE = re.compile(r"/(" + "|".join(sorted(_STEM_TO_NAME, key=len, reverse=True))
                       + r")\.so(?:\.[0-9.]+)?$", re.MULTILINE)
_library_versions: dict = {}        # real path -> version: a loaded file does not change


def _split_int(v: int, base: int) -> str:
    """major.minor.patch of an integer version major*base + minor*100 + patch."""
    return f"{v // base}.{v % base // 100}.{v % 100}"


def _read_version(path: str, reader) -> "str | None":
    """The version the copy of `path` this process has loaded reports about itself; None where
    it is not loaded (RTLD_NOLOAD: nothing is loaded here) or cannot say. Version calls only:
    none of them initialises a GPU."""
    import ctypes
    fn_name, kind = reader
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except (OSError, AttributeError):       # not loaded, or no RTLD_NOLOAD on this platform
        return None
    try:
        fn = getattr(lib, fn_name)
        if kind == _PROPERTY:
            parts = []
            for prop in (0, 1, 2):
                v = ctypes.c_int(-1)
                if fn(prop, ctypes.byref(v)) != 0 or v.value < 0:
                    return None
                parts.append(str(v.value))
            return ".".join(parts)
        if kind in ("cublas_int", "cudnn_int"):
            fn.restype = ctypes.c_size_t
            v = int(fn())
            if kind == "cublas_int":    # CUBLAS_VERSION: major*10000 since cuBLAS 11, else *1000
                return _split_int(v, 10000 if v >= 100000 else 1000)
            return _split_int(v, 10000 if v >= 90000 else 1000)   # cuDNN 9: major*10000
        if kind in ("runtime", "nccl_ptr"):
            v = ctypes.c_int(0)
            if fn(ctypes.byref(v)) != 0 or v.value <= 0:
                return None
            if kind == "runtime":           # CUDART_VERSION: major*1000 + minor*10
                return f"{v.value // 1000}.{v.value % 1000 // 10}"
            return _split_int(v.value, 10000 if v.value >= 20900 else 1000)  # NCCL_VERSION_CODE
        if kind == "two_ints":
            a, b = ctypes.c_uint(0), ctypes.c_uint(0)
            return f"{a.value}.{b.value}" if fn(ctypes.byref(a), ctypes.byref(b)) == 0 else None
        if kind == "three_size_t":
            v = [ctypes.c_size_t(0) for _ in range(3)]
            return ".".join(str(x.value) for x in v) \
                if fn(*(ctypes.byref(x) for x in v)) == 0 else None
        if kind == "string":
            buf = ctypes.create_string_buffer(256)
            if fn(buf, ctypes.c_size_t(len(buf))) != 0:
                return None
            return buf.value.decode(errors="replace") or None
    except (AttributeError, OSError, ValueError):   # no such symbol in this build
        return None
    return None


def gpu_libraries(maps_path: str = "/proc/self/maps") -> dict:
    """The GPU libraries (_GPU_LIBRARIES) this process has loaded when it is asked:
    {name: {"path", "version"}}, with "copies": [{"path", "version"}, ...] (by path; "path" and
    "version" are the first's) where more than one file of a library is loaded (torch's bundled
    cuDNN beside another one: which one a call reaches depends on the load order). Read from
    the process's memory map, so a library torch loads on first use (cuBLAS at the first
    matmul) shows from then on; {} where there is no such map (not Linux). Loads nothing,
    never initialises a GPU, never raises. (The RTLD_NOLOAD handle that asks a version keeps
    that already loaded copy loaded for the process.)"""
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    found: dict = {}        # name -> {real path: version}
    seen = set()
    for m in _LIB_FILE.finditer(text):
        line = text[text.rfind("\n", 0, m.start()) + 1:m.end()]
        path, name = line[line.find("/"):], _STEM_TO_NAME[m.group(1)]
        if path in seen:
            continue
        seen.add(path)
        try:
            real = os.path.realpath(path)
        except OSError:
            real = path
        if real not in _library_versions:
            reader = _GPU_LIBRARIES[name][1]
            try:
                _library_versions[real] = _read_version(path, reader) if reader else None
            except Exception:       # a foreign build's ABI: the path is still recorded
                _library_versions[real] = None
        found.setdefault(name, {})[real] = _library_versions[real]
    out: dict = {}
    for name, copies in found.items():
        listed = [{"path": p, "version": copies[p]} for p in sorted(copies)]
        out[name] = dict(listed[0], copies=listed) if len(listed) > 1 else listed[0]
    return out


def _platform_info() -> dict:
    try:
        import platform
        uname = platform.uname()
        return {"system": uname.system, "release": uname.release, "machine": uname.machine,
                "platform": platform.platform(),
                "python_implementation": platform.python_implementation()}
    except Exception:
        return {"system": UNKNOWN, "release": UNKNOWN, "machine": UNKNOWN,
                "platform": UNKNOWN, "python_implementation": UNKNOWN}


def _hostname() -> str:
    try:
        import socket
        return socket.gethostname() or UNKNOWN
    except Exception:
        return UNKNOWN


def _utc_now_iso() -> str:
    from datetime import datetime, timezone
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def collect_host_metadata() -> dict:
    """Everything that identifies a measurement's host and run. Never raises.

    Keys: timestamp_utc, hostname, cpu_model, cpu_hypervisor, cpu_count, cpu_affinity, caches
    (list from sysfs), cache_sizes ({"L1d": bytes, ...}), system, release (kernel), machine,
    platform, python_implementation, python_version, numpy_version, kbench_version, frameworks
    (framework_info()), gpu_libraries (gpu_libraries()), git (None or {"commit", "dirty"}),
    argv, orig_argv (Python >= 3.10), executable, cwd, env.
    """
    caches = cpu_caches()
    cores = logical_cores()
    meta = {
        "timestamp_utc": _utc_now_iso(),
        "hostname": _hostname(),
        "cpu_model": cpu_model(),
        "cpu_hypervisor": cpu_hypervisor(),
        "cpu_count": cores["cpu_count"],
        "cpu_affinity": cores["affinity"],
        "caches": caches,
        "cache_sizes": cache_sizes_by_level(caches),
    }
    meta.update(_platform_info())
    meta["python_version"] = sys.version.split()[0]
    meta["numpy_version"] = package_version("numpy")
    meta["kbench_version"] = package_version("kbench")
    meta["frameworks"] = framework_info()
    meta["gpu_libraries"] = gpu_libraries()
    try:
        meta["git"] = git_cached(os.getcwd())
    except OSError:                         # the working directory was removed
        meta["git"] = git_info()
    meta["argv"] = command_line()
    meta.update(interpreter_command())
    try:
        meta["cwd"] = os.getcwd()
    except OSError:
        meta["cwd"] = UNKNOWN
    meta["env"] = relevant_env()
    return meta


# environment variables that name a run rather than change what it runs
_ENV_NOT_COMPARED = ("KBENCH_GIT_COMMIT",)


def _short_value(v) -> str:
    text = "unset" if v is None else str(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _changed(label: str, a, b) -> "str | None":
    return f"{label} {_short_value(a)} -> {_short_value(b)}" if a != b else None


def environment_changes(old: dict, new: dict) -> list:
    """What changed around the code between two results' metadata, in words: the GPU (model,
    another board of the model, driver, power limit, ECC), the frameworks and GPU libraries
    both had loaded, the interpreter and numpy, and the environment variables kbench records.
    A figure can move with any of them while the code under test did not. [] where nothing
    known changed or either side has no metadata. Pure; never raises on odd input."""
    def obj(d, *path):
        for k in path:
            d = d.get(k) if isinstance(d, dict) else None
        return d if isinstance(d, dict) else {}

    if not obj(old) or not obj(new):
        return []
    out = []
    ga, gb = obj(old, "gpu"), obj(new, "gpu")
    if ga and gb:
        if ga.get("name") != gb.get("name"):
            out.append(_changed("GPU", ga.get("name"), gb.get("name")))
        elif ga.get("uuid") and gb.get("uuid") and ga["uuid"] != gb["uuid"]:
            # boards of one model differ by a few % where the power limit caps them
            out.append(f"another {ga.get('name') or 'GPU'} board "
                       f"({str(ga['uuid'])[:12]} -> {str(gb['uuid'])[:12]})")
        da = ga.get("nvml_driver_version") or ga.get("driver_version")
        db = gb.get("nvml_driver_version") or gb.get("driver_version")
        for label, a, b in (("driver", da, db),
                            ("power limit W", ga.get("nvml_power_limit_w"),
                             gb.get("nvml_power_limit_w")),
                            ("ECC", ga.get("ecc_enabled"), gb.get("ecc_enabled"))):
            if a is not None and b is not None and a != b:
                out.append(_changed(label, a, b))
    elif not ga and not gb and old.get("cpu_model") != new.get("cpu_model") and \
            old.get("cpu_model") and new.get("cpu_model"):
        out.append(_changed("CPU", old["cpu_model"], new["cpu_model"]))
    for label, key in (("Python", "python_version"), ("numpy", "numpy_version")):
        a, b = old.get(key), new.get(key)
        if a and b and a != b:
            out.append(_changed(label, a, b))
    fa, fb = obj(old, "frameworks"), obj(new, "frameworks")
    for k in sorted(set(fa) & set(fb)):
        if fa[k] != fb[k] and not k.endswith("_threads"):
            out.append(_changed(k, fa[k], fb[k]))
    la, lb = obj(old, "gpu_libraries"), obj(new, "gpu_libraries")
    for k in sorted(set(la) & set(lb)):
        a, b = la[k] if isinstance(la[k], dict) else {}, lb[k] if isinstance(lb[k], dict) else {}
        va, vb = a.get("version"), b.get("version")
        if va and vb:
            if va != vb:
                out.append(_changed(k, va, vb))
        elif a.get("path") != b.get("path"):
            out.append(f"{k} another file ({os.path.basename(str(a.get('path')))} -> "
                       f"{os.path.basename(str(b.get('path')))})")
    ea, eb = obj(old, "env"), obj(new, "env")
    for k in sorted((set(ea) | set(eb)) - set(_ENV_NOT_COMPARED)):
        if ea.get(k) != eb.get(k):
            out.append(_changed(k, ea.get(k), eb.get(k)))
    return [line for line in out if line]
