"""Build kbench._core, the C core.

Every build compiles the CUDA backend; a CPU-only build happens only when asked for with
KBENCH_NO_CUDA=1. kbench never links against a GPU library -- libcuda, CUPTI, NVML and NVRTC are
opened lazily with dlopen at run time -- so the build needs only headers: cuda.h, cupti.h and
what cupti.h includes (crt/host_defines.h among them); NVML and NVRTC are declared in
csrc/loaders/loader.h. They are taken, all from one place, from the first of:

  1. $KBENCH_CUDA_INCLUDE: directories (separated by ':') that hold cuda.h and cupti.h. An
     explicit choice, e.g. a newer toolkit's include/ and extras/CUPTI/include.
  2. The pip packages nvidia-cuda-runtime, nvidia-cuda-cupti and nvidia-cuda-crt
     (nvidia/cu13/include/), which pyproject.toml lists as build requirements pinned to the CUDA
     13.0.0 release. `pip install .`, `pip install -e .` and `python -m build` install them into
     the isolated build environment; a --no-build-isolation build finds them where the
     environment has them (a CUDA 13 PyTorch brings the first two; all three: 13 MB of wheels).
  3. A CUDA toolkit: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda (include/, or extras/CUPTI/include
     for cupti.h).

The packages win over a toolkit because the headers' versions are floors at run time, and the
pinned packages give every build the same, lowest CUDA 13 floors whatever the build machine has:
  - CUPTI_API_VERSION: kbench refuses a libcupti older than the headers (its activity records
    would be misread), and shares the copy already in the process (PyTorch's). 13.0.0's headers
    accept every CUDA 13 CUPTI; a toolkit's 13.x headers would refuse an older 13.y CUPTI.
  - CUDA_VERSION: driver functions are resolved with cuGetProcAddress at min(CUDA_VERSION,
    driver version), so older headers cost nothing but functions kbench does not use, and a
    driver older or newer than the headers is handled at run time (csrc/loaders/loader_cuda.c).
  - the major version picks the libcupti soname (libcupti.so.13).

The build prints what it built: backends, where the headers came from and their versions
(`pip install -v` shows it; kbench._core.BUILD and `kbench info` keep it).

Knobs (environment variables):
  KBENCH_NO_CUDA=1      build without the CUDA backend (CPU only)
  KBENCH_CUDA_INCLUDE   the directories holding cuda.h and cupti.h (see above)
  KBENCH_SANITIZE=address|undefined|address,undefined   sanitizer build
  KBENCH_DEBUG=1        -O0 -g3, asserts on
  KBENCH_COVERAGE=1     gcov instrumentation
"""
import importlib.util
import os
import re
import sys
from pathlib import Path

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
# The C core's folders: core (module, loop, statistics, stop rules, comparison, the option
# schema), clocks (the clock regimes' rules and verdicts over NVML samples: GPU judgements, built
# in every build so their tests run on any host), host (the CPU backend and its cold caches),
# and the CUDA backend (cuda) with the lazily opened GPU libraries (loaders), both left out only
# of a KBENCH_NO_CUDA=1 build.
CORE_DIRS = ("core", "clocks", "host")
# The HIP backend (hip) needs no HIP header (csrc/hip/hip_api.h declares what it uses), but shares
# the loaders' helpers, so it builds with the GPU backends and leaves with them under
# KBENCH_NO_CUDA=1.
CUDA_DIRS = ("cuda", "loaders", "hip")
# The packages pyproject.toml pins for the headers (keep the two in step).
HEADER_PACKAGES = ("nvidia-cuda-runtime", "nvidia-cuda-cupti", "nvidia-cuda-crt")
HEADER_PINS = " ".join(f"'{n}==13.0.48'" for n in HEADER_PACKAGES)   # as pyproject.toml


def _dirs_with(dirs, name):
    return [d for d in dirs if (d / name).is_file()]


def _pick(dirs):
    """The include directories for the headers the build needs among dirs, or None."""
    found = [_dirs_with(dirs, h) for h in ("cuda.h", "cupti.h", "crt/host_defines.h")]
    if not all(found):
        return None
    return list(dict.fromkeys(f[0] for f in found))


def _package_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


def find_cuda_headers():
    """(include dirs, what they are) for the CUDA backend, or (None, why not)."""
    explicit = os.environ.get("KBENCH_CUDA_INCLUDE")
    if explicit:
        dirs = [Path(p) for p in explicit.split(os.pathsep) if p]
        inc = _pick(dirs)
        if inc is None:
            raise SystemExit(f"kbench: KBENCH_CUDA_INCLUDE={explicit} lacks cuda.h, cupti.h "
                             "or crt/host_defines.h")
        return inc, f"KBENCH_CUDA_INCLUDE={explicit}"

    spec = importlib.util.find_spec("nvidia")
    partial = ""
    if spec is not None and spec.submodule_search_locations:
        pkg_dirs = [Path(p) / "cu13" / "include" for p in spec.submodule_search_locations]
        inc = _pick(pkg_dirs)
        if inc is not None:
            versions = ", ".join(f"{n} {_package_version(n) or '(version unknown)'}"
                                 for n in HEADER_PACKAGES)
            return inc, f"pip packages: {versions}"
        if any(d.is_dir() for d in pkg_dirs):
            partial = (" (nvidia/cu13/include is there but lacks some of cuda.h, cupti.h, "
                       "crt/host_defines.h: install " + HEADER_PINS + ")")
            print("kbench: " + partial.strip(" ()") + "; looking for a CUDA toolkit",
                  file=sys.stderr)

    tried = []
    for var in ("CUDA_HOME", "CUDA_PATH", None):
        base = os.environ.get(var) if var else "/usr/local/cuda"
        if not base:
            continue
        base = Path(base)
        tried.append(str(base))
        inc = _pick([base / "include", base / "extras" / "CUPTI" / "include"])
        if inc is not None:
            return inc, f"CUDA toolkit: {base}" + (f" (${var})" if var else "")
    return None, ("no cuda.h, cupti.h and crt/host_defines.h: not in the nvidia-cuda-runtime/"
                  "-cupti/-crt packages (nvidia/cu13/include) of this build environment"
                  + partial + ", nor under " + (", ".join(tried) or "a CUDA toolkit"))


