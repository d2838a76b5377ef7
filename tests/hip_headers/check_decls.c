/* check_decls.c -- kbench's hand-written HIP declarations (csrc/hip/hip_decls.h) against the real
 * hip/hip_runtime_api.h: every function type kbench calls through must be compatible with HIP's
 * prototype, and every value must match, or this file does not compile. Compiled by
 * tests/test_hip_headers.py (gcc -fsyntax-only) where the headers are installed (Debian's
 * libamdhip64-dev; .ci/run installs it). */
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#include "hip_decls.h"
#define SAME_TYPE_(name, ret, params) \
    _Static_assert(__builtin_types_compatible_p(kb_##name##_fn, __typeof__(&name)), #name " differs from HIP's prototype");
KB_HIP_REQUIRED(SAME_TYPE_)
KB_HIP_OPTIONAL(SAME_TYPE_)
#define SAME_VALUE_(x) _Static_assert((long)KB_##x == (long)x, #x " differs from HIP's value");
SAME_VALUE_(hipSuccess) SAME_VALUE_(hipErrorInvalidValue) SAME_VALUE_(hipErrorOutOfMemory)
SAME_VALUE_(hipErrorNotInitialized) SAME_VALUE_(hipErrorNoDevice) SAME_VALUE_(hipErrorInvalidDevice)
SAME_VALUE_(hipErrorNotSupported) SAME_VALUE_(hipErrorUnknown)
SAME_VALUE_(hipDeviceAttributeClockRate) SAME_VALUE_(hipDeviceAttributeL2CacheSize)
SAME_VALUE_(hipDeviceAttributeMemoryBusWidth) SAME_VALUE_(hipDeviceAttributeMemoryClockRate)
SAME_VALUE_(hipDeviceAttributeMultiprocessorCount) SAME_VALUE_(hipDeviceAttributeCanUseStreamWaitValue)
SAME_VALUE_(hipStreamCaptureModeGlobal) SAME_VALUE_(hipStreamCaptureModeThreadLocal)
SAME_VALUE_(hipStreamCaptureModeRelaxed) SAME_VALUE_(hipStreamCaptureStatusNone)
SAME_VALUE_(hipStreamCaptureStatusActive) SAME_VALUE_(hipStreamCaptureStatusInvalidated)
SAME_VALUE_(hipStreamWaitValueGte) SAME_VALUE_(hipHostMallocPortable) SAME_VALUE_(hipHostMallocMapped)
SAME_VALUE_(hipStreamNonBlocking)
_Static_assert(__builtin_types_compatible_p(kb_hipError_t, hipError_t), "hipError_t");
_Static_assert(__builtin_types_compatible_p(kb_hipStream_t, hipStream_t), "hipStream_t");
_Static_assert(__builtin_types_compatible_p(kb_hipGraphExec_t, hipGraphExec_t), "hipGraphExec_t");
int main(void) { return 0; }
