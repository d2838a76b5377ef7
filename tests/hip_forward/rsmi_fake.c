/* rsmi_fake.c -- a stand-in librocm_smi64 for the CPU tests: one device whose shader clock
 * reads 2100 MHz (third of 500/1200/2100), memory clock 1300 MHz, socket power 350 W and
 * junction temperature 65 C. KB_FAKE_RSMI_LAYOUT=6 writes rsmi_frequencies_t as ROCm 6 does
 * (a bool has_deep_sleep first), anything else as ROCm 5 did; kbench must read both.
 *
 * Build: gcc -shared -fPIC -o librocm_smi64.so rsmi_fake.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT unsigned int rsmi_init(uint64_t flags) { return 0; }
EXPORT unsigned int rsmi_shut_down(void) { return 0; }
EXPORT unsigned int rsmi_status_string(unsigned int s, const char **str)
{
    *str = s ? "RSMI_STATUS_NOT_SUPPORTED" : "RSMI_STATUS_SUCCESS";
    return 0;
}
EXPORT unsigned int rsmi_num_monitor_devices(uint32_t *n) { *n = 1; return 0; }
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
    *t = 65000;
    return 0;
}
EXPORT unsigned int rsmi_dev_current_socket_power_get(uint32_t dv, uint64_t *uw)
{
    *uw = 350000000ull;
    return 0;
}
