/* rsmi_fake.c -- a stand-in librocm_smi64 for the CPU tests: devices whose shader clock reads
 * 2100 MHz (third of 500/1200/2100), memory clock 1300 MHz, socket power 350 W and junction
 * temperature 65 C (+ the device index: which device was read shows). KB_FAKE_RSMI_LAYOUT=6
 * writes rsmi_frequencies_t as ROCm 6 does (a bool has_deep_sleep first), anything else as
 * ROCm 5 did; kbench must read both.
 *
 * Knobs: KB_FAKE_RSMI_BUSES=c1,c2,c3  one device per entry, with that PCI bus
 * (rsmi_dev_pci_id_get's BDFID: bus << 8); default one device on bus c1, as hip_fake.c's.
 * KB_FAKE_RSMI_NO_PCI=1, KB_FAKE_RSMI_NO_TEMP=1, KB_FAKE_RSMI_NO_POWER=1: that read fails.
 * KB_FAKE_RSMI_INIT_MS=<ms>: rsmi_init takes that long. kb_fake_rsmi_inits_open(): inits not
 * yet matched by a shut-down (ROCm SMI counts them).
 *
 * Build: gcc -shared -fPIC -o librocm_smi64.so rsmi_fake.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define RSMI_NOT_SUPPORTED 2
#define RSMI_INVALID_ARGS 1
#define MAX_DEVICES 16

static uint32_t buses(uint64_t *bus)
{
    const char *b = getenv("KB_FAKE_RSMI_BUSES");
    uint32_t n = 0;
    if (b == NULL || *b == '\0') {
        bus[0] = 0xc1;
        return 1;
    }
    while (n < MAX_DEVICES) {
        char *end;
        bus[n++] = strtoull(b, &end, 16);
        if (*end != ',')
            break;
        b = end + 1;
    }
    return n;
}

static int inits_open;
EXPORT int kb_fake_rsmi_inits_open(void) { return __atomic_load_n(&inits_open, __ATOMIC_SEQ_CST); }
EXPORT unsigned int rsmi_init(uint64_t flags)
{
    const char *ms = getenv("KB_FAKE_RSMI_INIT_MS");
    if (ms != NULL) {
        long v = atol(ms);
        struct timespec ts = {v / 1000, (v % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    __atomic_add_fetch(&inits_open, 1, __ATOMIC_SEQ_CST);
    return 0;
}
EXPORT unsigned int rsmi_shut_down(void)
{
    __atomic_sub_fetch(&inits_open, 1, __ATOMIC_SEQ_CST);
    return 0;
}
EXPORT unsigned int rsmi_status_string(unsigned int s, const char **str)
{
    *str = s ? "RSMI_STATUS_NOT_SUPPORTED" : "RSMI_STATUS_SUCCESS";
    return 0;
}
EXPORT unsigned int rsmi_num_monitor_devices(uint32_t *n)
{
    uint64_t bus[MAX_DEVICES];
    *n = buses(bus);
    return 0;
}
EXPORT unsigned int rsmi_dev_pci_id_get(uint32_t dv, uint64_t *bdfid)
{
    uint64_t bus[MAX_DEVICES];
    if (getenv("KB_FAKE_RSMI_NO_PCI"))
        return RSMI_NOT_SUPPORTED;
    if (dv >= buses(bus))
        return RSMI_INVALID_ARGS;
    *bdfid = bus[dv] << 8;              /* domain 0, device 0, function 0 */
    return 0;
}
EXPORT unsigned int rsmi_dev_gpu_clk_freq_get(uint32_t dv, unsigned int clk, void *f)
{
    const char *layout = getenv("KB_FAKE_RSMI_LAYOUT");
    size_t off = layout && strcmp(layout, "6") == 0 ? 4 : 0;   /* after the bool, padded */
    unsigned char *b = f;
    uint32_t num = clk == 0 ? 3 : 1, cur = clk == 0 ? 2 : 0;
    uint64_t freqs[3] = {500000000ull, 1200000000ull, 2100000000ull};
    if (clk != 0)
        freqs[0] = 1300000000ull;
    if (off)
        b[0] = 1;                       /* has_deep_sleep */
    memcpy(b + off, &num, 4);
    memcpy(b + off + 4, &cur, 4);
    memcpy(b + 2 * off + 8, freqs, 8 * num);
    return 0;
}
EXPORT unsigned int rsmi_dev_temp_metric_get(uint32_t dv, uint32_t sensor, unsigned int metric,
                                             int64_t *t)
{
    if (getenv("KB_FAKE_RSMI_NO_TEMP"))
        return RSMI_NOT_SUPPORTED;
    *t = 65000 + 1000 * (int64_t)dv;
    return 0;
}
EXPORT unsigned int rsmi_dev_current_socket_power_get(uint32_t dv, uint64_t *uw)
{
    if (getenv("KB_FAKE_RSMI_NO_POWER"))
        return RSMI_NOT_SUPPORTED;
    *uw = 350000000ull;
    return 0;
}
