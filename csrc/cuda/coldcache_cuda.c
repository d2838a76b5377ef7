/* coldcache_cuda.c -- cold L2 on the GPU: the flush buffer and the persisting-L2 reset.
 *
 * The flush writes a buffer of at least twice the device's L2 before each sample, on the
 * measured stream but outside the timed region (between the events; outside the CUPTI
 * correlation range). The write is a kernel's (kb_fill), as a preceding kernel's output
 * would be and as the field's tools flush (Triton's do_bench and FlashInfer: a zero_() kernel):
 * after a driver memset the same Triton add read 0.6-1.7% slower on the H200 (NOTES).
 * Lines in the persisting-L2 carve-out survive such a write, so the carve-out is reset and its
 * size reported before measuring.
 */
#include "cuda_backend.h"

int kb_l2_flusher_init(PyObject *m, const kb_cuda_api *cu, int ordinal, kb_l2_flusher *f,
                       size_t bytes)
{
    memset(f, 0, sizeof *f);
    CUdevice dev;
    const kb_builtin_kernels *k = kb_builtin_get(m, cu, ordinal);
    if (k == NULL || KB_CU(m, cu->cuDeviceGet(&dev, ordinal)) < 0)
        return -1;
    if (bytes == 0) {
        int l2 = 0;
        if (KB_CU(m, cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev)) < 0)
            return -1;
        bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    }
    bytes = (bytes + 15) & ~(size_t)15;     /* kb_fill stores 16 bytes at a time */
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
    if (KB_CU(m, r) < 0) {
        f->buf = 0;
        return -1;
    }
    f->bytes = bytes;
    f->kernels = k;
    return 0;
}

int kb_l2_flush(PyObject *m, const kb_cuda_api *cu, kb_l2_flusher *f, CUstream s)
{
    f->value = f->value * 1664525u + 1013904223u;   /* a new pattern each time */
    return kb_builtin_fill(m, cu, f->kernels, s, f->buf, f->bytes, f->value);
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
    if (KB_CU(m, r) < 0)
        return -1;
    return KB_CU(m, cu->cuCtxResetPersistingL2Cache());
}
