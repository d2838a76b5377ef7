/* cuda_kernels.c -- kernels kbench launches itself.
 *
 * Built-in kernels are PTX text JIT-compiled by the driver, so they need no NVRTC:
 *   kb_empty()          the empty kernel a timing mode's floor is measured with;
 *   kb_busy(ns, sink)   keeps every SM busy for ns nanoseconds (clock ramp-up before measuring).
 * The reference kernels in kernels/cuda/ (copy for the HBM ceiling, FMA for the compute
 * ceiling) are compiled with NVRTC through the CudaKernel type, and run on DeviceBuffer memory,
 * so `kbench peaks` needs neither PyTorch nor CuPy.
 */
#include "cuda_backend.h"
#include "kb_numpy.h"

#include <structmember.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BUSY_CHUNK_S 0.05       /* one busy launch */
#define BUSY_QUEUED_CHUNKS 4    /* launches queued before the host waits (0.2 s) */

static const char BUILTIN_PTX[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry kb_empty()\n"
    "{\n"
    "\tret;\n"
    "}\n"
    "\n"
    ".visible .entry kb_busy(.param .u64 kb_busy_ns, .param .u64 kb_busy_sink)\n"
    "{\n"
    "\t.reg .pred %p<3>;\n"
    "\t.reg .b64 %rd<8>;\n"
    "\t.reg .f32 %f<3>;\n"
    "\tld.param.u64 %rd1, [kb_busy_ns];\n"
    "\tld.param.u64 %rd5, [kb_busy_sink];\n"
    "\tmov.u64 %rd2, %globaltimer;\n"
    "\tadd.u64 %rd3, %rd2, %rd1;\n"
    "\tmov.f32 %f1, 0f3F800000;\n"
    "\tmov.f32 %f2, 0f3F7FFFF0;\n"
    "$L_busy:\n"
    "\tfma.rn.f32 %f1, %f1, %f2, 0f3F800000;\n"
    "\tfma.rn.f32 %f1, %f1, %f2, 0f3F800000;\n"
    "\tfma.rn.f32 %f1, %f1, %f2, 0f3F800000;\n"
    "\tfma.rn.f32 %f1, %f1, %f2, 0f3F800000;\n"
    "\tfma.rn.f32 %f1, %f1, %f2, 0f3F800000;\n"
    "\tfma.rn.f32 %f1, %f1, %f2, 0f3F800000;\n"
    "\tfma.rn.f32 %f1, %f1, %f2, 0f3F800000;\n"
    "\tfma.rn.f32 %f1, %f1, %f2, 0f3F800000;\n"
    "\tmov.u64 %rd4, %globaltimer;\n"
    "\tsetp.lt.u64 %p1, %rd4, %rd3;\n"
    "\t@%p1 bra $L_busy;\n"
    /* never true for the values above, but the JIT cannot know: keeps the FMAs alive */
    "\tsetp.eq.f32 %p2, %f1, 0f00000000;\n"
    "\t@!%p2 bra $L_done;\n"
    "\tcvta.to.global.u64 %rd6, %rd5;\n"
    "\tst.global.f32 [%rd6], %f1;\n"
    "$L_done:\n"
    "\tret;\n"
    "}\n";

int kb_builtin_load(PyObject *m, const kb_cuda_api *cu, kb_builtin_kernels *k)
{
    CUcontext ctx;
    if (KB_CU(m, cu->cuCtxGetCurrent(&ctx)) < 0)
        return -1;
    if (k->module != NULL && k->ctx == ctx)
        return 0;
    kb_builtin_unload(cu, k);
    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS          /* the driver JIT-compiles the PTX */
    KB_DEFER(&d, cu->cuModuleLoadData(&k->module, BUILTIN_PTX));
    Py_END_ALLOW_THREADS
    if (KB_CU_RAISE(m, &d) < 0) {
        k->module = NULL;
        return -1;
    }
    k->ctx = ctx;
    if (KB_CU(m, cu->cuModuleGetFunction(&k->empty, k->module, "kb_empty")) < 0 ||
        KB_CU(m, cu->cuModuleGetFunction(&k->busy, k->module, "kb_busy")) < 0 ||
        KB_CU(m, cu->cuMemAlloc(&k->sink, 4)) < 0) {
        kb_builtin_unload(cu, k);
        return -1;
    }
    return 0;
}

/* GIL held; let go for the free and the unload, which may wait for the device. */
void kb_builtin_unload(const kb_cuda_api *cu, kb_builtin_kernels *k)
{
    Py_BEGIN_ALLOW_THREADS
    if (k->sink)
        cu->cuMemFree(k->sink);
    if (k->module)
        cu->cuModuleUnload(k->module);
    Py_END_ALLOW_THREADS
    memset(k, 0, sizeof *k);
}

int kb_builtin_busy(PyObject *m, const kb_cuda_api *cu, kb_builtin_kernels *k, CUdevice dev,
                    CUstream s, double seconds)
{
    int sms = 0;
    if (KB_CU(m, cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) < 0)
        return -1;
    /* Chunks of at most 50 ms keep every launch far from any watchdog and let the stream
     * interleave; counted as an integer (seconds - 0.05 stops moving past 2^49 s). At most
     * BUSY_QUEUED_CHUNKS are queued ahead: a full launch queue would block cuLaunchKernel
     * with the GIL held, and the wait between groups releases it and sees Ctrl-C. */
    long long chunks = (long long)ceil(seconds / BUSY_CHUNK_S);
    for (long long i = 0; i < chunks; i++) {
        double chunk = i + 1 < chunks ? BUSY_CHUNK_S : seconds - (double)i * BUSY_CHUNK_S;
        unsigned long long ns = (unsigned long long)(chunk * 1e9);
        void *params[] = {&ns, &k->sink};
        if (KB_CU(m, cu->cuLaunchKernel(k->busy, (unsigned)sms * 4, 1, 1, 256, 1, 1, 0, s,
                                        params, NULL)) < 0)
            return -1;
        if ((i + 1) % BUSY_QUEUED_CHUNKS == 0 && i + 1 < chunks) {
            kb_deferred d = KB_DEFERRED_INIT;
            Py_BEGIN_ALLOW_THREADS
            KB_DEFER(&d, cu->cuStreamSynchronize(s));
            Py_END_ALLOW_THREADS
            if (KB_CU_RAISE(m, &d) < 0 || PyErr_CheckSignals() < 0)
                return -1;
        }
    }
    return 0;
}

kb_builtin_kernels *kb_builtin_get(PyObject *m, const kb_cuda_api *cu, int device)
{
    kb_state *st = kb_get_state(m);
    kb_builtin_kernels **cache = (kb_builtin_kernels **)st->cuda_builtins;
    size_t slots = sizeof st->cuda_builtins / sizeof st->cuda_builtins[0];
    if (device < 0 || (size_t)device >= slots) {
        PyErr_Format(PyExc_ValueError, "device %d: kbench keeps kernels for devices 0..%zu",
                     device, slots - 1);
        return NULL;
    }
    if (cache[device] == NULL &&
        (cache[device] = PyMem_RawCalloc(1, sizeof(kb_builtin_kernels))) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    return kb_builtin_load(m, cu, cache[device]) < 0 ? NULL : cache[device];
}

/* ------------------------------------------------------------ Python: launch_empty */

/* launch_empty(stream=0, device=0): one launch of the empty kernel (the timing floor's probe). */
static PyObject *launch_empty(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "device", NULL};
    unsigned long long stream = 0;
    int device = 0, pushed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Ki:launch_empty", kwlist, &stream, &device))
        return NULL;
    const kb_cuda_api *cu = kb_cuda(self);
    if (cu == NULL || kb_ctx_enter(self, cu, device, &pushed) < 0)
        return NULL;
    PyObject *out = NULL;
    kb_builtin_kernels *k = kb_builtin_get(self, cu, device);
    if (k == NULL)
        goto done;
    if (KB_CU(self, cu->cuLaunchKernel(k->empty, 1, 1, 1, 32, 1, 1, 0,
                                       (CUstream)(uintptr_t)stream, NULL, NULL)) < 0)
        goto done;
    out = Py_NewRef(Py_None);
done:
    kb_ctx_leave(cu, pushed);
    return out;
}

/* ------------------------------------------------------------ DeviceBuffer */

typedef struct {
    PyObject_HEAD
    PyObject *module;           /* keeps the module (and its libraries) alive */
    CUdeviceptr ptr;
    size_t nbytes;
    int device;
} DeviceBuffer;

static void devbuf_dealloc(DeviceBuffer *self)
{
    PyObject *et, *ev, *etb;        /* a destructor keeps the exception being raised */
    PyErr_Fetch(&et, &ev, &etb);
    PyTypeObject *tp = Py_TYPE(self);
    if (self->ptr && self->module) {
        kb_state *st = kb_get_state(self->module);
        if (st->gpu != NULL) {
            const kb_cuda_api *cu = kb_cuda(self->module);
            int pushed = 0;
            if (cu != NULL && kb_ctx_enter(self->module, cu, self->device, &pushed) == 0) {
                /* cuMemFree synchronizes the device: without the GIL, as a wait */
                Py_BEGIN_ALLOW_THREADS
                cu->cuMemFree(self->ptr);
                kb_ctx_leave(cu, pushed);
                Py_END_ALLOW_THREADS
            }
            PyErr_Clear();
        }
    }
    Py_XDECREF(self->module);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
    PyErr_Restore(et, ev, etb);
}

/* DeviceBuffer.__new__ does the allocation: the module is reachable from the type. */
static PyObject *devbuf_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"nbytes", "device", NULL};
    Py_ssize_t nbytes;
    int device = 0, pushed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|i:DeviceBuffer", kwlist, &nbytes, &device))
        return NULL;
    if (nbytes <= 0)
        return PyErr_Format(PyExc_ValueError, "DeviceBuffer: nbytes must be positive, got %zd",
                            nbytes);
    PyObject *m = PyType_GetModule(type);
    if (m == NULL)
        return NULL;
    const kb_cuda_api *cu = kb_cuda(m);
    if (cu == NULL || kb_ctx_enter(m, cu, device, &pushed) < 0)
        return NULL;
    CUdeviceptr p = 0;
    CUresult r = cu->cuMemAlloc(&p, (size_t)nbytes);
    kb_ctx_leave(cu, pushed);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return PyErr_Format(PyExc_MemoryError, "DeviceBuffer: out of GPU memory for %zd bytes "
                                               "on device %d", nbytes, device);
    if (kb_cu_check(m, r, "cu->cuMemAlloc(&p, (size_t)nbytes)", __FILE__, __LINE__) < 0)
        return NULL;
    DeviceBuffer *self = (DeviceBuffer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        if (kb_ctx_enter(m, cu, device, &pushed) == 0) {
            cu->cuMemFree(p);
            kb_ctx_leave(cu, pushed);
        }
        return NULL;
    }
    self->module = Py_NewRef(m);
    self->ptr = p;
    self->nbytes = (size_t)nbytes;
    self->device = device;
    return (PyObject *)self;
}

