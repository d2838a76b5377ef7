"""Type stubs for kbench._core, the C core. The CUDA names exist only when HAVE_CUDA == 1."""
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, final

HAVE_CUDA: int
HAVE_HIP: int   # the HIP backend is built with the GPU backends (0 under KBENCH_NO_CUDA=1)
# the option schema (csrc/core/kb_schema.h): one dict per option of the C core -- name, type,
# default, with_target, choices, min, max, min_open, max_open, backends, layer, doc
OPTION_SCHEMA: Tuple[Dict[str, Any], ...]
LOOP_DEFAULTS: dict[str, Any]   # the timing loop's defaults, from the schema's loop rows
CI_MIN_SAMPLES: int             # the 'ci' rule stops from this many samples on (their order judged)
CUDA_HEADERS_VERSION: int
# what the build compiled: backends ("host"[, "cuda"]), cuda_version (CUDA_VERSION of cuda.h),
# cupti_api_version, headers (where setup.py found them), compiler, python (headers' version),
# cflags (the compile flags of _core)
BUILD: Dict[str, Any]

class KbenchError(RuntimeError):
    # set on errors of a failed library call (CudaError, CuptiError, NvmlError, NvrtcError,
    # HipError, RocmSmiError): the call's text, its return code and the code's name, and where
    # in kbench's C it was checked ("loader_hip.c:175": for developers, not in the message)
    call: str
    code: int
    name: str
    where: str
class LibraryNotFound(KbenchError, OSError): ...
class CudaError(KbenchError): ...
class CaptureError(CudaError): ...
class CuptiError(KbenchError): ...
class CuptiBusy(CuptiError): ...
class NvmlError(KbenchError): ...
class NvrtcError(KbenchError): ...
class HipError(KbenchError): ...      # a HIP runtime call failed (every build)
class RocmSmiError(KbenchError): ...  # a ROCm SMI call failed (every build)

# clock.c / coldcache.c
def now_ns() -> int: ...
def _clock_step_from_reads(reads: Sequence[int]) -> float: ...   # tests: the step rule
def _after_fork_in_child() -> None: ...   # os.register_at_fork: a child starts with the lock free
def host_timer_info(fn: Optional[Callable[[], Any]] = ..., calls: int = ...) -> Dict[str, Any]: ...
# {"resolution_ns": the step the loop's samples sit on, "min_move_ns", "read_cost_ns", "clock",
#  with fn: "call_overhead_min_ns", "call_overhead_mean_ns"}
def cpu_cache_info() -> Dict[str, Any]: ...
# The last-level cache the CPU flush is sized for (2x llc_bytes), for the CPUs this thread may run
# on (sched_getaffinity), not cpu0's: {"llc_bytes": size (0: unknown), "source": where llc_bytes
# came from: "KBENCH_LLC_BYTES" (the override), "sysfs" (the largest last-level cache among
# "cpus"), "sysconf" (glibc's figure, which can be far off: some CPU of "cpus" has no readable
# last-level size in sysfs) or "none" (llc_bytes 0), "llc_cpu": the CPU whose sysfs cache gave
# llc_bytes (source "sysfs" only, else None), "cpus": the CPUs read, "levels": [{"level", "type",
# "bytes"}...] of one CPU, "levels_cpu": that CPU (llc_cpu's, or the first without a readable
# last-level size; None if no CPU)}. sysfs is read again only when the affinity mask changes.
# Test hook: $KBENCH_SYSFS_CPU_ROOT replaces /sys/devices/system/cpu (tests/test_cpu_cache_info.py).
def cpu_flush(nbytes: int, /) -> None: ...

# stats.c / criterion.c
def summarize(samples: Sequence[float], ci_level: float = ...,
              ordered: bool = ...) -> Dict[str, Any]: ...
def quantile(samples: Sequence[float], q: Any) -> Any: ...
def median_ci(samples: Sequence[float], level: float = ...) -> Tuple[float, float]: ...
def bootstrap_median_ci(samples: Sequence[float], level: float = ..., n_boot: int = ...,
                        seed: int = ...) -> Tuple[float, float]: ...
# between_runs.c: what moves a figure between runs (kbench.measure.runhistory)
def between_runs(medians: Sequence[float], ci_level: float = ...) -> Dict[str, Any]: ...
def t_quantile(level: float, df: float, /) -> float: ...
def stop_rules() -> List[str]: ...
def criterion_check(name: str, samples: Sequence[float], target: float, ci_level: float = ...,
                    step: int = ..., resolution: float = ...) -> Tuple[bool, float]: ...

