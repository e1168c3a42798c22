// pagesim — kernels the timing harness launches around the kernels it measures.
//
// Compiled at run time by CuPy's RawModule (NVRTC): no header, no host code.

// An empty kernel: launch + synchronise of many of them is the bare launch cost of a step.
extern "C" __global__ void pagesim_noop() {}

// Evicts the L2 by reading a buffer at least twice its size, leaving it full of clean lines.
//
// A memset flush leaves the L2 full of dirty lines that must be written back to HBM when the
// next (timed) kernel's reads evict them, so the timed kernel pays for writes it never made.
// Reading leaves nothing to write back. Each thread xors its 16-byte words; the sum is stored
// only if it equals `never` (the harness passes a value the xor cannot take in practice, and the
// compiler cannot know that), so no load is optimised away and nothing is written.
// grid-stride over num_vectors 16-byte words; block = 256.
extern "C" __global__ void __launch_bounds__(256)
    pagesim_l2_flush_read(const uint4* __restrict__ buffer, const unsigned long long num_vectors,
                          const unsigned int never, unsigned int* __restrict__ sink) {
  unsigned int x = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < num_vectors; i += stride) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(buffer + i));
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == never) sink[0] = x;
}
