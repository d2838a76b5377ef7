/* cupti_trace.c -- CUPTI activity tracing, attributed to iterations by external correlation.
 *
 * Around the launches of iteration i the loop pushes external correlation id i. CUPTI then
 * emits, for every driver call made in that range, an EXTERNAL_CORRELATION record mapping the
 * call's correlation id to i; kernel, memcpy and memset records carry the correlation id of
 * the call that launched them (for a graph launch: of cuGraphLaunch). So attribution is by
 * correlation, never by kernel name, and the L2 flush, issued outside any range, is dropped.
 *
 * Reading a batch. A forced flush (cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED))
 * lengthens the records of the kernels that run after it: an empty kernel read 608 ns instead
 * of 545 on an H200 with a forced flush after every burst, at every position in the burst and
 * whatever the idle time after the flush, while a default flush (flag 0) after the same bursts
 * left it at 545 (docs/design/gpu-timers.md, "Reading a batch without a forced flush"). The default flush returns only buffers whose
 * records are all complete, so the loop ends each batch with a sentinel: kbench's empty kernel
 * launched under its own id. Records go into the buffer in launch order, so when the sentinel's
 * record came back, every iteration's did. Only when it did not (the buffer also holds work
 * still running) is the flush forced. Keep-busy bridges run while the host reads the batch, so
 * their kernel, memcpy and memset records are switched off while they are queued
 * (kb_cupti_device_records); their API records are complete at once.
 * KBENCH_CUPTI_BRIDGE_RECORDS=on leaves them on (a diagnosis: every bridged batch is then read
 * with a forced flush; docs/design/gpu-timers.md).
 *
 * CUPTI's buffer callbacks carry no user pointer, so the one active trace of the process is
 * reachable from a static; a second concurrent trace is refused as CuptiBusy.
 *
 * At the end CUPTI is detached (cuptiFinalize, from the exit callsite of a driver call, as
 * CUPTI documents) when kbench was its only client: disabling the activity kinds and
 * unsubscribing leave CUPTI attached, and every later launch in the process then cost up to
 * 1.7x its host time on the H200 (docs/design/gpu-timers.md, "CUPTI detach and linger"). Not when another tool
 * configured CUPTI (a foreign subscriber, or torch.profiler's timestamp callback): finalizing
 * would tear down its state. KBENCH_CUPTI_DETACH=0 keeps CUPTI attached.
 *
 * Each attach/finalize cycle costs device memory CUPTI never gives back: 0.57 MB per bench on
 * the H200 (benchmarks/gpu_soak.py: +114 MB over 200 benches, flat with CUPTI kept attached),
 * and a sweep or pytest session runs thousands. So a measurement that follows the last one
 * within KB_CUPTI_SWEEP_GAP_S (a sweep, an A/B, a test session) leaves CUPTI attached when it
 * ends, and a background thread detaches it once no measurement came for
 * KBENCH_CUPTI_LINGER_S (default 1 s; 0: detach after every measurement). A lone bench detaches
 * at once as before, so a profile can follow it. The subscriber outlives the traces, so the
 * detach state lives in a static session too (CUPTI itself is process-wide).
 */
#include "cuda_backend.h"
#include "kb_array.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Host activity buffers of 1 MB. CUPTI touches the whole of each buffer it requests, and every
 * batch read returns the current one: with 8 MB buffers a 0.02 s bench of a 4 MB torch.mul took
 * 34 ms in cupti mode and 58-64 ms in graph mode on the H200, 26.7-27.9 and 30.6-31.6 ms with
 * 1 MB (256 KB: 23-25 and 31-34 ms), with the same medians. A batch whose records outgrow one
 * buffer gets another from buffer_requested; 1 MB keeps those mid-batch requests rare. */
#define KB_CUPTI_BUFFER (1u << 20)
#define KB_EXT_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0

typedef struct {
    uint32_t corr;
    uint64_t ext;
} ext_map;

typedef struct {
    uint32_t corr;
    uint32_t name;              /* index into names */
    uint8_t kind;               /* 0 kernel, 1 memcpy, 2 memset */
    uint64_t start, end;
} activity;

typedef struct {
    char *name;
    uint8_t kind;
    uint64_t count, total_ns, min_ns, max_ns;
} name_stat;

struct kb_cupti_trace {
    const kb_cupti_api *api;
    pthread_mutex_t mu;         /* the buffer-completed callback may run on CUPTI's thread */
    CUpti_SubscriberHandle sub;
    int subscribed;
    int kinds_enabled;          /* how many of KINDS[] are enabled */
    ext_map *ext;
    size_t n_ext, cap_ext;
    activity *acts;
    size_t n_acts, cap_acts;
    kb_span *spans;             /* kb_cupti_collect's scratch: the batch's attributed intervals */
    size_t n_spans, cap_spans;
    name_stat *names;
    size_t n_names, cap_names;
    uint64_t dropped;
    int oom;                    /* a record was lost to a failed allocation */
    size_t last_acts, last_ext; /* records seen in the last collected batch (diagnostics) */
    double ticks_per_ns;        /* CUPTI timestamp units per nanosecond (see calibrate) */
    uint64_t flushes_default, flushes_forced;  /* how kb_cupti_collect read each batch */
    int device_records_off;     /* the device kinds are switched off (a bridge is being queued) */
    int follows_another;        /* began within KB_CUPTI_SWEEP_GAP_S of the last trace's end */
};

