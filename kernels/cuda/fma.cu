// fma.cu -- the fp32 and fp64 compute ceiling probes: independent FMA chains per thread.
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

// The fp64 ceiling probe: the same chains in double. FLOPs per call as kb_fma's.
extern "C" __global__ void kb_fma_f64(double *__restrict__ out, int iters, double a, double b)
{
    double x[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; c++)
        x[c] = threadIdx.x * 1e-3 + c;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int c = 0; c < CHAINS; c++)
            x[c] = fma(x[c], a, b);
    }
    double s = 0.0;
#pragma unroll
    for (int c = 0; c < CHAINS; c++)
        s += x[c];
    if (s == 1234.5)
        out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
