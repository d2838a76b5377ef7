/* hip_fake.c -- a CPU stand-in for libamdhip64, for the CPU tests of kbench's HIP backend
 * (tests/test_hip.py): it exports every hip* entry point kbench resolves, with one fake device
 * whose "kernels" are the host: a graph launch busy-waits `KB_FAKE_LAUNCH_NS` (20 us), an event
 * records the host clock, a memset writes host memory. It lets the whole HIP path (loader,
 * capture, gate, loop, flush, rotation, report) run without a GPU; its times say nothing about
 * any GPU. KB_FAKE_NO_WAIT=1 in the environment makes hipStreamWaitValue32 fail (the ungated
 * path); KB_FAKE_FULL_QUEUE=1 makes a launch behind a closed gate wait for the gate to open, as
 * a host blocked in a full launch queue does (only the gate's watchdog can then open it).
 *
 * Build: gcc -shared -fPIC -O2 -o libhip_fake.so hip_fake.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
typedef unsigned int hipError_t;
#define KB_FAKE_LAUNCH_NS 20000ull

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int capturing;
static long launches;

EXPORT hipError_t hipInit(unsigned int f) { return 0; }
EXPORT const char *hipGetErrorName(hipError_t e)
{
    return e == 0 ? "hipSuccess" : e == 1 ? "hipErrorInvalidValue" : "hipErrorUnknown";
}
EXPORT const char *hipGetErrorString(hipError_t e) { return "fake HIP error"; }
EXPORT hipError_t hipRuntimeGetVersion(int *v) { *v = 60000000; return 0; }
EXPORT hipError_t hipDriverGetVersion(int *v) { *v = 60000000; return 0; }
EXPORT hipError_t hipGetDeviceCount(int *n) { *n = 1; return 0; }
static int current;
EXPORT hipError_t hipSetDevice(int d) { if (d != 0) return 101; current = d; return 0; }
EXPORT hipError_t hipGetDevice(int *d) { *d = current; return 0; }
EXPORT hipError_t hipDeviceGetAttribute(int *pi, unsigned int a, int d)
{
    switch (a) {
    case 19: *pi = 4 << 20; return 0;       /* L2: 4 MB */
    case 63: *pi = 8; return 0;
    case 10013: *pi = 1; return 0;
    default: return 1;                      /* hipErrorInvalidValue: unknown here */
    }
}
EXPORT hipError_t hipDeviceGetName(char *n, int len, int d)
{
    strncpy(n, "kbench fake HIP device", (size_t)len);
    return 0;
}
EXPORT hipError_t hipDeviceTotalMem(size_t *b, int d) { *b = 1ull << 30; return 0; }
EXPORT hipError_t hipMemGetInfo(size_t *f, size_t *t) { *f = *t = 1ull << 30; return 0; }
EXPORT hipError_t hipDeviceSynchronize(void) { return 0; }
EXPORT hipError_t hipStreamCreateWithFlags(void **s, unsigned int f) { *s = malloc(1); return 0; }
EXPORT hipError_t hipStreamDestroy(void *s) { free(s); return 0; }
EXPORT hipError_t hipStreamSynchronize(void *s) { return 0; }
EXPORT hipError_t hipStreamBeginCapture(void *s, unsigned int m)
{
    if (capturing)
        return 1;
    capturing = 1;
    return 0;
}
EXPORT hipError_t hipStreamEndCapture(void *s, void **g)
{
    if (!capturing)
        return 1;
    capturing = 0;
    *g = malloc(8);
    return 0;
}
EXPORT hipError_t hipStreamIsCapturing(void *s, unsigned int *st) { *st = capturing; return 0; }
EXPORT hipError_t hipGraphInstantiate(void **e, void *g, void **n, char *log, size_t len)
{
    *e = malloc(8);
    return 0;
}
static volatile uint32_t *wait_ptr;     /* KB_FAKE_FULL_QUEUE: the pending gate */
static uint32_t wait_value;

EXPORT hipError_t hipGraphLaunch(void *e, void *s)
{
    if (wait_ptr != NULL) {
        while (__atomic_load_n(wait_ptr, __ATOMIC_SEQ_CST) < wait_value)
            ;
        wait_ptr = NULL;
    }
    uint64_t end = now_ns() + KB_FAKE_LAUNCH_NS;
    while (now_ns() < end)
        ;
    launches++;
    return 0;
}
EXPORT hipError_t hipGraphExecDestroy(void *e) { free(e); return 0; }
EXPORT hipError_t hipGraphDestroy(void *g) { free(g); return 0; }
EXPORT hipError_t hipEventCreate(void **e) { *e = calloc(1, sizeof(uint64_t)); return 0; }
EXPORT hipError_t hipEventDestroy(void *e) { free(e); return 0; }
EXPORT hipError_t hipEventRecord(void *e, void *s) { *(uint64_t *)e = now_ns(); return 0; }
EXPORT hipError_t hipEventSynchronize(void *e) { return 0; }
EXPORT hipError_t hipEventElapsedTime(float *ms, void *a, void *b)
{
    *ms = (float)((double)(*(uint64_t *)b - *(uint64_t *)a) * 1e-6);
    return 0;
}
EXPORT hipError_t hipMalloc(void **p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
EXPORT hipError_t hipFree(void *p) { free(p); return 0; }
EXPORT hipError_t hipMemsetAsync(void *p, int v, size_t n, void *s) { memset(p, v, n); return 0; }
EXPORT hipError_t hipHostMalloc(void **p, size_t n, unsigned int f)
{
    *p = calloc(1, n);
    return *p ? 0 : 2;
}
EXPORT hipError_t hipHostFree(void *p) { free(p); return 0; }
EXPORT hipError_t hipHostGetDevicePointer(void **d, void *h, unsigned int f) { *d = h; return 0; }
EXPORT hipError_t hipStreamWaitValue32(void *s, void *p, uint32_t v, unsigned int f, uint32_t m)
{
    if (getenv("KB_FAKE_NO_WAIT"))
        return 801;                                 /* hipErrorNotSupported: ungated */
    if (getenv("KB_FAKE_FULL_QUEUE") && v > 0) {
        wait_ptr = p;
        wait_value = v;
    }
    return 0;
}
EXPORT long kb_fake_launches(void) { return launches; }