/* kbench's CUPTI subscription, which may outlive a trace (see the file comment). */
#define KB_CUPTI_SWEEP_GAP_S 1.0
typedef struct {
    pthread_mutex_t mu;             /* guards the fields below, and a detach in progress */
    pthread_cond_t wake;            /* the linger thread's: armed, disarmed or quit */
    pthread_t thread;
    int thread_started, quit;
    int lingering;                  /* subscribed, no trace active, detach armed at deadline */
    double deadline;                /* kb_now_s() */
    double last_end;                /* when the last trace ended (0: none yet) */
    CUpti_SubscriberHandle sub;
    const kb_cupti_api *api;
    const kb_cuda_api *cu;
    int detach_pending;             /* the next driver-API exit callback calls cuptiFinalize
                                     * (atomic: claimed by one callback) */
    volatile int detach_ran;
    CUptiResult detach_rc;
} cupti_session;
static cupti_session g_session = {.mu = PTHREAD_MUTEX_INITIALIZER,
                                  .wake = PTHREAD_COND_INITIALIZER};

/* External correlation records are emitted for API activity records, so the driver and runtime
 * API kinds must be on too (their records are read for nothing else). */
static const CUpti_ActivityKind KINDS[] = {
    CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
};
#define N_KINDS (sizeof KINDS / sizeof KINDS[0])
#define FIRST_DEVICE_KIND 3         /* KINDS[3..]: the records of work on the device */

static pthread_mutex_t g_active_mu = PTHREAD_MUTEX_INITIALIZER;
static kb_cupti_trace *g_active;    /* see the file comment */

/* The activity buffers kbench handed to CUPTI and not yet got back. Beside a foreign
 * subscriber (kbench registers the process's one pair of buffer callbacks over its), CUPTI may
 * return a buffer that tool allocated: its records are read, but it is not kbench's to free
 * (another allocator; the tool may release it again), so it is left alone. */
static pthread_mutex_t g_buffers_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t **g_buffers;
static size_t g_n_buffers, g_cap_buffers;

/* Note p as kbench's. 0, or -1 without memory (the caller frees p and hands CUPTI none). */
static int buffer_own(uint8_t *p)
{
    int rc = 0;
    pthread_mutex_lock(&g_buffers_mu);
    if (g_n_buffers == g_cap_buffers) {
        size_t cap = kb_grown_capacity(g_cap_buffers, g_n_buffers + 1, 16, sizeof *g_buffers);
        uint8_t **grown = kb_resize(g_buffers, cap, sizeof *g_buffers);
        if (grown == NULL)
            rc = -1;
        else {
            g_buffers = grown;
            g_cap_buffers = cap;
        }
    }
    if (rc == 0)
        g_buffers[g_n_buffers++] = p;
    pthread_mutex_unlock(&g_buffers_mu);
    return rc;
}

/* Whether p is kbench's, forgetting it if so. */
static int buffer_release(uint8_t *p)
{
    int ours = 0;
    pthread_mutex_lock(&g_buffers_mu);
    for (size_t i = g_n_buffers; i-- > 0;)
        if (g_buffers[i] == p) {
            g_buffers[i] = g_buffers[--g_n_buffers];
            ours = 1;
            break;
        }
    pthread_mutex_unlock(&g_buffers_mu);
    return ours;
}

