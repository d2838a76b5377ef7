/* gate.c -- the device-side gate and its watchdog.
 *
 * close: cuStreamWaitValue32(stream, flag >= generation) is queued first, so everything the
 * host queues after it waits on the device. open: the host stores `generation` into the
 * pinned, device-mapped flag and the stream runs the whole batch back to back.
 *
 * The launch queue is finite: on an H200, 2,000 gated launches filled it and the host blocked
 * inside a launch forever, behind its own gate. The loop bounds the batch, and a watchdog
 * thread opens the gate after timeout_s so such a batch ends; the batch is then reported,
 * since launch gaps may have been timed.
 */
#include "cuda_backend.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static void store_flag(kb_gate *g, uint32_t v)
{
    __atomic_store_n(g->host_flag, v, __ATOMIC_SEQ_CST);
}

static void *watchdog_main(void *arg)
{
    kb_gate *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->quit) {
        if (!g->armed) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        double now = kb_now_s();
        if (now >= g->deadline) {
            store_flag(g, g->generation);
            g->armed = 0;
            g->fired = 1;
            g->fired_total++;
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double wait = g->deadline - now;
        ts.tv_sec += (time_t)wait;
        ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int kb_gate_init(PyObject *m, const kb_cuda_api *cu, kb_gate *g, double timeout_s)
{
    void *host = NULL;
    memset(g, 0, sizeof *g);
    g->timeout_s = timeout_s;
    if (KB_CU(m, cu->cuMemHostAlloc(&host, sizeof(uint32_t),
                                    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) < 0)
        return -1;
    g->host_flag = host;
    *g->host_flag = 0;
    if (KB_CU(m, cu->cuMemHostGetDevicePointer(&g->dev_flag, host, 0)) < 0)
        goto error;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    int rc = pthread_create(&g->thread, NULL, watchdog_main, g);
    if (rc != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        PyErr_Format(kb_get_state(m)->KbenchError, "cannot start the gate watchdog thread: %s",
                     strerror(rc));
        goto error;
    }
    g->thread_started = 1;
    return 0;

error:
    cu->cuMemFreeHost(host);
    g->host_flag = NULL;
    return -1;
}

int kb_gate_close(PyObject *m, const kb_cuda_api *cu, kb_gate *g, CUstream s)
{
    uint32_t next = g->generation + 1;
    if (KB_CU(m, cu->cuStreamWaitValue32(s, g->dev_flag, next, CU_STREAM_WAIT_VALUE_GEQ)) < 0)
        return -1;
    pthread_mutex_lock(&g->mu);
    g->generation = next;
    g->fired = 0;
    g->armed = 1;
    g->deadline = kb_now_s() + g->timeout_s;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int kb_gate_open(kb_gate *g)
{
    pthread_mutex_lock(&g->mu);
    store_flag(g, g->generation);
    g->armed = 0;
    int fired = g->fired;
    pthread_mutex_unlock(&g->mu);
    return fired;
}

void kb_gate_fini(const kb_cuda_api *cu, kb_gate *g)
{
    if (g->thread_started) {
        pthread_mutex_lock(&g->mu);
        if (g->host_flag)
            store_flag(g, g->generation);   /* never leave a stream waiting */
        g->quit = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        g->thread_started = 0;
    }
    if (g->host_flag) {
        cu->cuMemFreeHost((void *)g->host_flag);
        g->host_flag = NULL;
    }
}
