/* cuda_context.c -- which CUDA context kbench works in.
 *
 * PyTorch, CuPy and the runtime API all use the device's primary context. When one is current
 * on this thread for the device, kbench uses it; otherwise it retains the primary context once
 * (kept for the module's lifetime) and pushes it for the duration of the call. A reading that
 * must not make a context (kb_ctx_enter_maybe with create 0) enters only one that exists already.
 */
#include "cuda_backend.h"

/* Makes the device's context current: one already current on this thread, or the primary one
 * (retained on first use): 1. With create 0 a primary context nobody holds is left alone, 0:
 * retaining it would make it, 0.5 GB of device memory and a process on the GPU that other
 * processes' benches see, for as long as the module lives. -1 with an exception. */
int kb_ctx_enter_maybe(PyObject *m, const kb_cuda_api *cu, int ordinal, int create, int *pushed)
{
    kb_state *st = kb_get_state(m);
    *pushed = 0;
    int count = 0;
    if (KB_CU(m, cu->cuDeviceGetCount(&count)) < 0)
        return -1;
    if (ordinal < 0 || ordinal >= count || ordinal >= (int)(sizeof st->cuda_primary /
                                                            sizeof st->cuda_primary[0])) {
        PyErr_Format(PyExc_ValueError, "CUDA device %d does not exist (%d visible)", ordinal,
                     count);
        return -1;
    }
    CUcontext cur = NULL;
    if (KB_CU(m, cu->cuCtxGetCurrent(&cur)) < 0)
        return -1;
    if (cur != NULL) {
        CUdevice d;
        if (KB_CU(m, cu->cuCtxGetDevice(&d)) < 0)
            return -1;
        if ((int)d == ordinal)
            return 1;
    }
    if (st->cuda_primary[ordinal] == NULL) {
        CUdevice dev;
        CUcontext ctx;
        if (KB_CU(m, cu->cuDeviceGet(&dev, ordinal)) < 0)
            return -1;
        if (!create) {
            unsigned int flags = 0;
            int active = 0;
            if (KB_CU(m, cu->cuDevicePrimaryCtxGetState(dev, &flags, &active)) < 0)
                return -1;
            if (!active)
                return 0;
        }
        if (KB_CU(m, cu->cuDevicePrimaryCtxRetain(&ctx, dev)) < 0)
            return -1;
        st->cuda_primary[ordinal] = ctx;
    }
    if (KB_CU(m, cu->cuCtxPushCurrent((CUcontext)st->cuda_primary[ordinal])) < 0)
        return -1;
    *pushed = 1;
    return 1;
}

int kb_ctx_enter(PyObject *m, const kb_cuda_api *cu, int ordinal, int *pushed)
{
    return kb_ctx_enter_maybe(m, cu, ordinal, 1, pushed) < 0 ? -1 : 0;
}

void kb_ctx_leave(const kb_cuda_api *cu, int pushed)
{
    if (pushed) {
        CUcontext popped;
        cu->cuCtxPopCurrent(&popped);
    }
}
