/* cupti_config_probe.c -- which CUPTI setting lengthens an empty kernel's activity record?
 *
 * What it isolates
 *   kbench times kernels from CUPTI CONCURRENT_KERNEL activity records (end - start). On an H200
 *   (sm_90, CUDA 13.0, driver 580) an empty kernel reads ~64 ns longer under kbench's CUPTI
 *   session (median ~0.61-0.64 us, 32 ns steps at 576/608/640) than under torch.profiler/Kineto
 *   (median ~0.54-0.58 us) on the same stream layout. This program sets CUPTI up one way per
 *   process (CUPTI state is process-global), launches the same empty kernel many times, and
 *   reports the distribution of end - start, so that the configs can be compared one setting
 *   at a time:
 *     conc            CONCURRENT_KERNEL only
 *     conc_mem        + MEMCPY + MEMSET
 *     conc_api        CONCURRENT_KERNEL + DRIVER + RUNTIME
 *     kbench          DRIVER, RUNTIME, EXTERNAL_CORRELATION, CONCURRENT_KERNEL, MEMCPY, MEMSET,
 *                     external correlation CUSTOM2 pushed/popped around every empty launch, and
 *                     a subscriber (cuptiSubscribe) with no callback enabled
 *     kbench_nopush   kbench without the push/pop
 *     kbench_nosub    kbench without cuptiSubscribe
 *     kineto          the kinds in Kineto's order (+ SYNCHRONIZATION), DEVICE_BUFFER_SIZE = 8 MiB,
 *                     external correlation CUSTOM0 pushed/popped around every launch
 *     kbench_flush    kbench + cuptiActivityFlushAll(FORCED) after every burst
 *     kbench_latency  kbench + cuptiActivityEnableLatencyTimestamps(1) (called before cuInit, as
 *                     the header requires); also reports submitted -> start
 *     kbench_flush0   kbench + cuptiActivityFlushAll(0) (the default flush) after every burst
 *     kbench_flush_idle  kbench_flush, then 5 ms of host sleep before the next burst
 *   Launch patterns:
 *     gated_events    (default) bursts of 200 behind a 2 ms %globaltimer spin kernel, each empty
 *                     between two cuEventRecord calls: kbench's per-iteration layout behind its gate
 *     gated_bare      the same bursts without the events
 *     host            every launch followed by cuStreamSynchronize (the GPU idles before each)
 *
 * How to run
 *   bash benchmarks/cupti_config_probe.sh [out.jsonl]      (builds, runs every config)
 *   or by hand:  /tmp/cupti_config_probe <config> [n_launches=4000] [pattern=gated_events]
 *                [burst=200] [preroll=0]
 *   burst: launches per burst behind one spin (kbench's sub-batches of a sub-us kernel are a few
 *   iterations); preroll: launches of a second empty kernel, `pre` (not counted), between the
 *   spin and the burst.
 *   One JSON line goes to stdout; diagnostics go to stderr. Exit 2 on a failed CUDA/CUPTI call,
 *   1 on bad arguments.
 *
 * Output fields: n (empty-kernel records counted), dropped (cuptiActivityGetNumDroppedRecords),
 * incomplete (records with start == 0 or end < start), median/mean/p10/p90 of end - start in ns,
 * hist (every distinct end - start with >= 1% of the records), gap_median_ns (median of
 * start[i+1] - end[i] between consecutive empties less than 50 us apart: back-to-back spacing
 * inside a burst), events_median_ns (gated_events: median cuEventElapsedTime(evA, evB)),
 * submit_to_start_median_ns (kbench_latency only), pos_median_ns (the median by position in its
 * burst: first, second, 3rd-10th, later), when every launch came back.
 */
#define _POSIX_C_SOURCE 200809L

#include <cuda.h>
#include <cupti.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BURST 200
#define SPIN_NS 2000000ull
#define CUPTI_BUF_SIZE ((size_t)8 << 20)

/* ---- error checking ------------------------------------------------------------------ */