# steady.c: the sustained regime's settle rule and the burst regime's recovery test, on
# readings given as arrays (the CUDA backend runs the same code on its NVML sampler's)
def clock_settled_at(t_s: Sequence[float], sm_mhz: Sequence[float], reasons: Sequence[int],
                     power_w: Optional[Sequence[float]] = ...,
                     power_inst_w: Optional[Sequence[float]] = ..., *,
                     load_start_s: Optional[float] = ..., power_limit_w: Optional[float] = ...,
                     window_s: float = ..., rel_tol: float = ..., min_load_s: float = ...,
                     avg_window_s: float = ..., power_tol: float = ..., headroom: float = ...,
                     capped_min_load_s: float = ...) -> Tuple[int, float, bool]: ...
def clock_settled_carried_at(t_s: Sequence[float], sm_mhz: Sequence[float],
                             reasons: Sequence[int], power_w: Optional[Sequence[float]] = ...,
                             power_inst_w: Optional[Sequence[float]] = ..., *,
                             carried_mhz: float, carried_under_limit: bool = ...,
                             carried_ago_s: float = ..., carried_loaded_s: float = ...,
                             load_start_s: Optional[float] = ...,
                             power_limit_w: Optional[float] = ...,
                             max_sm_mhz: Optional[float] = ..., carry_max_gap_s: float = ...,
                             carry_response_s: float = ...,
                             carry_window_s: float = ...,
                             carry_update_margin_s: Optional[float] = ...,
                             late_headroom: float = ..., capped_continue_gap_s: float = ...
                             ) -> Tuple[int, float, bool, int]: ...
def nvml_refreshes(t_s: Sequence[float], power_w: Optional[Sequence[float]] = ...,
                   power_inst_w: Optional[Sequence[float]] = ..., *,
                   after_s: Optional[float] = ...) -> Any: ...   # int64 indices i: either power changed from i - 1
def clock_settled_since(t_s: Sequence[float], sm_mhz: Sequence[float], reasons: Sequence[int],
                        *, settled_mhz: Optional[float], under_limit: bool = ...,
                        load_start_s: Optional[float] = ..., rel_tol: float = ...) -> float: ...
def power_recovered(t_s: Sequence[float], reasons: Sequence[int],
                    power_w: Optional[Sequence[float]] = ...,
                    power_inst_w: Optional[Sequence[float]] = ..., *,
                    power_limit_w: Optional[float] = ..., recover_window_s: float = ...,
                    recover_avg_frac: float = ..., headroom: float = ...) -> bool: ...

# regime.c: C's verdicts on a CUDA record, as measure_cuda puts them into raw["cuda"]
# (clocks_summary, gpu_timed_fraction, gpu_busy_fraction, power_capped, regime held/why/note).
# clock_summary's dict adds power_capped; max_sm_clock_mhz None: the sampler dict's own.
def clock_summary(clocks: Optional[Dict[str, Any]],
                  max_sm_clock_mhz: Optional[float] = ...) -> Dict[str, Any]: ...
def timed_fraction(events_s: Sequence[float], sampling_s: Optional[float],
                   unroll: Optional[float] = ...) -> Optional[float]: ...
def busy_fraction(timed: Optional[float], keep_busy_gpu_s: Optional[float],
                  sampling_s: Optional[float]) -> Optional[float]: ...
def regime_verdict(*, regime: str = ..., clocks_locked: bool = ..., settled: Optional[bool] = ...,
                   settle_at_s: Optional[float] = ..., settle_max_s: Optional[float] = ...,
                   settle_sm_mhz: Optional[float] = ..., clocks_read: bool = ...,
                   timed_sm_mhz: Optional[float] = ..., power_capped: bool = ...,
                   cold: bool = ..., busy_fraction: Optional[float] = ..., batches: int = ...,
                   unrecovered: int = ..., recover_max_s: float = ...,
                   start_sm_mhz_min: Optional[float] = ...,
                   start_sm_mhz_max: Optional[float] = ...,
                   settled_unlimited: bool = ..., timed_limits: int = ...) -> Dict[str, Any]: ...

