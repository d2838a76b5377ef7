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