#define CU_CHECK(call)                                                                      \
    do {                                                                                    \
        CUresult cu_r_ = (call);                                                            \
        if (cu_r_ != CUDA_SUCCESS) {                                                        \
            const char *cu_n_ = NULL;                                                       \
            if (cuGetErrorName(cu_r_, &cu_n_) != CUDA_SUCCESS || cu_n_ == NULL)             \
                cu_n_ = "unknown CUresult";                                                 \
            fprintf(stderr, "cupti_config_probe: %s failed: %s (%d) [%s:%d]\n", #call,      \
                    cu_n_, (int)cu_r_, __FILE__, __LINE__);                                 \
            exit(2);                                                                        \
        }                                                                                   \
    } while (0)

#define CUPTI_CHECK(call)                                                                   \
    do {                                                                                    \
        CUptiResult cp_r_ = (call);                                                         \
        if (cp_r_ != CUPTI_SUCCESS) {                                                       \
            const char *cp_s_ = NULL;                                                       \
            if (cuptiGetResultString(cp_r_, &cp_s_) != CUPTI_SUCCESS || cp_s_ == NULL)      \
                cp_s_ = "unknown CUptiResult";                                              \
            fprintf(stderr, "cupti_config_probe: %s failed: %s (%d) [%s:%d]\n", #call,      \
                    cp_s_, (int)cp_r_, __FILE__, __LINE__);                                 \
            exit(2);                                                                        \
        }                                                                                   \
    } while (0)

/* ---- the kernels ----------------------------------------------------------------------- */