/* Room for one more element in t->field (capacity t->cap_field). */
#define TRACE_RESERVE(t, field, count)                                                          \
    trace_reserve((void *)&(t)->field, &(t)->cap_##field, (t)->count + 1, sizeof *(t)->field)
static int trace_reserve(void *pp, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = kb_grown_capacity(*cap, need, 1024, elem);
    void *old, *q;
    memcpy(&old, pp, sizeof old);
    if ((q = kb_resize(old, c, elem)) == NULL)
        return -1;
    memcpy(pp, &q, sizeof q);
    *cap = c;
    return 0;
}

/* Index of `name` in the table, added if new; (uint32_t)-1 on allocation failure. */
static uint32_t intern(kb_cupti_trace *t, const char *name, uint8_t kind)
{
    if (name == NULL)
        name = "<unnamed>";
    for (size_t i = t->n_names; i-- > 0;)
        if (t->names[i].kind == kind && strcmp(t->names[i].name, name) == 0)
            return (uint32_t)i;
    if (TRACE_RESERVE(t, names, n_names) < 0)
        return (uint32_t)-1;
    char *copy = strdup(name);
    if (copy == NULL)
        return (uint32_t)-1;
    name_stat *ns = &t->names[t->n_names];
    memset(ns, 0, sizeof *ns);
    ns->name = copy;
    ns->kind = kind;
    ns->min_ns = UINT64_MAX;
    return (uint32_t)t->n_names++;
}

static void add_activity(kb_cupti_trace *t, uint32_t corr, uint8_t kind, const char *name,
                         uint64_t start, uint64_t end)
{
    uint32_t id = intern(t, name, kind);
    if (id == (uint32_t)-1 ||
        TRACE_RESERVE(t, acts, n_acts) < 0) {
        t->oom = 1;
        return;
    }
    t->acts[t->n_acts++] = (activity){.corr = corr, .name = id, .kind = kind,
                                      .start = start, .end = end};
}

static void parse_buffer(kb_cupti_trace *t, uint8_t *buf, size_t valid)
{
    CUpti_Activity *rec = NULL;
    while (t->api->cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
            CUpti_ActivityExternalCorrelation *e = (CUpti_ActivityExternalCorrelation *)rec;
            if (e->externalKind != KB_EXT_KIND)
                break;
            if (TRACE_RESERVE(t, ext, n_ext) < 0) {
                t->oom = 1;
                break;
            }
            t->ext[t->n_ext++] = (ext_map){.corr = e->correlationId, .ext = e->externalId};
            break;
        }
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)rec;
            add_activity(t, k->correlationId, 0, k->name, k->start, k->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            CUpti_ActivityMemcpy6 *c = (CUpti_ActivityMemcpy6 *)rec;
            static const char *kinds[] = {"[memcpy ?]",    "[memcpy HtoD]", "[memcpy DtoH]",
                                          "[memcpy HtoA]", "[memcpy AtoH]", "[memcpy AtoA]",
                                          "[memcpy AtoD]", "[memcpy DtoA]", "[memcpy DtoD]",
                                          "[memcpy HtoH]", "[memcpy PtoP]"};
            unsigned ck = c->copyKind < sizeof kinds / sizeof kinds[0] ? c->copyKind : 0;
            add_activity(t, c->correlationId, 1, kinds[ck], c->start, c->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            CUpti_ActivityMemset4 *s = (CUpti_ActivityMemset4 *)rec;
            add_activity(t, s->correlationId, 2, "[memset]", s->start, s->end);
            break;
        }
        default:
            break;
        }
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    void *p = NULL;
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    if (posix_memalign(&p, 8, KB_CUPTI_BUFFER) != 0)
        return;
    if (buffer_own(p) < 0) {
        free(p);
        return;
    }
    *buffer = p;
    *size = KB_CUPTI_BUFFER;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    pthread_mutex_lock(&g_active_mu);
    kb_cupti_trace *t = g_active;
    if (t != NULL) {
        pthread_mutex_lock(&t->mu);
        if (valid > 0)
            parse_buffer(t, buffer, valid);
        size_t dropped = 0;
        if (t->api->cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) ==
            CUPTI_SUCCESS)
            t->dropped += dropped;
        pthread_mutex_unlock(&t->mu);
    }
    pthread_mutex_unlock(&g_active_mu);
    if (buffer_release(buffer))
        free(buffer);
}

/* The subscriber's callback. No callback is enabled during a trace; at its end kb_cupti_end
 * enables one driver API and calls it, and this detaches CUPTI at that call's exit. */
static void CUPTIAPI trace_callback(void *userdata, CUpti_CallbackDomain domain,
                                   CUpti_CallbackId cbid, const void *data)
{
    cupti_session *se = userdata;
    const CUpti_CallbackData *cb = data;
    (void)cbid;
    if (se == NULL || !__atomic_load_n(&se->detach_pending, __ATOMIC_ACQUIRE) ||
        domain != CUPTI_CB_DOMAIN_DRIVER_API ||
        cb == NULL || cb->callbackSite != CUPTI_API_EXIT)
        return;
    /* claimed once: the callback is process-wide, so another thread's driver call can exit
     * here at the same moment as the detaching one's */
    if (!__atomic_exchange_n(&se->detach_pending, 0, __ATOMIC_ACQ_REL))
        return;
    se->detach_rc = se->api->cuptiFinalize();
    __atomic_store_n(&se->detach_ran, 1, __ATOMIC_RELEASE);
}

/* Detach the session's subscriber: enable one driver API's callback and call it; its exit
 * callback finalizes CUPTI. No Python (the linger thread calls it); se->mu held. Returns 0 when
 * CUPTI was finalized, else the failing call's name in *why and its code in *code; the
 * subscriber is left subscribed then. */
static int session_detach(cupti_session *se, const char **why, int *code)
{
    se->detach_ran = 0;
    CUptiResult r = se->api->cuptiEnableCallback(1, se->sub, CUPTI_CB_DOMAIN_DRIVER_API,
                                                 CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent);
    if (r == CUPTI_SUCCESS) {
        CUcontext ctx = NULL;
        __atomic_store_n(&se->detach_pending, 1, __ATOMIC_RELEASE);
        se->cu->cuCtxGetCurrent(&ctx);      /* only its exit callback matters, not its answer */
        /* still pending: no callback claimed it (detach_ran stays 0: reported below). Claimed:
         * by this call's callback, done, or by another thread's, which may still be in
         * cuptiFinalize -- wait for it to finish */
        if (!__atomic_exchange_n(&se->detach_pending, 0, __ATOMIC_ACQ_REL))
            while (!__atomic_load_n(&se->detach_ran, __ATOMIC_ACQUIRE))
                sched_yield();
    }
    if (r == CUPTI_SUCCESS && se->detach_ran && se->detach_rc == CUPTI_SUCCESS)
        return 0;
    if (r == CUPTI_SUCCESS)
        se->api->cuptiEnableCallback(0, se->sub, CUPTI_CB_DOMAIN_DRIVER_API,
                                     CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent);
    *why = r != CUPTI_SUCCESS ? "cuptiEnableCallback"
           : se->detach_ran   ? "cuptiFinalize" : "(callback never ran)";
    *code = (int)(r != CUPTI_SUCCESS ? r : se->detach_rc);
    return -1;
}