def header_define(path, name):
    m = re.search(rf"^\s*#\s*define\s+{name}\s+(\d+)", path.read_text(errors="replace"), re.M)
    return int(m.group(1)) if m else None


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


if os.environ.get("KBENCH_NO_CUDA"):
    cuda_incs, headers = [], None
    built = "kbench: building _core with backends: host (CPU only: KBENCH_NO_CUDA is set)"
else:
    cuda_incs, headers = find_cuda_headers()
    if cuda_incs is None:
        sys.exit(
            f"kbench: cannot build the CUDA backend: {headers}.\n"
            "  A normal `pip install .` (with build isolation) installs them from PyPI. For a\n"
            "  --no-build-isolation or offline build, install the header packages first:\n"
            f"    pip install {HEADER_PINS}\n"
            "  (or carry their wheels: pip install --no-index --find-links DIR ...), or point\n"
            "  CUDA_HOME or KBENCH_CUDA_INCLUDE at a CUDA toolkit. KBENCH_NO_CUDA=1 builds\n"
            "  without the CUDA backend (CPU only).")
    cuda_h = next(d / "cuda.h" for d in cuda_incs if (d / "cuda.h").is_file())
    cupti_v = next((d / "cupti_version.h" for d in cuda_incs
                    if (d / "cupti_version.h").is_file()), None)
    cuda_version = header_define(cuda_h, "CUDA_VERSION")
    cupti_version = header_define(cupti_v, "CUPTI_API_VERSION") if cupti_v else None
    built = (f"kbench: building _core with backends: host, cuda, hip (CUDA_VERSION {cuda_version}, "
             f"CUPTI_API_VERSION {cupti_version}; headers from {headers}: "
             + ", ".join(map(str, cuda_incs)) + ")")
print(built, file=sys.stderr, flush=True)

src_dirs = CORE_DIRS + (CUDA_DIRS if cuda_incs else ())
sources = [str(p.relative_to(ROOT)) for d in src_dirs
           for p in sorted((ROOT / "csrc" / d).glob("*.c"))]
sources += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "kernels" / "cpu").glob("*.c"))]

define_macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if cuda_incs:
    define_macros += [("KB_HAVE_CUDA", "1"), ("KB_BUILD_HEADERS", c_string(headers))]

cflags = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers", "-fvisibility=hidden"]
ldflags = []
if os.environ.get("KBENCH_DEBUG"):
    cflags += ["-O0", "-g3", "-UNDEBUG"]
else:
    cflags += ["-O2"]
san = os.environ.get("KBENCH_SANITIZE")
if san:
    cflags += [f"-fsanitize={san}", "-fno-omit-frame-pointer", "-g"]
    ldflags += [f"-fsanitize={san}"]
if os.environ.get("KBENCH_COVERAGE"):
    cflags += ["--coverage"]
    ldflags += ["--coverage"]

core = Extension(
    "kbench._core",
    sources=sources,
    include_dirs=[f"csrc/{d}" for d in CORE_DIRS + CUDA_DIRS] + [numpy.get_include()]
    + [str(d) for d in cuda_incs],
    define_macros=define_macros,
    extra_compile_args=cflags,
    extra_link_args=ldflags,
    libraries=["dl", "pthread", "m"],
    depends=[str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.h")],
)



class BuildExt(build_ext):
    """build_ext that
    - drops the interpreter's own -Wl,-rpath (a pyenv or conda Python puts its lib/ there):
      _core needs no run path -- it links only libc, libdl, libpthread and libm -- and a wheel
      should not carry the build machine's directories;
    - rebuilds when the configuration changed (KBENCH_NO_CUDA, the headers, a knob), not only
      when a file is newer: build/ is reused by in-tree builds (pip wheel, pip install
      --no-build-isolation, setup.py build_ext), and a stale _core would say it was built
      otherwise."""

    def build_extensions(self):
        ld = getattr(self.compiler, "linker_so", None)
        if ld:
            self.compiler.linker_so = [a for a in ld if not a.startswith(("-Wl,-rpath", "-Wl,-R"))]
        # kbench._core.BUILD["cflags"]: results record how the core that timed them was
        # compiled -- the compiler's own flags (the interpreter's, plus $CFLAGS and $CPPFLAGS:
        # -DNDEBUG, -fwrapv, -Werror) and then kbench's, as the compiler sees them
        own = list(getattr(self.compiler, "compiler_so", None) or [])[1:]
        for e in self.extensions:
            e.define_macros = [m for m in e.define_macros if m[0] != "KB_BUILD_CFLAGS"] + [
                ("KB_BUILD_CFLAGS", c_string(" ".join(own + list(e.extra_compile_args))))]
        stamp = Path(self.build_temp) / "kbench-build-config.txt"
        config = repr([(e.name, e.sources, e.define_macros, e.include_dirs, e.extra_compile_args,
                        e.extra_link_args) for e in self.extensions])
        if not stamp.is_file() or stamp.read_text() != config:
            self.force = True
        super().build_extensions()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(config)


setup(ext_modules=[core], cmdclass={"build_ext": BuildExt})