/* memset(byte, stream=0): fill asynchronously on the stream. */
static PyObject *devbuf_memset(DeviceBuffer *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"value", "stream", NULL};
    unsigned char value;
    unsigned long long stream = 0;
    int pushed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "b|K:memset", kwlist, &value, &stream))
        return NULL;
    const kb_cuda_api *cu = kb_cuda(self->module);
    if (cu == NULL || kb_ctx_enter(self->module, cu, self->device, &pushed) < 0)
        return NULL;
    int rc = KB_CU(self->module, cu->cuMemsetD8Async(self->ptr, value, self->nbytes,
                                                     (CUstream)(uintptr_t)stream));
    kb_ctx_leave(cu, pushed);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* copy_from(src, stream=0): the driver's device-to-device copy of src's bytes (the copy
 * engines' path, one of the HBM ceiling's candidates), asynchronously on the stream. */
static PyObject *devbuf_copy_from(DeviceBuffer *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"src", "stream", NULL};
    PyObject *src_obj;
    unsigned long long stream = 0;
    int pushed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|K:copy_from", kwlist, &src_obj, &stream))
        return NULL;
    if (Py_TYPE(src_obj) != Py_TYPE(self))
        return PyErr_Format(PyExc_TypeError, "copy_from: src must be a DeviceBuffer, got %.100s",
                            Py_TYPE(src_obj)->tp_name);
    DeviceBuffer *src = (DeviceBuffer *)src_obj;
    if (src->nbytes != self->nbytes || src->device != self->device)
        return PyErr_Format(PyExc_ValueError, "copy_from: src must have the same size and "
                            "device (%zu bytes on %d), got %zu bytes on %d", self->nbytes,
                            self->device, src->nbytes, src->device);
    const kb_cuda_api *cu = kb_cuda(self->module);
    if (cu == NULL || kb_ctx_enter(self->module, cu, self->device, &pushed) < 0)
        return NULL;
    int rc = KB_CU(self->module, cu->cuMemcpyDtoDAsync(self->ptr, src->ptr, self->nbytes,
                                                       (CUstream)(uintptr_t)stream));
    kb_ctx_leave(cu, pushed);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* to_numpy(dtype='uint8'): synchronous copy to a new host array. */
