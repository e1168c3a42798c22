// pagesim — the small fused operations of a decoder layer that the real executor runs between
// its GEMMs and attention (calibration/forward_gpu.py), one launch each, as serving engines do
// (vLLM's fused_add_rms_norm, silu_and_mul and reshape_and_cache kernels):
//
//   pagesim_add_rms_norm   residual += x (or = x);  out = residual / rms(residual) * weight
//   pagesim_silu_mul       out = silu(gate) * up,  gate_up = [gate | up] per row
//   pagesim_write_kv       the K and V of each new token into its paged-cache slot
//
// fp16 only (the executor's activations and KV cache). Compiled at run time by CuPy's RawModule
// (NVRTC): no header, no host code; 16-bit conversions are inline PTX. NumPy twins of all three
// live in calibration/layer_ops.py (the CPU executor runs those; the GPU tests compare).

typedef unsigned short u16;

__device__ __forceinline__ float h2f(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ u16 f2h(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// Sum of `v` over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < (int)(blockDim.x / 32); ++w) total += partial[w];
  __syncthreads();  // `partial` may be reused by a later call
  return total;
}

// One row (token) per block; block = 256. With add_x, residual += x (rounded to fp16, as an fp16
// residual stream is); without, residual = x (a layer stack's first norm). Then
// out = residual / sqrt(mean(residual^2) + eps) * weight.
//   out, residual, x [num_rows, hidden]   weight [hidden]
extern "C" __global__ void __launch_bounds__(256)
    pagesim_add_rms_norm(u16* __restrict__ out, u16* __restrict__ residual,
                         const u16* __restrict__ x, const u16* __restrict__ weight,
                         const int hidden, const int add_x, const float eps) {
  const size_t row = (size_t)blockIdx.x * hidden;
  float sum_sq = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const u16 r16 = add_x ? f2h(h2f(residual[row + i]) + h2f(x[row + i])) : x[row + i];
    residual[row + i] = r16;
    const float r = h2f(r16);
    sum_sq += r * r;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    out[row + i] = f2h(h2f(residual[row + i]) * inv_rms * h2f(weight[i]));
  }
}

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, ffn + i]; grid-stride over num_rows * ffn.
//   out [num_rows, ffn]   gate_up [num_rows, 2 ffn]
extern "C" __global__ void __launch_bounds__(256)
    pagesim_silu_mul(u16* __restrict__ out, const u16* __restrict__ gate_up, const int ffn,
                     const long long total) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < total; j += stride) {
    const long long t = j / ffn, i = j % ffn;
    const float g = h2f(gate_up[t * 2 * ffn + i]);
    const float u = h2f(gate_up[t * 2 * ffn + ffn + i]);
    out[j] = f2h(g / (1.f + __expf(-g)) * u);
  }
}

// Token t's K and V (columns k_col and v_col of its qkv row) go to block slot_blocks[t], slot
// slot_offsets[t] of every KV head. One token per block; block = 128, striding over Hkv x D.
//   k_cache, v_cache [num_blocks, num_kv_heads, block_size, head_dim]
//   qkv [num_tokens, qkv_width]   slot_blocks, slot_offsets int32 [num_tokens]
extern "C" __global__ void __launch_bounds__(128)
    pagesim_write_kv(u16* __restrict__ k_cache, u16* __restrict__ v_cache,
                     const u16* __restrict__ qkv, const int* __restrict__ slot_blocks,
                     const int* __restrict__ slot_offsets, const int qkv_width, const int k_col,
                     const int v_col, const int num_kv_heads, const int block_size,
                     const int head_dim) {
  const int t = blockIdx.x;
  const size_t block = (size_t)slot_blocks[t];
  const int offset = slot_offsets[t];
  const size_t src = (size_t)t * qkv_width;
  for (int j = threadIdx.x; j < num_kv_heads * head_dim; j += blockDim.x) {
    const int h = j / head_dim, d = j % head_dim;
    const size_t dst = ((block * num_kv_heads + h) * block_size + offset) * head_dim + d;
    k_cache[dst] = qkv[src + k_col + j];
    v_cache[dst] = qkv[src + v_col + j];
  }
}