# measure.c / measure_host.c
def measure_host(fn: Callable[..., Any], arg_sets: Tuple[Tuple[Any, ...], ...],
                 kwargs: Optional[Dict[str, Any]] = ..., *, plan: Optional[Plan] = ...,
                 cold: Optional[str] = ...,
                 flush_bytes: int = ..., evict: Optional[Tuple[Tuple[Any, ...], ...]] = ...,
                 pre_sample: Optional[Callable[[], Any]] = ...,
                 ranks: Any = ..., **loop: Any) -> Dict[str, Any]: ...
# evict.c: cold by eviction -- the line flush this CPU runs ("clflushopt", "clflush",
# "dc civac"; None where none), and one buffer's lines flushed from every cache level
CPU_EVICT_INSTRUCTION: Optional[str]
CPU_EVICT_FROM_BYTES: int       # a write flush past this evicts the operands' lines instead
def cpu_evict(buffer: Any, /) -> int: ...

# plan.c: kbench.bench's cold_cache and mode for backend 'host', 'cuda' or 'hip', checked and
# decided once, before anything runs (ValueError naming the parameter and its values); cupti()
# -> (usable, busy, why) is called only when a CUDA plan needs it, never in profile mode
@final
class Plan:
    @property
    def backend(self) -> str: ...           # 'host', 'cuda', 'hip'
    @property
    def measurement(self) -> str: ...       # 'host', 'cupti', 'events', 'graph', 'profile'
    @property
    def timer(self) -> Optional[str]: ...   # 'host', 'cupti', 'events'; None in profile mode
    @property
    def cold(self) -> Optional[str]: ...    # None, 'flush', 'rotate'
    @property
    def flush(self) -> bool: ...
    @property
    def rotate(self) -> bool: ...
    @property
    def graph(self) -> bool: ...
    @property
    def profile(self) -> Optional[str]: ...  # why profile mode
    @property
    def note(self) -> Optional[str]: ...     # why the backend's pick fell back
    def as_dict(self) -> Dict[str, Any]: ...

def plan(backend: str, cold_cache: Optional[str], mode: Optional[str], *,
         profile: Optional[str] = ...,
         cupti: Optional[Callable[[], Tuple[bool, bool, str]]] = ...) -> Plan: ...

# compare.c
def compare(out: Any, ref: Any, rtol: float, atol: float, equal_nan: bool = ...,
            out_kind: Optional[str] = ..., ref_kind: Optional[str] = ...) -> Dict[str, Any]: ...

# kernels/cpu
def stream_copy(dst: Any, src: Any, threads: int = ...) -> None: ...
def stream_triad(a: Any, b: Any, c: Any, scalar: float, threads: int = ...) -> None: ...
def fma_loop(n_iter: int, threads: int = ..., isa: Optional[str] = ...,
             dtype: str = ...) -> float: ...  # dtype "float64" (default) or "float32"
def fma_loop_isa() -> str: ...
def fma_loop_isas() -> List[str]: ...
def fma_loop_flops_per_iter(isa: Optional[str] = ..., dtype: str = ...) -> int: ...

