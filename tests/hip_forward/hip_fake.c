/* hip_fake.c -- a CPU stand-in for libamdhip64, for the CPU tests of kbench's HIP backend
 * (tests/test_hip.py, tests/test_hip_fixes.py): it exports every hip* entry point kbench
 * resolves, with fake devices whose "kernels" are the host: a graph launch busy-waits
 * `KB_FAKE_LAUNCH_NS` (20 us), an event records the host clock, a memset writes host memory. It
 * lets the whole HIP path (loader, capture, gate, loop, flush, rotation, report) run without a
 * GPU; its times say nothing about any GPU.
 *
 * Knobs, read from the environment at each call:
 *   KB_FAKE_NO_WAIT=1     hipStreamWaitValue32 fails (the ungated path)
 *   KB_FAKE_FULL_QUEUE=1  a launch behind a closed gate waits for the gate to open, as a host
 *                         blocked in a full launch queue does (only the gate's watchdog can then
 *                         open it)
 *   KB_FAKE_BUSES=c1,c3   one device per entry, with that PCI bus (hipDeviceGetPCIBusId gives
 *                         "0000:<bus>:00.0"); default one device on bus c1
 *   KB_FAKE_NO_L2=1       the L2 size attribute is unknown (hipErrorInvalidValue)
 *   KB_FAKE_INIT_ERROR=n  hipInit fails with code n (101: hipErrorInvalidDevice, as on a host
 *                         with ROCm installed and no AMD GPU)
 *   KB_FAIL=<hipCall>[:n[:k]]  that call fails with hipErrorUnknown after n successful calls
 *                         (default 0), k times (default: every call from then on). A failed
 *                         hipStreamEndCapture leaves the stream capturing, as a runtime may.
 * kb_fake_capturing(), kb_fake_current_device() and kb_fake_launches() tell the tests the state.
 *
 * Build: gcc -shared -fPIC -O2 -o libhip_fake.so hip_fake.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
typedef unsigned int hipError_t;
#define KB_FAKE_LAUNCH_NS 20000ull
#define KB_FAKE_MAX_DEVICES 16

/* KB_FAIL: 1 when this call of `name` is to fail. Counted per name (a literal: one address). */
static int kb_fail(const char *name)
{
    static const char *names[64];
    static long seen[64];
    const char *f = getenv("KB_FAIL");
    size_t n;
    int i;
    if (f == NULL || (n = strcspn(f, ":")) != strlen(name) || strncmp(f, name, n) != 0)
        return 0;
    long after = 0, times = -1;
    if (f[n] == ':') {
        char *end;
        after = strtol(f + n + 1, &end, 10);
        if (*end == ':')
            times = strtol(end + 1, NULL, 10);
    }
    for (i = 0; i < 64 && names[i] != NULL && names[i] != name; i++)
        ;
    if (i == 64)
        return 0;
    names[i] = name;
    long k = seen[i]++;
    return k >= after && (times < 0 || k < after + times);
}
#define KB_FAKE_FAIL(name)                                                                     \
    if (kb_fail(#name))                                                                        \
        return 999;

/* KB_FAKE_BUSES: the PCI bus of each device; the count. */
static int buses(unsigned int *bus)
{
    const char *b = getenv("KB_FAKE_BUSES");
    int n = 0;
    if (b == NULL || *b == '\0') {
        bus[0] = 0xc1;
        return 1;
    }
    while (n < KB_FAKE_MAX_DEVICES) {
        char *end;
        bus[n++] = (unsigned int)strtoul(b, &end, 16);
        if (*end != ',')
            break;
        b = end + 1;
    }
    return n;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int capturing;
static long launches;

EXPORT hipError_t hipInit(unsigned int f)
{
    const char *e = getenv("KB_FAKE_INIT_ERROR");
    return e != NULL && *e != '\0' ? (hipError_t)strtoul(e, NULL, 10) : 0;
}
EXPORT const char *hipGetErrorName(hipError_t e)
{
    return e == 0     ? "hipSuccess"
           : e == 1   ? "hipErrorInvalidValue"
           : e == 101 ? "hipErrorInvalidDevice"
           : e == 801 ? "hipErrorNotSupported"
                      : "hipErrorUnknown";
}
EXPORT const char *hipGetErrorString(hipError_t e) { return "fake HIP error"; }
EXPORT hipError_t hipRuntimeGetVersion(int *v) { *v = 60000000; return 0; }
EXPORT hipError_t hipDriverGetVersion(int *v) { *v = 60000000; return 0; }
EXPORT hipError_t hipGetDeviceCount(int *n)
{
    unsigned int bus[KB_FAKE_MAX_DEVICES];
    *n = buses(bus);
    return 0;
}
static int current;
EXPORT hipError_t hipSetDevice(int d)
{
    unsigned int bus[KB_FAKE_MAX_DEVICES];
    if (d < 0 || d >= buses(bus))
        return 101;                         /* hipErrorInvalidDevice */
    current = d;
    return 0;
}
EXPORT hipError_t hipGetDevice(int *d) { *d = current; return 0; }
EXPORT hipError_t hipDeviceGetAttribute(int *pi, unsigned int a, int d)
{
    switch (a) {
    case 19:                                /* L2: 4 MB */
        if (getenv("KB_FAKE_NO_L2"))
            return 1;
        *pi = 4 << 20;
        return 0;
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
EXPORT hipError_t hipDeviceGetPCIBusId(char *id, int len, int d)
{
    unsigned int bus[KB_FAKE_MAX_DEVICES];
    KB_FAKE_FAIL(hipDeviceGetPCIBusId)
    if (d < 0 || d >= buses(bus))
        return 101;
    snprintf(id, (size_t)len, "0000:%02x:00.0", bus[d]);
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
    KB_FAKE_FAIL(hipStreamBeginCapture)
    if (capturing)
        return 1;
    capturing = 1;
    return 0;
}
EXPORT hipError_t hipStreamEndCapture(void *s, void **g)
{
    KB_FAKE_FAIL(hipStreamEndCapture)       /* the stream stays capturing */
    if (!capturing)
        return 1;
    capturing = 0;
    *g = malloc(8);
    return 0;
}
EXPORT hipError_t hipStreamIsCapturing(void *s, unsigned int *st) { *st = capturing; return 0; }
EXPORT hipError_t hipGraphInstantiate(void **e, void *g, void **n, char *log, size_t len)
{
    KB_FAKE_FAIL(hipGraphInstantiate)
    *e = malloc(8);
    return 0;
}
static volatile uint32_t *wait_ptr;     /* KB_FAKE_FULL_QUEUE: the pending gate */
static uint32_t wait_value;

EXPORT hipError_t hipGraphLaunch(void *e, void *s)
{
    KB_FAKE_FAIL(hipGraphLaunch)
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
EXPORT hipError_t hipEventCreate(void **e)
{
    KB_FAKE_FAIL(hipEventCreate)
    *e = calloc(1, sizeof(uint64_t));
    return 0;
}
EXPORT hipError_t hipEventDestroy(void *e) { free(e); return 0; }
EXPORT hipError_t hipEventRecord(void *e, void *s)
{
    KB_FAKE_FAIL(hipEventRecord)
    *(uint64_t *)e = now_ns();
    return 0;
}
EXPORT hipError_t hipEventSynchronize(void *e)
{
    KB_FAKE_FAIL(hipEventSynchronize)
    return 0;
}
EXPORT hipError_t hipEventElapsedTime(float *ms, void *a, void *b)
{
    KB_FAKE_FAIL(hipEventElapsedTime)
    *ms = (float)((double)(*(uint64_t *)b - *(uint64_t *)a) * 1e-6);
    return 0;
}
EXPORT hipError_t hipMalloc(void **p, size_t n)
{
    KB_FAKE_FAIL(hipMalloc)
    *p = malloc(n);
    return *p ? 0 : 2;
}
EXPORT hipError_t hipFree(void *p) { free(p); return 0; }
EXPORT hipError_t hipMemsetAsync(void *p, int v, size_t n, void *s)
{
    KB_FAKE_FAIL(hipMemsetAsync)
    memset(p, v, n);
    return 0;
}
EXPORT hipError_t hipHostMalloc(void **p, size_t n, unsigned int f)
{
    KB_FAKE_FAIL(hipHostMalloc)
    *p = calloc(1, n);
    return *p ? 0 : 2;
}
EXPORT hipError_t hipHostFree(void *p) { free(p); return 0; }
EXPORT hipError_t hipHostGetDevicePointer(void **d, void *h, unsigned int f) { *d = h; return 0; }
EXPORT hipError_t hipStreamWaitValue32(void *s, void *p, uint32_t v, unsigned int f, uint32_t m)
{
    KB_FAKE_FAIL(hipStreamWaitValue32)
    if (getenv("KB_FAKE_NO_WAIT"))
        return 801;                                 /* hipErrorNotSupported: ungated */
    if (getenv("KB_FAKE_FULL_QUEUE") && v > 0) {
        wait_ptr = p;
        wait_value = v;
    }
    return 0;
}
EXPORT long kb_fake_launches(void) { return launches; }
EXPORT int kb_fake_capturing(void) { return capturing; }
EXPORT int kb_fake_current_device(void) { return current; }
