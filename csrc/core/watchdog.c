/* watchdog.c -- the gate's watchdog thread (kb_watchdog.h). No Python, no GPU library. */
#define _GNU_SOURCE     /* pthread_setname_np */
#include "kb_watchdog.h"
#include "kbench.h"

#include <signal.h>
#include <string.h>
#include <time.h>

static void store_flag(kb_watchdog *w, uint32_t v)
{
    __atomic_store_n(w->flag, v, __ATOMIC_SEQ_CST);
}

static void deadline_timespec(double wait_s, struct timespec *ts)
{
    /* (time_t)1e20 overflows: the deadline lands in the past and the thread spins */
    if (!(wait_s < KB_GATE_TIMEOUT_MAX_S))
        wait_s = KB_GATE_TIMEOUT_MAX_S;
    if (!(wait_s > 0.0))
        wait_s = 0.0;
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)wait_s;
    ts->tv_nsec += (long)((wait_s - (double)(time_t)wait_s) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *watchdog_main(void *arg)
{
    kb_watchdog *w = arg;
    pthread_setname_np(pthread_self(), "kb-watchdog");  /* for ps, gdb, py-spy and the tests */
    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        if (!w->armed) {
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        double now = kb_now_s();
        if (now >= w->deadline) {
            store_flag(w, w->generation);
            w->armed = 0;
            w->fired = 1;
            w->fired_total++;
            continue;
        }
        struct timespec ts;
        deadline_timespec(w->deadline - now, &ts);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int kb_watchdog_start(kb_watchdog *w, volatile uint32_t *flag, double timeout_s)
{
    memset(w, 0, sizeof *w);
    w->flag = flag;
    w->timeout_s = timeout_s;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* The thread starts with every signal blocked, as the NVML sampler's and CUPTI's do, so
     * Ctrl-C goes to a thread that runs Python, not to this one asleep in a timed wait. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, watchdog_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        return rc;
    }
    w->started = 1;
    return 0;
}

void kb_watchdog_arm(kb_watchdog *w, uint32_t generation)
{
    pthread_mutex_lock(&w->mu);
    w->generation = generation;
    w->fired = 0;
    w->armed = 1;
    w->deadline = kb_now_s() + w->timeout_s;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int kb_watchdog_open(kb_watchdog *w)
{
    pthread_mutex_lock(&w->mu);
    store_flag(w, w->generation);
    w->armed = 0;
    int fired = w->fired;
    pthread_mutex_unlock(&w->mu);
    return fired;
}

void kb_watchdog_stop(kb_watchdog *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->mu);
    store_flag(w, w->generation);       /* never leave a stream waiting */
    w->quit = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->started = 0;
}
