// copy.cu -- the HBM ceiling probe: a grid-stride 16-byte-vector copy.
// Bytes moved per call: 2 * n16 * 16 (each byte read once and written once).
extern "C" __global__ void kb_copy16(uint4 *__restrict__ dst, const uint4 *__restrict__ src,
                                     unsigned long long n16)
{
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n16; i += stride)
        dst[i] = src[i];
}

// Four independent 16-byte loads in flight per thread before any store: more bytes outstanding
// per SM than kb_copy16 (one of the ceiling's candidates; the fastest one is kept).
extern "C" __global__ void kb_copy16x4(uint4 *__restrict__ dst, const uint4 *__restrict__ src,
                                       unsigned long long n16)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < n16; i += stride)
        dst[i] = src[i];
}
