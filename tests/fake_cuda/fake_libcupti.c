/* fake_libcupti.c -- a stand-in libcupti.so beside the fake libcuda (tests/test_cuda_failure_paths.py
 * loads it through KBENCH_CUPTI_PATH), so that measure_cuda's CUPTI timer and its error paths run
 * without a GPU. It sees no real launch: every external-correlation push/pop pair becomes one
 * kernel of 1000 ns (an EXTERNAL_CORRELATION record and a CONCURRENT_KERNEL record under a fresh
 * correlation id), handed to kbench's buffer callbacks at the next cuptiActivityFlushAll.
 * Timestamps are CLOCK_MONOTONIC nanoseconds (kbench's clock: the unit check reads 1.0).
 * cuptiFinalize is not exported: kbench then keeps CUPTI attached and unsubscribes.
 *
 * FAKE_CUPTI_FAIL="name:N[:code]" makes the Nth call of `name` fail (N < 0: every call from the
 * -Nth on; code defaults to CUPTI_ERROR_UNKNOWN), as FAKE_FAIL does for the fake driver.
 * fake_cupti_subscribers(), fake_cupti_kinds_enabled() and fake_cupti_pushed() report what a
 * failure path left behind: a subscription, enabled activity kinds, an unpopped correlation id.
 * fake_cupti_waits_with_gil() counts the calls that can block (a first subscribe sets CUPTI up,
 * a flush waits for records, the clock check spins on timestamps) made holding the GIL.
 *
 * Build: gcc -shared -fPIC -I<cuda>/include -o libcupti.so fake_libcupti.c
 */
#include <cupti.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static CUptiResult fail_check(const char *name)
{
    static int counts[64];
    static const char *names[64];
    int i;
    for (i = 0; i < 64 && names[i]; i++)
        if (strcmp(names[i], name) == 0)
            break;
    if (i == 64)
        return CUPTI_SUCCESS;
    if (!names[i])
        names[i] = name;
    int n = ++counts[i];
    const char *f = getenv("FAKE_CUPTI_FAIL");
    size_t L = strlen(name);
    if (f && strncmp(f, name, L) == 0 && f[L] == ':') {
        char *end;
        long want = strtol(f + L + 1, &end, 10);
        int code = *end == ':' ? atoi(end + 1) : CUPTI_ERROR_UNKNOWN;
        if (n == want || (want < 0 && n >= -want))
            return (CUptiResult)code;
    }
    return CUPTI_SUCCESS;
}
#define F(name)                                                                                \
    do {                                                                                       \
        CUptiResult r_ = fail_check(name);                                                     \
        if (r_ != CUPTI_SUCCESS)                                                               \
            return r_;                                                                         \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int subscribers, kinds[64], pushed;
static uint64_t stack[64];
static uint32_t next_corr = 1;
static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;

static int waits_with_gil;
int fake_cupti_waits_with_gil(void) { return waits_with_gil; }
static void wait_check(void)
{
    static int (*held)(void);
    static int looked;
    if (!looked) {
        held = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check");
        looked = 1;
    }
    if (held && held())
        waits_with_gil++;
}

int fake_cupti_subscribers(void) { return subscribers; }
int fake_cupti_pushed(void) { return pushed; }
int fake_cupti_kinds_enabled(void)
{
    int n = 0;
    for (int i = 0; i < 64; i++)
        n += kinds[i] > 0;
    return n;
}

/* The records not yet flushed: each 8-byte aligned, after an 8-byte length. */
static uint8_t *pending;
static size_t n_pending, cap_pending;

static void add_record(const void *rec, size_t len)
{
    size_t need = n_pending + 8 + ((len + 7) & ~(size_t)7);
    if (need > cap_pending) {
        size_t cap = cap_pending ? 2 * cap_pending : 4096;
        while (cap < need)
            cap *= 2;
        pending = realloc(pending, cap);
        cap_pending = cap;
    }
    uint64_t l = len;
    memcpy(pending + n_pending, &l, 8);
    memcpy(pending + n_pending + 8, rec, len);
    n_pending = need;
}

static void add_kernel(uint64_t ext)
{
    uint32_t corr = next_corr++;
    if (kinds[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION] > 0) {
        CUpti_ActivityExternalCorrelation e;
        memset(&e, 0, sizeof e);
        e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        e.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
        e.externalId = ext;
        e.correlationId = corr;
        add_record(&e, sizeof e);
    }
    if (kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] > 0) {
        CUpti_ActivityKernel10 k;
        memset(&k, 0, sizeof k);
        k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k.correlationId = corr;
        k.start = now_ns();
        k.end = k.start + 1000;
        k.name = "fake_kernel";
        add_record(&k, sizeof k);
    }
}

CUptiResult cuptiGetVersion(uint32_t *v) { *v = CUPTI_API_VERSION; return CUPTI_SUCCESS; }
CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
    *s = r == CUPTI_ERROR_UNKNOWN ? "CUPTI_ERROR_UNKNOWN" : "CUPTI_ERROR_FAKE";
    return CUPTI_SUCCESS;
}
CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *ud)
{
    wait_check();
    F("cuptiSubscribe");
    if (subscribers)
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    subscribers++;
    *s = (CUpti_SubscriberHandle)&subscribers;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle s)
{
    if (subscribers)
        subscribers--;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityEnable(CUpti_ActivityKind k)
{
    F("cuptiActivityEnable");
    kinds[k & 63] = 1;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityDisable(CUpti_ActivityKind k)
{
    F("cuptiActivityDisable");
    kinds[k & 63] = 0;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                           CUpti_BuffersCallbackCompleteFunc done)
{
    F("cuptiActivityRegisterCallbacks");
    requested = req;
    completed = done;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    wait_check();
    F("cuptiActivityFlushAll");
    size_t off = 0;
    while (off < n_pending && requested && completed) {
        uint8_t *buf = NULL;
        size_t size = 0, max_records = 0, used = 0;
        requested(&buf, &size, &max_records);
        if (buf == NULL)
            return CUPTI_ERROR_OUT_OF_MEMORY;
        while (off < n_pending) {
            uint64_t l;
            memcpy(&l, pending + off, 8);
            size_t rec = 8 + ((l + 7) & ~(size_t)7);
            if (used + rec > size)
                break;
            memcpy(buf + used, pending + off, rec);
            used += rec;
            off += rec;
        }
        completed(NULL, 0, buf, size, used);
    }
    n_pending = 0;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, CUpti_Activity **rec)
{
    uint8_t *at = *rec == NULL ? buf : (uint8_t *)*rec - 8;
    if (*rec != NULL) {
        uint64_t l;
        memcpy(&l, at, 8);
        at += 8 + ((l + 7) & ~(size_t)7);
    }
    if ((size_t)(at - buf) >= valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *rec = (CUpti_Activity *)(at + 8);
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext c, uint32_t s, size_t *n)
{
    *n = 0;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind k, uint64_t id)
{
    F("cuptiActivityPushExternalCorrelationId");
    stack[pushed++ & 63] = id;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind k, uint64_t *id)
{
    F("cuptiActivityPopExternalCorrelationId");
    if (pushed == 0)
        return CUPTI_ERROR_QUEUE_EMPTY;
    *id = stack[--pushed & 63];
    add_kernel(*id);
    return CUPTI_SUCCESS;
}
CUptiResult cuptiGetTimestamp(uint64_t *t)
{
    wait_check();
    F("cuptiGetTimestamp");
    *t = now_ns();
    return CUPTI_SUCCESS;
}