/* A CUPTI timestamp and the host clock's reading at the same moment: the CUPTI read bracketed
 * by two host reads, the tightest bracket of a few tries, its midpoint. One unbracketed read
 * let a preemption, or CUPTI's lazy set-up on a process's first call, fall between the two
 * clocks and skew a 2 ms ratio past the 0.5% that tells CUPTI's own clock from a tool's (an
 * H200 GPU test read a fresh process's clock as foreign once in six runs). */
static CUptiResult clock_pair(const kb_cupti_api *api, uint64_t *cupti, double *host_ns)
{
    uint64_t tightest = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t c = 0, a = kb_now_ns();
        CUptiResult r = api->cuptiGetTimestamp(&c);
        uint64_t b = kb_now_ns();
        if (r != CUPTI_SUCCESS)
            return r;
        if (b - a < tightest) {
            tightest = b - a;
            *cupti = c;
            *host_ns = (double)a + 0.5 * (double)(b - a);
        }
    }
    return CUPTI_SUCCESS;
}

/* CUPTI's timestamp ticks per host nanosecond over 2 ms (clock-read jitter is ~0.003% of it);
 * 0 where CUPTI could not be read (*rc says why). */
static double clock_ratio(const kb_cupti_api *api, CUptiResult *rc)
{
    uint64_t c0 = 0, c1 = 0;
    double h0 = 0.0, h1 = 0.0;
    if ((*rc = clock_pair(api, &c0, &h0)) != CUPTI_SUCCESS)
        return 0.0;
    while ((double)kb_now_ns() - h0 < 2e6)
        ;
    if ((*rc = clock_pair(api, &c1, &h1)) != CUPTI_SUCCESS)
        return 0.0;
    return c1 > c0 && h1 > h0 ? (double)(c1 - c0) / (h1 - h0) : 1.0;
}

/* Has another tool registered its own CUPTI timestamp callback since (torch.profiler's Kineto
 * does at every profile start)? Then finalizing would tear down its live state: the linger
 * thread leaves CUPTI attached and only unsubscribes. The unit check of calibrate(), without
 * Python; unreadable counts as foreign. */
static int foreign_clock(const cupti_session *se)
{
    CUptiResult rc;
    double r = clock_ratio(se->api, &rc);
    return rc != CUPTI_SUCCESS || !(r > 0.995 && r < 1.005);
}

/* The linger thread: detaches the session once its deadline passes with no trace begun. */
static void *linger_main(void *arg)
{
    cupti_session *se = arg;
    pthread_setname_np(pthread_self(), "kb-cupti");  /* for ps, gdb, py-spy and the tests */
    pthread_mutex_lock(&se->mu);
    while (!se->quit) {
        if (se->lingering && kb_now_s() >= se->deadline) {
            const char *why = NULL;
            int code = 0;
            if (foreign_clock(se) || session_detach(se, &why, &code) < 0)
                se->api->cuptiUnsubscribe(se->sub);   /* at least let another tool subscribe */
            se->lingering = 0;
            continue;
        }
        if (se->lingering) {
            double d = se->deadline;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);       /* the condvar's clock */
            double wait = d - kb_now_s();
            wait = wait > 0 ? wait : 0;
            ts.tv_sec += (time_t)wait;
            ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&se->wake, &se->mu, &ts);
        }
        else
            pthread_cond_wait(&se->wake, &se->mu);
    }
    pthread_mutex_unlock(&se->mu);
    return NULL;
}

/* A forked child has no linger thread (only the forking thread survives a fork): forget it,
 * so the child's module teardown never joins a thread it does not have. */
static void session_atfork_child(void)
{
    pthread_mutex_init(&g_session.mu, NULL);
    pthread_cond_init(&g_session.wake, NULL);
    g_session.thread_started = 0;
    g_session.lingering = 0;
    g_session.quit = 0;
}

static double linger_s(void)
{
    const char *v = getenv("KBENCH_CUPTI_LINGER_S");
    if (v == NULL || *v == '\0')
        return 1.0;
    char *end = NULL;
    double d = strtod(v, &end);
    return end != v && *end == '\0' && d >= 0 && d < 3600 ? d : 1.0;
}

/* g_session.mu from a thread that holds the GIL. The linger thread holds the lock through a
 * 2 ms clock check and cuptiFinalize, so a contended lock is waited for without the GIL; no
 * thread blocks on this lock while it holds the GIL, so taking the GIL back under it is safe. */
static void session_lock_gil(void)
{
    if (pthread_mutex_trylock(&g_session.mu) == 0)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&g_session.mu);
    Py_END_ALLOW_THREADS
}

/* At module teardown, often the interpreter's finalization: the GIL stays held (no other
 * thread is to run Python now), and the linger thread needs none. */