static PyObject *devbuf_to_numpy(DeviceBuffer *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dtype", NULL};
    PyObject *dtype_obj = Py_None;     /* PyArray_DescrConverter2 reads None, crashes on NULL */
    PyArray_Descr *descr = NULL;
    int pushed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:to_numpy", kwlist, &dtype_obj))
        return NULL;
    if (!PyArray_DescrConverter2(dtype_obj, &descr))
        return NULL;
    if (descr == NULL)
        descr = PyArray_DescrFromType(NPY_UINT8);
    npy_intp itemsize = PyDataType_ELSIZE(descr);
    if (itemsize <= 0 || self->nbytes % (size_t)itemsize != 0) {
        Py_DECREF(descr);
        return PyErr_Format(PyExc_ValueError, "to_numpy: %zu bytes is not a whole number of "
                                              "%zd-byte items", self->nbytes, (Py_ssize_t)itemsize);
    }
    npy_intp dims[1] = {(npy_intp)(self->nbytes / (size_t)itemsize)};
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, descr, 1, dims, NULL, NULL, 0, NULL);
    if (arr == NULL)
        return NULL;
    const kb_cuda_api *cu = kb_cuda(self->module);
    if (cu == NULL || kb_ctx_enter(self->module, cu, self->device, &pushed) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    CUresult r;
    void *dst = PyArray_DATA((PyArrayObject *)arr);
    Py_BEGIN_ALLOW_THREADS
    r = cu->cuMemcpyDtoH(dst, self->ptr, self->nbytes);
    Py_END_ALLOW_THREADS
    kb_ctx_leave(cu, pushed);
    if (kb_cu_check(self->module, r, "cu->cuMemcpyDtoH(dst, self->ptr, self->nbytes)", __FILE__,
                    __LINE__) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

static PyObject *devbuf_get_ptr(DeviceBuffer *self, void *closure)
{
    return PyLong_FromUnsignedLongLong((unsigned long long)self->ptr);
}

static PyObject *devbuf_get_nbytes(DeviceBuffer *self, void *closure)
{
    return PyLong_FromSize_t(self->nbytes);
}

static PyMethodDef devbuf_methods[] = {
    {"memset", (PyCFunction)(void (*)(void))devbuf_memset, METH_VARARGS | METH_KEYWORDS,
     "memset(value, stream=0): fill every byte, asynchronously on the stream."},
    {"copy_from", (PyCFunction)(void (*)(void))devbuf_copy_from, METH_VARARGS | METH_KEYWORDS,
     "copy_from(src, stream=0): copy src's bytes (cuMemcpyDtoDAsync), asynchronously."},
    {"to_numpy", (PyCFunction)(void (*)(void))devbuf_to_numpy, METH_VARARGS | METH_KEYWORDS,
     "to_numpy(dtype='uint8') -> ndarray: synchronous copy to the host."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef devbuf_getset[] = {
    {"ptr", (getter)devbuf_get_ptr, NULL, "device pointer (int)", NULL},
    {"nbytes", (getter)devbuf_get_nbytes, NULL, "size in bytes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot devbuf_slots[] = {
    {Py_tp_new, devbuf_new},
    {Py_tp_dealloc, devbuf_dealloc},
    {Py_tp_methods, devbuf_methods},
    {Py_tp_getset, devbuf_getset},
    {Py_tp_doc, "DeviceBuffer(nbytes, device=0): device memory owned by kbench (cuMemAlloc)."},
    {0, NULL},
};

static PyType_Spec devbuf_spec = {
    .name = "kbench._core.DeviceBuffer",
    .basicsize = sizeof(DeviceBuffer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = devbuf_slots,
};

/* ------------------------------------------------------------ CudaKernel (NVRTC) */

typedef struct {
    PyObject_HEAD
    PyObject *module;
    CUmodule cumod;
    CUfunction fn;
    int device;
    int registers;
    PyObject *name;
    PyObject *log;
} CudaKernel;

static PyObject *nvrtc_log(const kb_nvrtc_api *rt, nvrtcProgram prog)
{
    size_t n = 0;
    if (rt->nvrtcGetProgramLogSize(prog, &n) != 0 || n == 0)
        return PyUnicode_FromString("");
    char *buf = malloc(n);
    if (buf == NULL)
        return PyErr_NoMemory();
    PyObject *s = rt->nvrtcGetProgramLog(prog, buf) == 0
                      ? PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strnlen(buf, n), "replace")
                      : PyUnicode_FromString("");
    free(buf);
    return s;
}

/* nvrtcCompileProgram failed: NvrtcError naming the call, with .call, .code and .name as every
 * NVRTC failure has (kb_nvrtc_check), its message followed by the kernel, the architecture and
 * the compiler's log (kept in the message, not a note: notes need Python 3.11). */
static void compile_error(PyObject *m, nvrtcResult cr, const char *name, const char *arch,
                          PyObject *log)
{
    kb_nvrtc_check(m, cr, "rt->nvrtcCompileProgram(prog, n_opts + 1, opts)", __FILE__, __LINE__);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *head = value != NULL ? PyObject_Str(value) : NULL;
    PyObject *msg = head == NULL ? NULL
                                 : PyUnicode_FromFormat("%U\nNVRTC failed to compile %s (%s):\n%U",
                                                        head, name, arch, log);
    PyObject *args = msg != NULL ? PyTuple_Pack(1, msg) : NULL;
    if (args == NULL || PyObject_SetAttrString(value, "args", args) < 0)
        PyErr_Clear();              /* the exception stands, without the log */
    Py_XDECREF(args);
    Py_XDECREF(msg);
    Py_XDECREF(head);
    PyErr_Restore(type, value, tb);
}

/* CudaKernel(source, name, options=(), device=0): compile with NVRTC for the device's
 * architecture and load it into the device's primary context. */
static PyObject *kernel_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"source", "name", "options", "device", NULL};
    const char *source, *name;
    PyObject *options = NULL, *m, *log = NULL, *result = NULL;
    int device = 0, pushed = 0, n_opts = 0;
    const char **opts = NULL;
    char arch[64];
    char *cubin = NULL;
    nvrtcProgram prog = NULL;
    const kb_cuda_api *cu = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|Oi:CudaKernel", kwlist, &source, &name,
                                     &options, &device))
        return NULL;
    if ((m = PyType_GetModule(type)) == NULL)
        return NULL;
    if ((cu = kb_cuda(m)) == NULL)
        return NULL;
    const kb_nvrtc_api *rt = kb_nvrtc(m);
    if (rt == NULL)
        return NULL;
    if (kb_ctx_enter(m, cu, device, &pushed) < 0)
        return NULL;

    CUdevice dev;
    int major = 0, minor = 0;
    if (KB_CU(m, cu->cuDeviceGet(&dev, device)) < 0 ||
        KB_CU(m, cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                          dev)) < 0 ||
        KB_CU(m, cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                          dev)) < 0)
        goto done;
    PyOS_snprintf(arch, sizeof arch, "-arch=sm_%d%d", major, minor);

    PyObject *seq = options ? PySequence_Fast(options, "options must be a sequence of str")
                            : PyTuple_New(0);
    if (seq == NULL)
        goto done;
    n_opts = (int)PySequence_Fast_GET_SIZE(seq);
    opts = calloc((size_t)n_opts + 1, sizeof *opts);
    if (opts == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < n_opts; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        opts[i] = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
        if (opts[i] == NULL) {
            Py_DECREF(seq);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "options must be a sequence of str");
            goto done;
        }
    }
    opts[n_opts] = arch;

    if (KB_NVRTC(m, rt->nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL)) < 0) {
        Py_DECREF(seq);
        goto done;
    }
    nvrtcResult cr;
    Py_BEGIN_ALLOW_THREADS
    cr = rt->nvrtcCompileProgram(prog, n_opts + 1, opts);
    Py_END_ALLOW_THREADS
    Py_DECREF(seq);   /* the option strings were borrowed from it */
    log = nvrtc_log(rt, prog);
    if (log == NULL)
        goto done;
    if (cr != 0) {
        compile_error(m, cr, name, arch, log);
        goto done;
    }
    size_t size = 0;
    if (KB_NVRTC(m, rt->nvrtcGetCUBINSize(prog, &size)) < 0)
        goto done;
    if ((cubin = malloc(size)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (KB_NVRTC(m, rt->nvrtcGetCUBIN(prog, cubin)) < 0)
        goto done;

    CudaKernel *self = (CudaKernel *)type->tp_alloc(type, 0);
    if (self == NULL)
        goto done;
    self->module = Py_NewRef(m);
    self->device = device;
    self->log = Py_NewRef(log);
    self->name = PyUnicode_FromString(name);
    kb_deferred d = KB_DEFERRED_INIT;
    if (self->name != NULL) {
        Py_BEGIN_ALLOW_THREADS
        KB_DEFER(&d, cu->cuModuleLoadData(&self->cumod, cubin));
        Py_END_ALLOW_THREADS
    }
    if (self->name == NULL || KB_CU_RAISE(m, &d) < 0) {
        self->cumod = NULL;
        Py_DECREF(self);
        goto done;
    }
    if (KB_CU(m, cu->cuModuleGetFunction(&self->fn, self->cumod, name)) < 0 ||
        KB_CU(m, cu->cuFuncGetAttribute(&self->registers, CU_FUNC_ATTRIBUTE_NUM_REGS,
                                        self->fn)) < 0) {
        Py_DECREF(self);
        goto done;
    }
    result = (PyObject *)self;

done:
    if (prog != NULL)
        rt->nvrtcDestroyProgram(&prog);
    free(cubin);
    free(opts);
    Py_XDECREF(log);
    kb_ctx_leave(cu, pushed);
    return result;
}

static void kernel_dealloc(CudaKernel *self)
{
    PyObject *et, *ev, *etb;        /* a destructor keeps the exception being raised */
    PyErr_Fetch(&et, &ev, &etb);
    PyTypeObject *tp = Py_TYPE(self);
    if (self->cumod && self->module) {
        const kb_cuda_api *cu = kb_cuda(self->module);
        int pushed = 0;
        if (cu != NULL && kb_ctx_enter(self->module, cu, self->device, &pushed) == 0) {
            Py_BEGIN_ALLOW_THREADS  /* an unload may wait for the module's kernels */
            cu->cuModuleUnload(self->cumod);
            Py_END_ALLOW_THREADS
            kb_ctx_leave(cu, pushed);
        }
        PyErr_Clear();
    }
    Py_XDECREF(self->name);
    Py_XDECREF(self->log);
    Py_XDECREF(self->module);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
    PyErr_Restore(et, ev, etb);
}

/* One kernel parameter, packed by its signature letter. */
typedef union {
    unsigned long long u64;
    long long i64;
    int i32;
    unsigned int u32;
    float f32;
    double f64;
} param_slot;

static int pack_param(char code, PyObject *v, param_slot *slot, Py_ssize_t i)
{
    switch (code) {
    case 'P':   /* device pointer: int, DeviceBuffer (.ptr) or anything with data_ptr() */
    case 'Q':
        if (!PyLong_Check(v)) {
            PyObject *p = PyObject_GetAttrString(v, "ptr");
            if (p == NULL) {
                PyErr_Clear();
                p = PyObject_CallMethod(v, "data_ptr", NULL);
            }
            if (p == NULL) {
                PyErr_Format(PyExc_TypeError, "argument %zd: expected a device pointer (int, "
                                              "DeviceBuffer or tensor), got %.100s", i,
                             Py_TYPE(v)->tp_name);
                return -1;
            }
            slot->u64 = PyLong_AsUnsignedLongLong(p);
            Py_DECREF(p);
        }
        else
            slot->u64 = PyLong_AsUnsignedLongLong(v);
        break;
    case 'n':
    case 'q':
        slot->i64 = PyLong_AsLongLong(v);
        break;
    case 'i': {
        long x = PyLong_AsLong(v);
        if (!PyErr_Occurred() && (x < INT32_MIN || x > INT32_MAX))
            PyErr_Format(PyExc_OverflowError, "%ld does not fit an int32", x);
        slot->i32 = (int32_t)x;
        break;
    }
    case 'I': {
        unsigned long x = PyLong_AsUnsignedLong(v);
        if (!PyErr_Occurred() && x > UINT32_MAX)
            PyErr_Format(PyExc_OverflowError, "%lu does not fit a uint32", x);
        slot->u32 = (uint32_t)x;
        break;
    }
    case 'f':
        slot->f32 = (float)PyFloat_AsDouble(v);
        break;
    case 'd':
        slot->f64 = PyFloat_AsDouble(v);
        break;
    default:
        PyErr_Format(PyExc_ValueError, "signature letter %c is not one of P (pointer), n/q "
                                       "(int64), i (int32), I (uint32), f (float32), d (float64)",
                     code);
        return -1;
    }
    if (PyErr_Occurred()) {
        kb_add_exception_note("while packing kernel argument %zd (signature %c)", i, code);
        return -1;
    }
    return 0;
}

static int parse_dim3(PyObject *o, unsigned int d[3], const char *what)
{
    d[0] = d[1] = d[2] = 1;
    if (PyLong_Check(o)) {
        long v = PyLong_AsLong(o);
        if (v <= 0 || v > (long)UINT32_MAX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s must be 1..%lu, got %ld", what,
                             (unsigned long)UINT32_MAX, v);
            return -1;
        }
        d[0] = (unsigned)v;
        return 0;
    }
    PyObject *seq = PySequence_Fast(o, "grid/block must be an int or a tuple of up to 3 ints");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > 3) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s must have 1 to 3 dimensions", what);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v <= 0 || v > (long)UINT32_MAX) {
            Py_DECREF(seq);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s must be 1..%lu in each dimension, got %ld",
                             what, (unsigned long)UINT32_MAX, v);
            return -1;
        }
        d[i] = (unsigned)v;
    }
    Py_DECREF(seq);
    return 0;
}

