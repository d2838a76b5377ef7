/* coldcache_cuda.c -- cold L2 on the GPU: the flush buffer and the persisting-L2 reset.
 *
 * The flush writes a buffer of at least twice the device's L2 before each sample, on the
 * measured stream but outside the timed region (between the events; outside the CUPTI
 * correlation range). Lines in the persisting-L2 carve-out survive such a write, so the
 * carve-out is reset and its size reported before measuring.
 */
#include "cuda_backend.h"

int kb_l2_flusher_init(PyObject *m, const kb_cuda_api *cu, CUdevice dev, kb_l2_flusher *f,
                       size_t bytes)
{
    memset(f, 0, sizeof *f);
    if (bytes == 0) {
        int l2 = 0;
        if (KB_CU(m, cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev)) < 0)
            return -1;
        bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    }
    bytes = (bytes + 3) & ~(size_t)3;
    CUresult r = cu->cuMemAlloc(&f->buf, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        size_t free_b = 0, total_b = 0;
        cu->cuMemGetInfo(&free_b, &total_b);
        PyErr_Format(PyExc_MemoryError,
                     "out of GPU memory for the %zu-byte L2 flush buffer (%zu of %zu bytes free); "
                     "free memory, pass flush_bytes=, or use cold_cache='rotate' or None",
                     bytes, free_b, total_b);
        f->buf = 0;
        return -1;
    }
    if (kb_cu_check(m, r, "cu->cuMemAlloc(&f->buf, bytes)", __FILE__, __LINE__) < 0) {
        f->buf = 0;
        return -1;
    }
    f->bytes = bytes;
    return 0;
}

int kb_l2_flush(PyObject *m, const kb_cuda_api *cu, kb_l2_flusher *f, CUstream s)
{
    f->value = f->value * 1664525u + 1013904223u;   /* a new pattern each time */
    return KB_CU(m, cu->cuMemsetD32Async(f->buf, f->value, f->bytes / 4, s));
}

void kb_l2_flusher_fini(const kb_cuda_api *cu, kb_l2_flusher *f)
{
    if (f->buf)
        cu->cuMemFree(f->buf);
    f->buf = 0;
    f->bytes = 0;
}

int kb_l2_persisting_reset(PyObject *m, const kb_cuda_api *cu, size_t *limit)
{
    *limit = 0;
    CUresult r = cu->cuCtxGetLimit(limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE);
    if (r == CUDA_ERROR_UNSUPPORTED_LIMIT || r == CUDA_ERROR_NOT_SUPPORTED)
        return 0;   /* no carve-out on this device */
    if (kb_cu_check(m, r, "cu->cuCtxGetLimit(limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE)",
                    __FILE__, __LINE__) < 0)
        return -1;
    return KB_CU(m, cu->cuCtxResetPersistingL2Cache());
}