static const char PTX[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry empty()\n"
    "{\n"
    "    ret;\n"
    "}\n"
    "\n"
    ".visible .entry pre()\n"
    "{\n"
    "    ret;\n"
    "}\n"
    "\n"
    "// Busy-wait until ns nanoseconds of %globaltimer have passed.\n"
    ".visible .entry spin(.param .u64 ns)\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b64 %rd<5>;\n"
    "    ld.param.u64 %rd1, [ns];\n"
    "    mov.u64 %rd2, %globaltimer;\n"
    "SPIN_LOOP:\n"
    "    mov.u64 %rd3, %globaltimer;\n"
    "    sub.u64 %rd4, %rd3, %rd2;\n"
    "    setp.lt.u64 %p1, %rd4, %rd1;\n"
    "    @%p1 bra SPIN_LOOP;\n"
    "    ret;\n"
    "}\n";

/* ---- configs ---------------------------------------------------------------------------- */

static const CUpti_ActivityKind KINDS_CONC[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
static const CUpti_ActivityKind KINDS_CONC_MEM[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
static const CUpti_ActivityKind KINDS_CONC_API[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_RUNTIME};
static const CUpti_ActivityKind KINDS_KBENCH[] = {
    CUPTI_ACTIVITY_KIND_DRIVER,            CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,            CUPTI_ACTIVITY_KIND_MEMSET};
static const CUpti_ActivityKind KINDS_KINETO[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};

#define NKINDS(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
    const char *name;
    const CUpti_ActivityKind *kinds;
    size_t n_kinds;
    int push;                           /* push/pop an external correlation id per launch */
    CUpti_ExternalCorrelationKind ext_kind;
    int subscribe;                      /* cuptiSubscribe with a do-nothing callback */
    int flush_each_burst;               /* after every burst: 1 cuptiActivityFlushAll(FORCED),
                                         * 2 cuptiActivityFlushAll(0), 3 FORCED then 5 ms idle */
    int latency;                        /* cuptiActivityEnableLatencyTimestamps(1) */
    size_t device_buffer_size;          /* CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE; 0: leave */
} probe_config;

#define K_KB KINDS_KBENCH, NKINDS(KINDS_KBENCH)
#define EXT_KB CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2
static const probe_config CONFIGS[] = {
    {"conc", KINDS_CONC, NKINDS(KINDS_CONC), 0, EXT_KB, 0, 0, 0, 0},
    {"conc_mem", KINDS_CONC_MEM, NKINDS(KINDS_CONC_MEM), 0, EXT_KB, 0, 0, 0, 0},
    {"conc_api", KINDS_CONC_API, NKINDS(KINDS_CONC_API), 0, EXT_KB, 0, 0, 0, 0},
    {"kbench", K_KB, 1, EXT_KB, 1, 0, 0, 0},
    {"kbench_nopush", K_KB, 0, EXT_KB, 1, 0, 0, 0},
    {"kbench_nosub", K_KB, 1, EXT_KB, 0, 0, 0, 0},
    {"kineto", KINDS_KINETO, NKINDS(KINDS_KINETO), 1, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
     0, 0, 0, CUPTI_BUF_SIZE},
    {"kbench_flush", K_KB, 1, EXT_KB, 1, 1, 0, 0},
    {"kbench_latency", K_KB, 1, EXT_KB, 1, 0, 1, 0},
    {"kbench_flush0", K_KB, 1, EXT_KB, 1, 2, 0, 0},
    {"kbench_flush_idle", K_KB, 1, EXT_KB, 1, 3, 0, 0},
};
#define N_CONFIGS NKINDS(CONFIGS)

enum { PAT_GATED_EVENTS, PAT_GATED_BARE, PAT_HOST };
static const char *const PATTERNS[] = {"gated_events", "gated_bare", "host"};

/* ---- activity buffers ---------------------------------------------------------------------- */

/* Only start/end/name (and queued/submitted for kbench_latency) are read: those fields sit at
 * the same offsets in every CUpti_ActivityKernelN; 10 is the current one in CUDA 13.0. */
typedef CUpti_ActivityKernel10 kernel_record;

typedef struct {
    uint64_t start, end, submitted;
} kernel_times;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static kernel_times *g_recs;
static size_t g_n, g_cap;
static size_t g_dropped, g_incomplete, g_other_kernels, g_buffers;
static int g_oom;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    void *p = NULL;
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    if (posix_memalign(&p, 8, CUPTI_BUF_SIZE) == 0) {
        *buffer = p;
        *size = CUPTI_BUF_SIZE;
    }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    (void)size;
    pthread_mutex_lock(&g_mu);
    g_buffers++;
    CUpti_Activity *rec = NULL;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            continue;
        const kernel_record *k = (const kernel_record *)rec;
        if (k->name == NULL || strcmp(k->name, "empty") != 0) {
            g_other_kernels++;
            continue;
        }
        if (k->start == 0 || k->end < k->start) {
            g_incomplete++;
            continue;
        }
        if (g_n == g_cap) {
            size_t cap = g_cap ? 2 * g_cap : 8192;
            kernel_times *p = realloc(g_recs, cap * sizeof *p);
            if (p == NULL) {
                g_oom = 1;
                continue;
            }
            g_recs = p;
            g_cap = cap;
        }
        g_recs[g_n].start = k->start;
        g_recs[g_n].end = k->end;
        g_recs[g_n].submitted = k->submitted;
        g_n++;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
        g_dropped += dropped;
    pthread_mutex_unlock(&g_mu);
    free(buffer);
}

static void CUPTIAPI callback_that_does_nothing(void *userdata, CUpti_CallbackDomain domain,
                                                CUpti_CallbackId cbid, const void *data)
{
    (void)userdata;
    (void)domain;
    (void)cbid;
    (void)data;
}

/* ---- statistics -------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_start(const void *a, const void *b)
{
    uint64_t x = ((const kernel_times *)a)->start, y = ((const kernel_times *)b)->start;
    return (x > y) - (x < y);
}

/* sorted input */
static double median_u64(const uint64_t *v, size_t n)
{
    if (n == 0)
        return 0.0;
    return n % 2 ? (double)v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

static double median_double(const double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* nearest rank on sorted input */
static uint64_t pct_u64(const uint64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* ---- main -------------------------------------------------------------------------------- */

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s <config> [n_launches=4000] [pattern=gated_events] [burst=200] "
                    "[preroll=0]\n  configs:",
            argv0);
    for (size_t i = 0; i < N_CONFIGS; i++)
        fprintf(stderr, " %s", CONFIGS[i].name);
    fprintf(stderr, "\n  patterns: gated_events gated_bare host\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 6) {
        usage(argv[0]);
        return 1;
    }
    const probe_config *cfg = NULL;
    for (size_t i = 0; i < N_CONFIGS; i++)
        if (strcmp(argv[1], CONFIGS[i].name) == 0)
            cfg = &CONFIGS[i];
    if (cfg == NULL) {
        fprintf(stderr, "cupti_config_probe: unknown config '%s'\n", argv[1]);
        usage(argv[0]);
        return 1;
    }
    long n_launches = 4000;
    if (argc >= 3) {
        char *endp = NULL;
        n_launches = strtol(argv[2], &endp, 10);
        if (endp == argv[2] || *endp != '\0' || n_launches < 1 || n_launches > 10000000) {
            fprintf(stderr, "cupti_config_probe: bad n_launches '%s'\n", argv[2]);
            return 1;
        }
    }
    int pattern = PAT_GATED_EVENTS;
    if (argc >= 4) {
        pattern = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(argv[3], PATTERNS[i]) == 0)
                pattern = i;
        if (pattern < 0) {
            fprintf(stderr, "cupti_config_probe: unknown pattern '%s'\n", argv[3]);
            usage(argv[0]);
            return 1;
        }
    }

    long burst = MAX_BURST, preroll = 0;
    for (int a = 4; a < argc && a < 6; a++) {
        char *endp = NULL;
        long v = strtol(argv[a], &endp, 10);
        if (endp == argv[a] || *endp != '\0' || v < (a == 4 ? 1 : 0) || v > MAX_BURST) {
            fprintf(stderr, "cupti_config_probe: bad %s '%s' (0..%d)\n",
                    a == 4 ? "burst" : "preroll", argv[a], MAX_BURST);
            return 1;
        }
        *(a == 4 ? &burst : &preroll) = v;
    }

    /* Latency timestamps must be switched on before CUDA is initialised (cupti_activity.h). */
    if (cfg->latency)
        CUPTI_CHECK(cuptiActivityEnableLatencyTimestamps(1));

    /* 1. CUDA: primary context, non-blocking stream, the module; each kernel run once. */
    CUresult init_r = cuInit(0);
    if (init_r != CUDA_SUCCESS) {
        const char *name = NULL;
        if (cuGetErrorName(init_r, &name) != CUDA_SUCCESS || name == NULL)
            name = "unknown CUresult";
        fprintf(stderr, "cupti_config_probe: cuInit(0) failed: %s (%d): no usable GPU/driver "
                        "here\n", name, (int)init_r);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUmodule mod;
    CUfunction f_empty, f_spin, f_pre;
    CU_CHECK(cuDeviceGet(&dev, 0));
    CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_CHECK(cuCtxSetCurrent(ctx));
    CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU_CHECK(cuModuleLoadData(&mod, PTX));
    CU_CHECK(cuModuleGetFunction(&f_empty, mod, "empty"));
    CU_CHECK(cuModuleGetFunction(&f_spin, mod, "spin"));
    CU_CHECK(cuModuleGetFunction(&f_pre, mod, "pre"));

    uint64_t spin_ns = 1000;   /* first run: short, just to load the kernel */
    void *spin_args[] = {&spin_ns};
    CU_CHECK(cuLaunchKernel(f_empty, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
    CU_CHECK(cuLaunchKernel(f_spin, 1, 1, 1, 1, 1, 1, 0, stream, spin_args, NULL));
    CU_CHECK(cuLaunchKernel(f_pre, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
    CU_CHECK(cuStreamSynchronize(stream));
    spin_ns = SPIN_NS;

    CUevent ev[2 * MAX_BURST];
    for (int i = 0; i < 2 * MAX_BURST; i++)
        CU_CHECK(cuEventCreate(&ev[i], CU_EVENT_DEFAULT));
    double *ev_ms = NULL;
    size_t n_ev = 0;
    if (pattern == PAT_GATED_EVENTS) {
        ev_ms = malloc((size_t)n_launches * sizeof *ev_ms);
        if (ev_ms == NULL) {
            fprintf(stderr, "cupti_config_probe: out of memory\n");
            return 2;
        }
    }

    /* 2. CUPTI, configured per cfg. */
    uint32_t cupti_version = 0;
    CUPTI_CHECK(cuptiGetVersion(&cupti_version));
    CUpti_SubscriberHandle sub = NULL;
    if (cfg->subscribe)
        CUPTI_CHECK(cuptiSubscribe(&sub, callback_that_does_nothing, NULL));
    if (cfg->device_buffer_size) {
        size_t v = cfg->device_buffer_size, vsz = sizeof v;
        CUPTI_CHECK(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &vsz, &v));
    }
    CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (size_t i = 0; i < cfg->n_kinds; i++)
        CUPTI_CHECK(cuptiActivityEnable(cfg->kinds[i]));

    /* 3. Launches: one untimed warm-up burst, then n_launches. */
    uint64_t next_id = 1;
    for (int phase = 0; phase < 2; phase++) {
        long total = phase == 0 ? MAX_BURST : n_launches;
        for (long done = 0; done < total;) {
            int b = total - done < burst ? (int)(total - done) : (int)burst;
            if (pattern != PAT_HOST)
                CU_CHECK(cuLaunchKernel(f_spin, 1, 1, 1, 1, 1, 1, 0, stream, spin_args, NULL));
            for (long i = 0; i < preroll; i++)
                CU_CHECK(cuLaunchKernel(f_pre, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
            for (int i = 0; i < b; i++) {
                if (pattern == PAT_GATED_EVENTS)
                    CU_CHECK(cuEventRecord(ev[2 * i], stream));
                if (cfg->push)
                    CUPTI_CHECK(cuptiActivityPushExternalCorrelationId(cfg->ext_kind, next_id));
                CU_CHECK(cuLaunchKernel(f_empty, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
                if (cfg->push) {
                    uint64_t last = 0;
                    CUPTI_CHECK(cuptiActivityPopExternalCorrelationId(cfg->ext_kind, &last));
                }
                next_id++;
                if (pattern == PAT_GATED_EVENTS)
                    CU_CHECK(cuEventRecord(ev[2 * i + 1], stream));
                if (pattern == PAT_HOST)
                    CU_CHECK(cuStreamSynchronize(stream));
            }
            CU_CHECK(cuStreamSynchronize(stream));
            if (pattern == PAT_GATED_EVENTS && phase == 1)
                for (int i = 0; i < b; i++) {
                    float ms = 0.0f;
                    CU_CHECK(cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
                    ev_ms[n_ev++] = ms;
                }
            if (cfg->flush_each_burst)
                CUPTI_CHECK(cuptiActivityFlushAll(
                    cfg->flush_each_burst == 2 ? 0 : CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
            if (cfg->flush_each_burst == 3) {
                struct timespec idle = {0, 5000000L};
                nanosleep(&idle, NULL);
            }
            done += b;
        }
        if (phase == 0) {   /* discard the warm-up's records */
            CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
            pthread_mutex_lock(&g_mu);
            g_n = 0;
            g_incomplete = 0;
            g_other_kernels = 0;
            pthread_mutex_unlock(&g_mu);
        }
    }

    /* 4. Collect and report. */
    CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    size_t global_dropped = 0;
    CUPTI_CHECK(cuptiActivityGetNumDroppedRecords(NULL, 0, &global_dropped));

    pthread_mutex_lock(&g_mu);
    size_t n = g_n;
    uint64_t *dur = malloc((n ? n : 1) * sizeof *dur);
    uint64_t *gap = malloc((n ? n : 1) * sizeof *gap);
    uint64_t *lat = malloc((n ? n : 1) * sizeof *lat);
    if (dur == NULL || gap == NULL || lat == NULL) {
        pthread_mutex_unlock(&g_mu);
        fprintf(stderr, "cupti_config_probe: out of memory\n");
        return 2;
    }
    qsort(g_recs, n, sizeof *g_recs, cmp_start);
    size_t n_gap = 0, n_lat = 0;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        dur[i] = g_recs[i].end - g_recs[i].start;
        sum += (double)dur[i];
        if (i + 1 < n && g_recs[i + 1].start >= g_recs[i].end &&
            g_recs[i + 1].start - g_recs[i].end < 50000)
            gap[n_gap++] = g_recs[i + 1].start - g_recs[i].end;
        if (cfg->latency && g_recs[i].submitted != 0 && g_recs[i].start >= g_recs[i].submitted)
            lat[n_lat++] = g_recs[i].start - g_recs[i].submitted;
    }
    /* Median by position in the burst, while dur[] is still in launch order (sorted by start;
     * bursts are whole because every launch came back). */
    double pos_med[4] = {-1, -1, -1, -1};
    if (n == (size_t)n_launches && pattern != PAT_HOST) {
        uint64_t *bucket = malloc((n ? n : 1) * sizeof *bucket);
        static const long lo[4] = {0, 1, 2, 10}, hi[4] = {1, 2, 10, MAX_BURST};
        for (int q = 0; bucket != NULL && q < 4; q++) {
            size_t k = 0;
            for (size_t i = 0; i < n; i++) {
                long pos = (long)(i % (size_t)burst);
                if (pos >= lo[q] && pos < hi[q])
                    bucket[k++] = dur[i];
            }
            if (k) {
                qsort(bucket, k, sizeof *bucket, cmp_u64);
                pos_med[q] = median_u64(bucket, k);
            }
        }
        free(bucket);
    }
    size_t dropped = g_dropped + global_dropped, incomplete = g_incomplete;
    size_t other = g_other_kernels, buffers = g_buffers;
    int oom = g_oom;
    pthread_mutex_unlock(&g_mu);

    qsort(dur, n, sizeof *dur, cmp_u64);
    qsort(gap, n_gap, sizeof *gap, cmp_u64);
    qsort(lat, n_lat, sizeof *lat, cmp_u64);

    printf("{\"config\": \"%s\", \"pattern\": \"%s\", \"burst\": %ld, \"preroll\": %ld, "
           "\"launches\": %ld, \"n\": %zu, "
           "\"dropped\": %zu, \"incomplete\": %zu, \"other_kernels\": %zu, \"buffers\": %zu, "
           "\"median_ns\": %.1f, \"mean_ns\": %.1f, \"p10_ns\": %llu, \"p90_ns\": %llu, "
           "\"hist\": {",
           cfg->name, PATTERNS[pattern], burst, preroll, n_launches, n, dropped, incomplete, other, buffers,
           median_u64(dur, n), n ? sum / (double)n : 0.0,
           (unsigned long long)pct_u64(dur, n, 0.10), (unsigned long long)pct_u64(dur, n, 0.90));
    int first = 1;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && dur[j] == dur[i])
            j++;
        if ((j - i) * 100 >= n) {
            printf("%s\"%llu\": %zu", first ? "" : ", ", (unsigned long long)dur[i], j - i);
            first = 0;
        }
        i = j;
    }
    printf("}, \"gap_median_ns\": %.1f", median_u64(gap, n_gap));
    if (pattern == PAT_GATED_EVENTS) {
        qsort(ev_ms, n_ev, sizeof *ev_ms, cmp_double);
        printf(", \"events_median_ns\": %.1f", median_double(ev_ms, n_ev) * 1e6);
    }
    if (cfg->latency)
        printf(", \"submit_to_start_median_ns\": %.1f, \"n_latency\": %zu", median_u64(lat, n_lat),
               n_lat);
    printf(", \"pos_median_ns\": {\"1st\": %.1f, \"2nd\": %.1f, \"3rd-10th\": %.1f, "
           "\"later\": %.1f}", pos_med[0], pos_med[1], pos_med[2], pos_med[3]);
    printf(", \"cupti_version\": %u%s}\n", cupti_version, oom ? ", \"oom\": true" : "");
    fflush(stdout);
    if (n == 0)
        fprintf(stderr, "cupti_config_probe: warning: no activity record of 'empty' came back\n");

    /* 5. Clean up. */
    for (size_t i = cfg->n_kinds; i-- > 0;)
        CUPTI_CHECK(cuptiActivityDisable(cfg->kinds[i]));
    if (cfg->subscribe)
        CUPTI_CHECK(cuptiUnsubscribe(sub));
    for (int i = 0; i < 2 * MAX_BURST; i++)
        CU_CHECK(cuEventDestroy(ev[i]));
    CU_CHECK(cuModuleUnload(mod));
    CU_CHECK(cuStreamDestroy(stream));
    CU_CHECK(cuDevicePrimaryCtxRelease(dev));
    free(dur);
    free(gap);
    free(lat);
    free(ev_ms);
    pthread_mutex_lock(&g_mu);   /* a late buffer (CUPTI's thread) would append to g_recs */
    free(g_recs);
    g_recs = NULL;
    g_n = g_cap = 0;
    pthread_mutex_unlock(&g_mu);
    return 0;
}
