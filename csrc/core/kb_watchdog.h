/* kb_watchdog.h -- the runtime-independent half of a device gate: a pinned host flag that a
 * stream waits on, and a thread that opens it after a timeout.
 *
 * A gated stream waits on the device until the host stores `generation` into the flag. The launch
 * queue is finite, so a host that queues too much behind its own closed gate blocks inside a
 * launch forever; the watchdog stores the generation after timeout_s so the batch ends, and says
 * it fired (the batch's launch gaps may then have been timed). The runtime half (allocating the
 * mapped flag, queueing the wait) lives with each backend: csrc/cuda/gate.c and
 * csrc/hip/hip_gate.c.
 */
#ifndef KBENCH_WATCHDOG_H
#define KBENCH_WATCHDOG_H

#include "kb_schema.h"
#include <pthread.h>
#include <stdint.h>

typedef struct {
    volatile uint32_t *flag;    /* host view of the pinned, device-visible flag */
    uint32_t generation;        /* the value that opens the current batch */
    double timeout_s;
    double deadline;            /* kb_now_s() time at which the watchdog opens the gate */
    int armed, fired, quit, started;
    long fired_total;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} kb_watchdog;

/* Start the thread for `flag` (already allocated, set to 0). 0, or an errno from
 * pthread_create (no Python: the caller raises). */
/* KB_GATE_TIMEOUT_MAX_S, the longest timeout the options accept, is the option schema's
 * (kb_schema.h): the watchdog clamps any longer wait to it too. */

int kb_watchdog_start(kb_watchdog *w, volatile uint32_t *flag, double timeout_s);
/* The gate was closed at `generation`: arm the timeout. */
void kb_watchdog_arm(kb_watchdog *w, uint32_t generation);
/* Open the gate (store the generation) and disarm. 1 when the watchdog had opened it already. */
int kb_watchdog_open(kb_watchdog *w);
/* Open the gate for good and join the thread. The flag stays the caller's to free. */
void kb_watchdog_stop(kb_watchdog *w);

#endif /* KBENCH_WATCHDOG_H */