void kb_cupti_session_shutdown(void)
{
    pthread_mutex_lock(&g_session.mu);
    int started = g_session.thread_started;
    g_session.quit = 1;
    pthread_cond_signal(&g_session.wake);
    pthread_mutex_unlock(&g_session.mu);
    if (started)
        pthread_join(g_session.thread, NULL);
    /* a subscriber still lingering at exit stays: finalizing during teardown is not safe. The
     * function tables the session calls through are this module state's, about to be freed:
     * a later module instance in the process (a subinterpreter, a re-import) must not reach
     * them, so the session forgets the subscriber (that instance then meets it as another
     * tool's) */
    pthread_mutex_lock(&g_session.mu);
    g_session.thread_started = 0;
    g_session.quit = 0;
    g_session.lingering = 0;
    g_session.api = NULL;
    g_session.cu = NULL;
    pthread_mutex_unlock(&g_session.mu);
}

static int calibrate(PyObject *m, kb_cupti_trace *t);

static void trace_free(kb_cupti_trace *t)
{
    for (size_t i = 0; i < t->n_names; i++)
        free(t->names[i].name);
    free(t->names);
    free(t->acts);
    free(t->spans);
    free(t->ext);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int kb_cupti_begin(PyObject *m, int allow_foreign_subscriber, kb_cupti_trace **out,
                   int *foreign)
{
    kb_state *st = kb_get_state(m);
    *out = NULL;
    *foreign = 0;
    const char *inject = getenv("CUDA_INJECTION64_PATH");
    if (inject != NULL && *inject) {
        PyErr_Format(st->CuptiBusy,
                     "CUPTI is owned by a profiler injected into this process "
                     "(CUDA_INJECTION64_PATH=%s: Nsight Systems/Compute); use mode='events' "
                     "or run without the profiler", inject);
        return -1;
    }
    const kb_cupti_api *api = kb_cupti(m);
    if (api == NULL)
        return -1;
    uint32_t version = 0;
    if (KB_CUPTI(m, api->cuptiGetVersion(&version)) < 0)
        return -1;
    if (version < CUPTI_API_VERSION) {
        PyErr_Format(st->CuptiError,
                     "the loaded CUPTI has API version %u, older than the %d kbench was built "
                     "with: its activity records would be misread; point KBENCH_CUPTI_PATH at a "
                     "newer libcupti", version, CUPTI_API_VERSION);
        return -1;
    }

    kb_cupti_trace *t = calloc(1, sizeof *t);
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->api = api;
    pthread_mutex_init(&t->mu, NULL);

    pthread_mutex_lock(&g_active_mu);
    int busy = g_active != NULL;
    if (!busy)
        g_active = t;
    pthread_mutex_unlock(&g_active_mu);
    if (busy) {
        trace_free(t);
        PyErr_SetString(st->CuptiBusy, "kbench is already tracing with CUPTI in this process "
                                       "(another thread is measuring)");
        return -1;
    }

    /* Take over a lingering subscriber (disarming its detach), or subscribe. */
    session_lock_gil();
    int reuse = g_session.lingering;
    t->follows_another = reuse ||
                         (g_session.last_end > 0 && kb_now_s() - g_session.last_end <
                                                        KB_CUPTI_SWEEP_GAP_S);
    if (reuse) {
        g_session.lingering = 0;
        t->sub = g_session.sub;
    }
    pthread_mutex_unlock(&g_session.mu);
    /* A process's first subscribe sets CUPTI up (tens of ms): not under the GIL. */
    CUptiResult r = CUPTI_SUCCESS;
    if (!reuse) {
        Py_BEGIN_ALLOW_THREADS
        r = api->cuptiSubscribe(&t->sub, trace_callback, &g_session);
        Py_END_ALLOW_THREADS
    }
    if (r == CUPTI_SUCCESS)
        t->subscribed = 1;
    else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        *foreign = 1;
        if (!allow_foreign_subscriber) {
            PyErr_SetString(st->CuptiBusy,
                            "another CUPTI subscriber is attached to this process "
                            "(torch.profiler/Kineto, Nsight, or another tool); kbench will not "
                            "take CUPTI from it: use mode='events', or finish the profile first");
            goto error;
        }
    }
    else if (kb_cupti_check(m, r, "api->cuptiSubscribe(&t->sub, trace_callback, &g_session)",
                            __FILE__, __LINE__) < 0)
        goto error;

    kb_deferred d = KB_DEFERRED_INIT;
    Py_BEGIN_ALLOW_THREADS
    KB_DEFER(&d, api->cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (size_t i = 0; i < N_KINDS && KB_DEFER(&d, api->cuptiActivityEnable(KINDS[i])) == 0; i++)
        t->kinds_enabled++;
    Py_END_ALLOW_THREADS
    if (KB_CUPTI_RAISE(m, &d) < 0 || calibrate(m, t) < 0)
        goto error;
    *out = t;
    return 0;

error:
    kb_cupti_end(m, t);
    return -1;
}

/* CUPTI timestamps are nanoseconds -- unless a profiler registered its own timestamp callback
 * (cuptiActivityRegisterTimestampCallback): Kineto's counts TSC ticks, and after a torch.profiler
 * session every record of the process is in ticks (2.1 per ns on the H200 host). Measure the
 * unit against the monotonic clock rather than assume it. */
static int calibrate(PyObject *m, kb_cupti_trace *t)
{
    CUptiResult rc;
    double r;
    Py_BEGIN_ALLOW_THREADS          /* a 2 ms spin */
    r = clock_ratio(t->api, &rc);
    Py_END_ALLOW_THREADS
    if (kb_cupti_check(m, rc, "cuptiGetTimestamp(&timestamp)", __FILE__, __LINE__) < 0)
        return -1;
    t->ticks_per_ns = (r > 0.995 && r < 1.005) ? 1.0 : r;
    return 0;
}

double kb_cupti_ticks_per_ns(kb_cupti_trace *t) { return t->ticks_per_ns; }

void kb_cupti_flush_counts(kb_cupti_trace *t, uint64_t *by_default, uint64_t *forced)
{
    *by_default = t->flushes_default;
    *forced = t->flushes_forced;
}

int kb_cupti_device_records(PyObject *m, kb_cupti_trace *t, int on)
{
    if (on == !t->device_records_off)
        return 0;
    for (size_t i = FIRST_DEVICE_KIND; i < N_KINDS; i++) {
        CUptiResult r = on ? t->api->cuptiActivityEnable(KINDS[i])
                           : t->api->cuptiActivityDisable(KINDS[i]);
        if (kb_cupti_check(m, r, on ? "t->api->cuptiActivityEnable(KINDS[i])"
                                    : "t->api->cuptiActivityDisable(KINDS[i])",
                           __FILE__, __LINE__) < 0)
            return -1;
    }
    t->device_records_off = !on;
    return 0;
}

int kb_cupti_push(PyObject *m, kb_cupti_trace *t, uint64_t id)
{
    return KB_CUPTI(m, t->api->cuptiActivityPushExternalCorrelationId(KB_EXT_KIND, id));
}

int kb_cupti_pop(PyObject *m, kb_cupti_trace *t)
{
    uint64_t id = 0;
    return KB_CUPTI(m, t->api->cuptiActivityPopExternalCorrelationId(KB_EXT_KIND, &id));
}

void kb_cupti_pop_quiet(kb_cupti_trace *t)
{
    uint64_t id = 0;
    t->api->cuptiActivityPopExternalCorrelationId(KB_EXT_KIND, &id);
}

static int cmp_ext(const void *a, const void *b)
{
    uint32_t x = ((const ext_map *)a)->corr, y = ((const ext_map *)b)->corr;
    return (x > y) - (x < y);
}

static const ext_map *find_ext(const ext_map *v, size_t n, uint32_t corr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].corr < corr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].corr == corr ? &v[lo] : NULL;
}