# CUDA backend (HAVE_CUDA)
def gpu_library_status() -> Dict[str, Dict[str, Any]]: ...
# the libcupti file to open first, after a copy already mapped and $KBENCH_CUPTI_PATH; False
# once CUPTI was opened (the process's CUPTI is chosen once)
def prefer_cupti(path: Optional[Union[str, "os.PathLike[str]"]]) -> bool: ...
# detach a CUPTI kbench left attached between back-to-back measurements; True if there was one
def cupti_release() -> bool: ...
# tests: raise what kbench raises when `call` returns `code` in library `lib`
def _raise_check_error(lib: str, code: int, call: str) -> None: ...
def cuda_device_count() -> int: ...
def cuda_device_info(ordinal: int = ...) -> Dict[str, Any]: ...
def nvml_snapshot(ordinal: int = ...) -> Dict[str, Any]: ...
def nvml_p2p(pci_bus_ids: Sequence[str]) -> List[Dict[str, Any]]: ...
# each key's union of its [start, end) intervals: how a CUPTI sample counts a call's records
def busy_time(keys: Sequence[int], starts: Sequence[int], ends: Sequence[int]) -> Dict[int, int]: ...
def nvml_sampler_start(ordinal: int = ..., period_s: float = ...) -> Any: ...
def nvml_sampler_stop(sampler: Any) -> Dict[str, Any]: ...
def nvml_clock_event_reason_names(mask: int) -> List[str]: ...
# measure_cuda's options and their defaults, written once (csrc/cuda/cuda_options.c): device,
# mode ('events'|'cupti'), cold (None|'flush'|'rotate'), flush_bytes (0: 2x L2), unroll (calls
# per launch), gate, keep_busy, gate_batch, gate_timeout_s, busy_warmup_s (None: the loop's
# warmup_s, run only where no settle rule judges the load: no NVML, burst), cupti_allow_foreign, sample_clocks, clock_period_s, settle_max_s, regime
# ('sustained'|'burst'), pre_sample (None); and, not options, callable_warmup_max_s /
# callable_warmup_min: the bounds the callable's own warm-up is held to on CUDA (the busy kernel
# has warmed the clocks; the loop's warmup_s is clamped to the first).
CUDA_DEFAULTS: Dict[str, Any]
def measure_cuda(fn: Any, arg_sets: Tuple[Tuple[Any, ...], ...],
                 kwargs: Optional[Dict[str, Any]] = ..., *, stream: int, device: int = ...,
                 plan: Optional[Plan] = ..., mode: str = ..., cold: Optional[str] = ...,
                 flush_bytes: int = ..., unroll: float = ..., gate: bool = ..., keep_busy: bool = ...,
                 gate_batch: int = ..., gate_timeout_s: float = ...,
                 busy_warmup_s: Optional[float] = ..., cupti_allow_foreign: bool = ...,
                 sample_clocks: bool = ..., clock_period_s: float = ...,
                 settle_max_s: float = ..., regime: str = ...,
                 # called with no arguments before every call of fn (priming and warm-up
                 # included), outside the timed part and CUPTI's attribution; turns the
                 # keep-busy bridges off; an exception from it aborts the measurement
                 pre_sample: Optional[Callable[[], Any]] = ...,
                 **loop: Any) -> Dict[str, Any]: ...
def graph_capture(fn: Callable[..., Any], arg_sets: Tuple[Tuple[Any, ...], ...],
                  kwargs: Optional[Dict[str, Any]] = ..., stream: int = ..., device: int = ...,
                  unroll: int = ...) -> "CudaGraph": ...
def launch_empty(stream: int = ..., device: int = ...) -> None: ...
# profile.c: profile mode's range and the driver memory probe
def cuda_profiler_start(device: int = ...) -> None: ...
def cuda_profiler_stop(device: int = ...) -> None: ...
def cuda_synchronize(device: int = ...) -> None: ...
def cuda_mem_info(device: int = ..., create: bool = ...) -> Optional[Tuple[int, int]]: ...

class CudaGraph:
    unroll: int
    kernel_nodes: int
    memcpy_nodes: int
    memset_nodes: int
    other_nodes: int
    def launch(self, stream: int = ...) -> None: ...

class DeviceBuffer:
    ptr: int
    nbytes: int
    def __init__(self, nbytes: int, device: int = ...) -> None: ...
    def memset(self, value: int, stream: int = ...) -> None: ...
    def to_numpy(self, dtype: Any = ...) -> Any: ...

class CudaKernel:
    name: str
    log: str
    registers: int
    device: int
    def __init__(self, source: str, name: str, options: Sequence[str] = ...,
                 device: int = ...) -> None: ...
    def launch(self, grid: Any, block: Any, signature: str, args: Sequence[Any],
               stream: int = ..., shared: int = ...) -> None: ...


# HIP backend (HAVE_HIP; csrc/hip): libamdhip64 and librocm_smi64 opened on first use
def hip_library_status() -> Dict[str, Dict[str, Any]]: ...
def hip_device_count() -> int: ...
def hip_device_info(ordinal: int) -> Dict[str, Any]: ...
def rocm_smi_snapshot(index: int) -> Dict[str, Any]: ...

class HipGraph:
    outputs: Tuple[Any, ...]
    calls: int
    device: int
    def launch(self, stream: int) -> None: ...

def hip_graph_capture(fn: Callable[..., Any], arg_sets: Tuple[Tuple[Any, ...], ...],
                      kwargs: Optional[Dict[str, Any]] = ..., *, stream: int, device: int = ...,
                      capture_mode: str = ...) -> HipGraph: ...
def measure_hip(graphs: Tuple[HipGraph, ...], *, stream: int, device: int = ...,
                plan: Optional[Plan] = ..., cold: Optional[str] = ..., flush_bytes: int = ..., gate: bool = ...,
                gate_batch: int = ..., gate_timeout_s: float = ..., unroll: float = ...,
                **loop: Any) -> Dict[str, Any]: ...