/* launch(grid, block, signature, args, stream=0, shared=0) */
static PyObject *kernel_launch(CudaKernel *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"grid", "block", "signature", "args", "stream", "shared", NULL};
    PyObject *grid_o, *block_o, *argv;
    const char *sig;
    unsigned long long stream = 0;
    PyObject *shared_o = NULL;
    unsigned int shared = 0, grid[3], block[3];
    int pushed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOsO|KO:launch", kwlist, &grid_o, &block_o, &sig,
                                     &argv, &stream, &shared_o))
        return NULL;
    if (shared_o != NULL) {
        /* read here: "I" wraps 2**32 to 0 without a word, "k" any int */
        unsigned long v = PyLong_Check(shared_o) ? PyLong_AsUnsignedLong(shared_o) : 0;
        if (!PyLong_Check(shared_o) || PyErr_Occurred() || v > UINT32_MAX) {
            PyErr_Clear();
            return PyErr_Format(PyExc_ValueError, "shared must be an int of 0..%lu bytes, "
                                "got %R", (unsigned long)UINT32_MAX, shared_o);
        }
        shared = (unsigned int)v;
    }
    if (parse_dim3(grid_o, grid, "grid") < 0 || parse_dim3(block_o, block, "block") < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(argv, "args must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if ((size_t)n != strlen(sig)) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "signature %s has %zu letters but %zd arguments "
                                              "were given", sig, strlen(sig), n);
    }
    param_slot slots[32];
    void *params[32];
    if (n > 32) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "at most 32 kernel arguments, got %zd", n);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (pack_param(sig[i], PySequence_Fast_GET_ITEM(seq, i), &slots[i], i) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        params[i] = &slots[i];
    }
    Py_DECREF(seq);
    const kb_cuda_api *cu = kb_cuda(self->module);
    if (cu == NULL || kb_ctx_enter(self->module, cu, self->device, &pushed) < 0)
        return NULL;
    int rc = KB_CU(self->module,
                   cu->cuLaunchKernel(self->fn, grid[0], grid[1], grid[2], block[0], block[1],
                                      block[2], shared, (CUstream)(uintptr_t)stream,
                                      n ? params : NULL, NULL));
    kb_ctx_leave(cu, pushed);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef kernel_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))kernel_launch, METH_VARARGS | METH_KEYWORDS,
     "launch(grid, block, signature, args, stream=0, shared=0): cuLaunchKernel. signature "
     "letters: P pointer, n int64, i int32, I uint32, f float32, d float64."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef kernel_members[] = {
    {"name", T_OBJECT, offsetof(CudaKernel, name), READONLY, "kernel name"},
    {"log", T_OBJECT, offsetof(CudaKernel, log), READONLY, "NVRTC compile log"},
    {"registers", T_INT, offsetof(CudaKernel, registers), READONLY, "registers per thread"},
    {"device", T_INT, offsetof(CudaKernel, device), READONLY, "CUDA device ordinal"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot kernel_slots[] = {
    {Py_tp_new, kernel_new},
    {Py_tp_dealloc, kernel_dealloc},
    {Py_tp_methods, kernel_methods},
    {Py_tp_members, kernel_members},
    {Py_tp_doc, "CudaKernel(source, name, options=(), device=0): an NVRTC-compiled kernel."},
    {0, NULL},
};

static PyType_Spec kernel_spec = {
    .name = "kbench._core.CudaKernel",
    .basicsize = sizeof(CudaKernel),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = kernel_slots,
};

static PyMethodDef kernels_methods[] = {
    {"launch_empty", (PyCFunction)(void (*)(void))launch_empty, METH_VARARGS | METH_KEYWORDS,
     "launch_empty(stream=0, device=0): launch kbench's empty kernel once."},
    {NULL, NULL, 0, NULL},
};

int kb_cuda_kernels_module_init(PyObject *m)
{
    PyObject *t = PyType_FromModuleAndSpec(m, &devbuf_spec, NULL);
    if (t == NULL || PyModule_AddObjectRef(m, "DeviceBuffer", t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    t = PyType_FromModuleAndSpec(m, &kernel_spec, NULL);
    if (t == NULL || PyModule_AddObjectRef(m, "CudaKernel", t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    return PyModule_AddFunctions(m, kernels_methods);
}