/* Has a finished activity record attributed to external id `id` come back? (under t->mu) */
static int id_has_finished_activity(const kb_cupti_trace *t, uint64_t id)
{
    for (size_t i = 0; i < t->n_ext; i++) {
        if (t->ext[i].ext != id)
            continue;
        for (size_t j = 0; j < t->n_acts; j++)
            if (t->acts[j].corr == t->ext[i].corr && t->acts[j].start != 0 &&
                t->acts[j].end >= t->acts[j].start)
                return 1;
    }
    return 0;
}

static int flush(PyObject *m, kb_cupti_trace *t, uint32_t flag)
{
    CUptiResult r;
    Py_BEGIN_ALLOW_THREADS
    r = t->api->cuptiActivityFlushAll(flag);
    Py_END_ALLOW_THREADS
    const char *call = flag ? "t->api->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)"
                            : "t->api->cuptiActivityFlushAll(0)";
    return kb_cupti_check(m, r, call, __FILE__, __LINE__);
}

int kb_cupti_collect(PyObject *m, kb_cupti_trace *t, uint64_t first_id, Py_ssize_t n,
                     kb_iter_activity *acts, const unsigned char *names_of, uint64_t sentinel_id)
{
    /* The default flush first; forced only when the sentinel's record is not back (see the
     * top of this file). */
    int complete = 0;
    if (sentinel_id != 0) {
        if (flush(m, t, 0) < 0)
            return -1;
        pthread_mutex_lock(&t->mu);
        complete = id_has_finished_activity(t, sentinel_id);
        pthread_mutex_unlock(&t->mu);
    }
    if (complete)
        t->flushes_default++;
    else {
        if (flush(m, t, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) < 0)
            return -1;
        t->flushes_forced++;
    }

    memset(acts, 0, (size_t)n * sizeof *acts);
    for (Py_ssize_t i = 0; i < n; i++)
        acts[i].first_start = UINT64_MAX;

    pthread_mutex_lock(&t->mu);
    int oom = t->oom;
    qsort(t->ext, t->n_ext, sizeof(ext_map), cmp_ext);
    t->n_spans = 0;
    if (t->n_acts > 0 && trace_reserve((void *)&t->spans, &t->cap_spans, t->n_acts,
                                       sizeof *t->spans) < 0)
        oom = 1;
    for (size_t i = 0; i < t->n_acts && !oom; i++) {
        const activity *a = &t->acts[i];
        const ext_map *e = find_ext(t->ext, t->n_ext, a->corr);
        if (e == NULL || e->ext < first_id || e->ext >= first_id + (uint64_t)n)
            continue;   /* the flush, or activity outside this batch */
        if (a->start == 0 || a->end < a->start) {
            /* Returned unfinished by the forced flush: its times are not known. Counted with the
             * dropped records, so the result warns and the iteration's kernel count is short. */
            t->dropped++;
            continue;
        }
        kb_iter_activity *it = &acts[e->ext - first_id];
        /* summed in CUPTI's units, converted once below with the busy time, so that records
         * which do not overlap give the two figures bit for bit */
        uint64_t d = a->end - a->start;
        it->sum_ns += d;
        if (t->ticks_per_ns != 1.0)
            d = (uint64_t)((double)d / t->ticks_per_ns + 0.5);
        t->spans[t->n_spans++] = (kb_span){.key = e->ext - first_id, .start = a->start,
                                           .end = a->end};
        if (a->start < it->first_start)
            it->first_start = a->start;
        if (a->end > it->last_end)
            it->last_end = a->end;
        if (a->kind == 0)
            it->kernels++;
        else if (a->kind == 1)
            it->memcpys++;
        else
            it->memsets++;
        if (names_of != NULL && names_of[e->ext - first_id]) {
            name_stat *ns = &t->names[a->name];
            ns->count++;
            ns->total_ns += d;
            if (d < ns->min_ns)
                ns->min_ns = d;
            if (d > ns->max_ns)
                ns->max_ns = d;
        }
    }
    /* Everything queued so far has completed and been read: start the next batch empty. */
    t->last_acts = t->n_acts;
    t->last_ext = t->n_ext;
    t->n_acts = 0;
    t->n_ext = 0;
    t->oom = 0;
    pthread_mutex_unlock(&t->mu);
    if (oom) {
        PyErr_NoMemory();
        return -1;
    }
    /* overlapping activities of one call count once (busy_time.c); in CUPTI's units until here */
    size_t calls = kb_busy_time(t->spans, t->n_spans);
    for (size_t k = 0; k < calls; k++)
        acts[t->spans[k].key].busy_ns = t->spans[k].end;
    if (t->ticks_per_ns != 1.0)
        for (Py_ssize_t i = 0; i < n; i++) {
            acts[i].busy_ns = (uint64_t)((double)acts[i].busy_ns / t->ticks_per_ns + 0.5);
            acts[i].sum_ns = (uint64_t)((double)acts[i].sum_ns / t->ticks_per_ns + 0.5);
        }
    return 0;
}

