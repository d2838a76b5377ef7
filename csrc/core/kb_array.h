/* kb_array.h -- growable C arrays, the one place their capacity rule lives.
 *
 * A capacity doubles (from `initial` when 0) until `need` elements fit; the caller reallocs each
 * array it keeps at that capacity and commits the new capacity only when every realloc worked, so
 * a failure leaves the old arrays valid at the old capacity. Nothing here touches Python: the NVML
 * sampler thread uses it without the GIL, and callers that hold it set MemoryError themselves.
 */
#ifndef KB_ARRAY_H
#define KB_ARRAY_H

#include <stdint.h>
#include <stdlib.h>

/* The capacity to move to so `need` elements of `elem` bytes fit (need > cap); 0 when that many
 * bytes would overflow size_t. */
static inline size_t kb_grown_capacity(size_t cap, size_t need, size_t initial, size_t elem)
{
    size_t c = cap ? cap : initial;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return 0;
        c *= 2;
    }
    return c > SIZE_MAX / elem ? 0 : c;
}

/* realloc(p) to `cap` elements of `elem` bytes; NULL (p untouched) on failure or cap == 0. */
static inline void *kb_resize(void *p, size_t cap, size_t elem)
{
    return cap ? realloc(p, cap * elem) : NULL;
}

#endif
