// fma.cu -- the fp32 compute ceiling probe: independent FMA chains per thread.
// FLOPs per call: grid * block * iters * CHAINS * 2.
#define CHAINS 8
extern "C" __global__ void kb_fma(float *__restrict__ out, int iters, float a, float b)
{
    float x[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; c++)
        x[c] = threadIdx.x * 1e-3f + c;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int c = 0; c < CHAINS; c++)
            x[c] = fmaf(x[c], a, b);
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CHAINS; c++)
        s += x[c];
    // Written only in a case that never happens for the inputs used, but the compiler cannot
    // know, so the chains are kept.
    if (s == 1234.5f)
        out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