PyObject *kb_cupti_names(kb_cupti_trace *t)
{
    static const char *kind_names[] = {"kernel", "memcpy", "memset"};
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n_names; i++) {
        const name_stat *ns = &t->names[i];
        if (ns->count == 0)
            continue;
        PyObject *d = Py_BuildValue("{s:s,s:K,s:K,s:K,s:K}", "kind", kind_names[ns->kind],
                                    "count", (unsigned long long)ns->count, "total_ns",
                                    (unsigned long long)ns->total_ns, "min_ns",
                                    (unsigned long long)ns->min_ns, "max_ns",
                                    (unsigned long long)ns->max_ns);
        if (d == NULL || PyDict_SetItemString(out, ns->name, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(d);
    }
    pthread_mutex_unlock(&t->mu);
    return out;
}

void kb_cupti_last_counts(kb_cupti_trace *t, size_t *activities, size_t *external)
{
    pthread_mutex_lock(&t->mu);
    *activities = t->last_acts;
    *external = t->last_ext;
    pthread_mutex_unlock(&t->mu);
}

uint64_t kb_cupti_dropped(kb_cupti_trace *t)
{
    pthread_mutex_lock(&t->mu);
    uint64_t d = t->dropped;
    pthread_mutex_unlock(&t->mu);
    return d;
}

static int detach_wanted(void)
{
    const char *v = getenv("KBENCH_CUPTI_DETACH");
    return v == NULL || !(strcmp(v, "0") == 0 || strcmp(v, "no") == 0 || strcmp(v, "false") == 0);
}

/* Detach CUPTI when kbench is its only client -- now, or after the linger when this trace
 * followed another (see the file comment); the outcome goes to the module state (read back
 * into the result by measure_cuda.c). Never raises: the measurement is already taken. */
static void detach(PyObject *m, kb_cupti_trace *t)
{
    kb_state *st = kb_get_state(m);
    const kb_cupti_api *api = t->api;
    const kb_cuda_api *cu = kb_cuda(m);
    if (cu == NULL)
        PyErr_Clear();
    const char *why = NULL;
    if (!t->subscribed)
        why = "kept attached: another CUPTI subscriber owns it";
    else if (!detach_wanted())
        why = "kept attached: KBENCH_CUPTI_DETACH=0";
    else if (t->ticks_per_ns == 0.0)
        why = "kept attached: the trace failed before CUPTI's clock was checked";
    else if (t->ticks_per_ns != 1.0)
        why = "kept attached: another tool configured CUPTI in this process (torch.profiler?)";
    else if (api->cuptiFinalize == NULL || api->cuptiEnableCallback == NULL || cu == NULL)
        why = "kept attached: this libcupti has no cuptiFinalize";
    if (why != NULL) {
        snprintf(st->cupti_detach, sizeof st->cupti_detach, "%s", why);
        return;
    }
    double linger = linger_s();
    session_lock_gil();
    g_session.sub = t->sub;
    g_session.api = api;
    g_session.cu = cu;
    if (t->follows_another && linger > 0) {
        if (!g_session.thread_started) {
            sigset_t all, old;
            sigfillset(&all);       /* signals (Ctrl-C) stay with Python's threads */
            pthread_sigmask(SIG_SETMASK, &all, &old);
            static int atfork_registered;
            if (!atfork_registered)
                atfork_registered = pthread_atfork(NULL, NULL, session_atfork_child) == 0;
            g_session.thread_started =
                pthread_create(&g_session.thread, NULL, linger_main, &g_session) == 0;
            pthread_sigmask(SIG_SETMASK, &old, NULL);
        }
        if (g_session.thread_started) {
            g_session.lingering = 1;
            g_session.deadline = kb_now_s() + linger;
            t->subscribed = 0;  /* the session owns the subscriber now */
            pthread_cond_signal(&g_session.wake);
            pthread_mutex_unlock(&g_session.mu);
            snprintf(st->cupti_detach, sizeof st->cupti_detach,
                     "lingering: back-to-back measurements share one CUPTI attach; detached "
                     "%g s after the last (KBENCH_CUPTI_LINGER_S)", linger);
            return;
        }
    }
    const char *failed = NULL;
    int code = 0, rc;
    Py_BEGIN_ALLOW_THREADS
    rc = session_detach(&g_session, &failed, &code);
    Py_END_ALLOW_THREADS
    pthread_mutex_unlock(&g_session.mu);
    if (rc == 0) {
        t->subscribed = 0;      /* finalizing released the subscriber with everything else */
        snprintf(st->cupti_detach, sizeof st->cupti_detach, "detached");
        return;
    }
    snprintf(st->cupti_detach, sizeof st->cupti_detach,
             "kept attached: %s returned CUPTI error %d", failed, code);
}

void kb_cupti_end(PyObject *m, kb_cupti_trace *t)
{
    if (t == NULL)
        return;
    /* Keep the exception that brought us here; cleanup errors are not the user's problem. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    const kb_cupti_api *api = t->api;
    CUptiResult disable_failed = CUPTI_SUCCESS;     /* the first refusal, if any */
    size_t still_enabled = 0;
    for (size_t i = t->kinds_enabled; i-- > 0;) {
        CUptiResult r = api->cuptiActivityDisable(KINDS[i]);
        if (r != CUPTI_SUCCESS && disable_failed == CUPTI_SUCCESS) {
            disable_failed = r;
            still_enabled = i;
        }
    }
    if (t->kinds_enabled) {
        Py_BEGIN_ALLOW_THREADS
        api->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        Py_END_ALLOW_THREADS
    }
    detach(m, t);               /* before g_active is cleared: finalizing may return buffers */
    kb_state *st = kb_get_state(m);
    if (disable_failed != CUPTI_SUCCESS && strcmp(st->cupti_detach, "detached") != 0) {
        /* finalizing would have disabled it; kept attached, that kind goes on recording every
         * launch of the process (its overhead in any later timing): say so where the result
         * says how CUPTI was left */
        size_t used = strlen(st->cupti_detach);
        snprintf(st->cupti_detach + used, sizeof st->cupti_detach - used,
                 "; cuptiActivityDisable(kind %d) returned CUPTI error %d: it may still record",
                 (int)KINDS[still_enabled], (int)disable_failed);
    }
    pthread_mutex_lock(&g_active_mu);
    if (g_active == t)
        g_active = NULL;
    pthread_mutex_unlock(&g_active_mu);
    if (t->subscribed)
        api->cuptiUnsubscribe(t->sub);
    session_lock_gil();
    g_session.last_end = kb_now_s();
    pthread_mutex_unlock(&g_session.mu);
    trace_free(t);
    PyErr_Restore(type, value, tb);
}

/* cupti_release() -> bool: detach a lingering subscriber now (before a profiler starts). */
static PyObject *cupti_release(PyObject *m, PyObject *unused)
{
    (void)unused;
    int released = 0;
    const char *failed = NULL;
    int code = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&g_session.mu);
    if (g_session.lingering) {
        if (foreign_clock(&g_session))
            failed = "another tool's timestamp callback (left attached)";
        if (failed != NULL || session_detach(&g_session, &failed, &code) < 0)
            g_session.api->cuptiUnsubscribe(g_session.sub);
        g_session.lingering = 0;
        released = 1;
    }
    pthread_mutex_unlock(&g_session.mu);
    Py_END_ALLOW_THREADS
    kb_state *st = kb_get_state(m);
    if (released && failed)
        snprintf(st->cupti_detach, sizeof st->cupti_detach,
                 "unsubscribed (%s returned CUPTI error %d)", failed, code);
    else if (released)
        snprintf(st->cupti_detach, sizeof st->cupti_detach, "detached");
    return PyBool_FromLong(released);
}

static PyMethodDef cupti_methods[] = {
    {"cupti_release", cupti_release, METH_NOARGS,
     "cupti_release() -> bool\n\nDetach CUPTI now if kbench left it attached between "
     "back-to-back measurements (it detaches by itself KBENCH_CUPTI_LINGER_S after the last "
     "one): call before starting torch.profiler or another CUPTI client right after a sweep. "
     "True when there was something to release."},
    {NULL, NULL, 0, NULL},
};

int kb_cupti_module_init(PyObject *m) { return PyModule_AddFunctions(m, cupti_methods); }
