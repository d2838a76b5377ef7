"""What this kbench build compiled: backends, and the CUDA headers it was built against.

setup.py takes cuda.h and cupti.h from the pip packages nvidia-cuda-runtime, nvidia-cuda-cupti
and nvidia-cuda-crt (pinned to CUDA 13.0.0), $KBENCH_CUDA_INCLUDE or a CUDA toolkit, and records
which in ``kbench._core.BUILD``; a CPU-only build happens only with KBENCH_NO_CUDA=1.
"""
from typing import Any, Dict

from . import _core

# How to get a build with the CUDA backend, for error messages and `kbench info`.
# (The "kbench" project on PyPI is another one: point pip at a kbench wheel or checkout.)
HOW_TO_GET_CUDA = (
    "reinstall kbench with KBENCH_NO_CUDA unset: `pip install --force-reinstall --no-deps "
    "kbench-*.whl` (every kbench wheel has the CUDA backend), or `pip install .` in a kbench "
    "checkout or sdist -- pip then fetches the CUDA headers from the nvidia-cuda-runtime, "
    "nvidia-cuda-cupti and nvidia-cuda-crt packages; no CUDA toolkit is needed")


def _version(v: Any) -> str:
    """13000 -> '13.0' (CUDA_VERSION), 130000 -> '13.0.0' (CUPTI_API_VERSION)."""
    if not isinstance(v, int) or v <= 0:
        return "-"
    if v >= 100000:
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 10}"


def build_info() -> Dict[str, Any]:
    """kbench._core.BUILD as a dict (a copy): backends, cuda_version (CUDA_VERSION of the
    headers, None without CUDA), cupti_api_version, headers (where they came from), compiler,
    python (the headers' version)."""
    info = getattr(_core, "BUILD", None)
    if isinstance(info, dict):
        return dict(info)
    # a _core from before BUILD existed
    cuda = bool(getattr(_core, "HAVE_CUDA", 0))
    return {"backends": ("host", "cuda", "hip") if cuda else ("host",),
            "cuda_version": getattr(_core, "CUDA_HEADERS_VERSION", None) if cuda else None,
            "cupti_api_version": None, "headers": None, "compiler": None, "python": None}


def describe_build() -> str:
    """One line for `kbench info`: backends and header versions, or how to get the CUDA one."""
    b = build_info()
    backends = ", ".join(b.get("backends") or ())
    if "cuda" not in (b.get("backends") or ()):
        return (f"build: backends {backends} (built without the CUDA backend, KBENCH_NO_CUDA=1); "
                f"for it, {HOW_TO_GET_CUDA}")
    return (f"build: backends {backends}; CUDA headers {_version(b.get('cuda_version'))} "
            f"(CUDA_VERSION {b.get('cuda_version')}), CUPTI API "
            f"{_version(b.get('cupti_api_version'))}, from {b.get('headers')}; "
            f"{b.get('compiler') or 'compiler unknown'}")
