"""Build kbench._core, the C core.

The CUDA backend is compiled when the CUDA headers (cuda.h, cupti.h) are found
under $CUDA_HOME or /usr/local/cuda; kbench never links against a GPU library
at build time -- every GPU library is opened lazily with dlopen.

Knobs (environment variables):
  KBENCH_SANITIZE=address|undefined|address,undefined   sanitizer build
  KBENCH_DEBUG=1        -O0 -g3, asserts on
  KBENCH_COVERAGE=1     gcov instrumentation
  KBENCH_NO_CUDA=1      build without the CUDA backend even if headers exist
"""
import os
from pathlib import Path

import numpy
from setuptools import Extension, setup

ROOT = Path(__file__).parent
# Files of the CUDA backend: compiled only when the CUDA headers are found.
CUDA_ONLY = {"loader_common.c", "loader_cuda.c", "loader_cupti.c", "loader_nvml.c",
             "loader_nvrtc.c", "cuda_device.c", "nvml_sampler.c", "cuda_context.c",
             "measure_cuda.c", "cupti_trace.c", "gate.c", "graph.c", "coldcache_cuda.c",
             "cuda_kernels.c"}


def find_cuda_include():
    if os.environ.get("KBENCH_NO_CUDA"):
        return None
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if not base:
            continue
        inc = Path(base) / "include"
        if (inc / "cuda.h").exists() and (inc / "cupti.h").exists():
            return str(inc)
        # some toolkits keep CUPTI under extras/
        extra = Path(base) / "extras" / "CUPTI" / "include"
        if (inc / "cuda.h").exists() and (extra / "cupti.h").exists():
            return [str(inc), str(extra)]
    return None


cuda_inc = find_cuda_include()
cuda_incs = [] if cuda_inc is None else ([cuda_inc] if isinstance(cuda_inc, str) else cuda_inc)

sources = []
for p in sorted((ROOT / "csrc").glob("*.c")):
    if p.name in CUDA_ONLY and not cuda_incs:
        continue
    sources.append(str(p.relative_to(ROOT)))
sources += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "kernels" / "cpu").glob("*.c"))]

define_macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if cuda_incs:
    define_macros.append(("KB_HAVE_CUDA", "1"))

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
    include_dirs=["csrc", numpy.get_include()] + cuda_incs,
    define_macros=define_macros,
    extra_compile_args=cflags,
    extra_link_args=ldflags,
    libraries=["dl", "pthread", "m"],
    depends=[str(p.relative_to(ROOT)) for p in (ROOT / "csrc").glob("*.h")],
)

setup(ext_modules=[core])
