/* fake_libnvidia_ml.c -- a stand-in libnvidia-ml.so.1 beside the fake libcuda (tests/
 * test_cuda_pipeline_fake_driver.py): one GPU that always reads the same steady, unlimited state
 * (SM 1980 MHz, 300 W instantaneous and averaged, a 700 W limit, no clock event reason; or a
 * clock that comes up late, FAKE_NVML_SM_RAMP_S, or a limit reason, FAKE_NVML_REASONS), so the
 * sustained regime's settle rule and the state carried between measurements run for real on
 * the sampler's thread. It also answers the P2P topology of kbench.distributed's report
 * (tests/test_nvml_topology.py). Every other call succeeds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { unsigned int gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType, nvmlReturn;
    union { double dVal; unsigned long long ullVal; } value;
} field_t;

static int dev_dummy;
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "fake NVML error"; }
int nvmlSystemGetDriverVersion(char *v, unsigned n) { snprintf(v, n, "580.fake"); return 0; }
/* a bus id starting "bad" is not found (NVML_ERROR_NOT_FOUND) */
/* One handle per distinct bus id string (so two ids of one device can be told), up to 8. */
int nvmlDeviceGetHandleByPciBusId_v2(const char *pci, void **d)
{
    static char ids[8][64];
    static int handles[8];
    if (strncmp(pci, "bad", 3) == 0)
        return 6;
    for (int i = 0; i < 8; i++) {
        if (ids[i][0] == '\0')
            snprintf(ids[i], sizeof ids[i], "%s", pci);
        if (strcmp(ids[i], pci) == 0) {
            *d = &handles[i];
            return 0;
        }
    }
    return 999;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) { *d = &dev_dummy; return 0; }
int nvmlDeviceGetName(void *d, char *n, unsigned len) { snprintf(n, len, "Fake GPU"); return 0; }
/* FAKE_NVML_SM_RAMP_S=x: the SM clock reads 1410 MHz for the first x seconds after the first
 * clock read, then 1980 (a clock still coming up as the load starts). */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* FAKE_NVML_SM_SWING_AFTER_S=x: a capped clock, 1470 MHz, that from x seconds after the first
 * clock read on dips to 1425 MHz for the last 0.2 s of every 0.5 s (a power controller's
 * swing: 3%, more than the settle rule's 2% between two 0.25 s windows). */
static unsigned sm_clock(void)
{
    static double first = -1.0;
    const char *ramp = getenv("FAKE_NVML_SM_RAMP_S"), *swing = getenv("FAKE_NVML_SM_SWING_AFTER_S");
    double t = now_s();
    if (first < 0)
        first = t;
    if (swing) {
        double since = t - first - atof(swing);
        return since >= 0 && since - 0.5 * (double)(long)(since / 0.5) >= 0.3 ? 1425 : 1470;
    }
    return ramp && t - first < atof(ramp) ? 1410 : 1980;
}
int nvmlDeviceGetClockInfo(void *d, int type, unsigned *mhz)
{
    *mhz = type == 2 ? 3201 : sm_clock();
    return 0;
}
int nvmlDeviceGetMaxClockInfo(void *d, int type, unsigned *mhz) { *mhz = type == 2 ? 3201 : 1980; return 0; }
int nvmlDeviceGetPowerUsage(void *d, unsigned *mw) { *mw = 300000; return 0; }
int nvmlDeviceGetTemperature(void *d, int sensor, unsigned *c) { *c = 40; return 0; }
int nvmlDeviceGetUtilizationRates(void *d, util_t *u) { u->gpu = u->memory = 0; return 0; }
int nvmlDeviceGetMemoryInfo(void *d, mem_t *m) { m->total = 1ull << 34; m->free = 1ull << 33; m->used = 1ull << 33; return 0; }
/* FAKE_NVML_REASONS=mask: the clock event reasons every read shows (4: sw_power_cap), from
 * FAKE_NVML_REASONS_AFTER_S seconds after the first read on (default 0). */
int nvmlDeviceGetCurrentClocksEventReasons(void *d, unsigned long long *r)
{
    static double first = -1.0;
    const char *mask = getenv("FAKE_NVML_REASONS"), *after = getenv("FAKE_NVML_REASONS_AFTER_S");
    double t = now_s();
    if (first < 0)
        first = t;
    *r = mask && (!after || t - first >= atof(after)) ? strtoull(mask, NULL, 0) : 0;
    return 0;
}
int nvmlDeviceGetEnforcedPowerLimit(void *d, unsigned *mw) { *mw = 700000; return 0; }
int nvmlDeviceGetFieldValues(void *d, int n, field_t *v)
{
    for (int i = 0; i < n; i++) {
        v[i].nvmlReturn = 0;
        v[i].valueType = 0;             /* NVML_VALUE_TYPE_DOUBLE */
        v[i].value.dVal = 300000.0;     /* milliwatts */
    }
    return 0;
}
#ifndef FAKE_NVML_NO_TOPOLOGY
/* Any two devices: P2P read and write OK, NVLink not supported (5), atomics not on this GPU (2);
 * one NUMA node apart (40). FAKE_NVML_P2P_RC=n / FAKE_NVML_ANCESTOR_RC=n: every P2P status /
 * common-ancestor query fails with return code n.
 * Built with -DFAKE_NVML_NO_TOPOLOGY: a libnvidia-ml without either function. */
int nvmlDeviceGetP2PStatus(void *a, void *b, int cap, int *status)
{
    static const int by_cap[] = {0, 0, 5, 2};
    const char *rc = getenv("FAKE_NVML_P2P_RC");
    if (rc != NULL)
        return atoi(rc);
    *status = cap >= 0 && cap < 4 ? by_cap[cap] : 6;
    return 0;
}
int nvmlDeviceGetTopologyCommonAncestor(void *a, void *b, int *level)
{
    const char *rc = getenv("FAKE_NVML_ANCESTOR_RC");
    if (rc != NULL)
        return atoi(rc);
    *level = 40;
    return 0;
}
#endif
