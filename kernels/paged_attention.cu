// pagesim — decode attention over a paged KV cache (one new query token per sequence).
//
// Compiled at run time by CuPy's RawModule (NVRTC), so this file has no host code and includes no
// header: 16-bit conversions and the 16-byte loads are inline PTX, and the kernels are templates
// that calibration/kernel.py instantiates through NVRTC name expressions. `nvcc -c` compiles it
// too (CI builds it for sm_80 and sm_90 with -DPAGESIM_INSTANTIATE_GRID).
//
// ----------------------------------------------------------------------------------------------
// Layouts (16-bit elements: DT = 0 for IEEE fp16, 1 for bfloat16; indices int32)
//
//   q, out        [num_seqs, num_heads, head_dim]
//   k_cache       [num_blocks, num_kv_heads, block_size, head_dim]      (paged)
//   v_cache       [num_blocks, num_kv_heads, block_size, head_dim]      (same as K)
//   k/v contig.   [num_seqs,   num_kv_heads, row_stride, head_dim]      (the non-paged baseline)
//   block_tables  [num_seqs, row_stride]   entry i = physical block holding tokens [i*B, (i+1)*B)
//   context_lens  [num_seqs]               tokens of KV to attend to (the new token's included)
//
// Why this layout: for one (block, KV head) the block_size x head_dim tile is one contiguous run
// of memory (4 KiB for B = 16, D = 128). A token's head_dim row is D/8 16-byte vectors, so D/8
// consecutive lanes read one token and a warp reads 32/(D/8) consecutive tokens: every warp load
// is one contiguous, 16-byte-per-lane, fully coalesced 512-byte request, for K and for V alike.
// vLLM's K layout [blocks, heads, D/x, B, x] exists for its thread-group scheme, and its V layout
// [blocks, heads, D, B] for a dot product along tokens; with an online softmax both K and V are
// consumed row by row, so one row-major layout for both keeps every load wide and contiguous.
// Query heads h and the KV head h / (num_heads / num_kv_heads) share K/V (GQA/MQA, as Hugging
// Face's repeat_kv orders them).
//
// Work split: one CTA of 4 warps per (KV head, group of up to 8 of its query heads, sequence,
// partition of the context). Each CTA reads its K/V rows once for all its query heads, so under
// GQA a KV head is read once per step (groups of more than 8 heads are split into tiles of at
// most 8 that each read the KV head). With one partition the CTA writes `out`; with several
// (split-K: few long sequences still fill the GPU) each writes an unnormalised partial
// (accumulator, running max, running sum) and decode_attention_reduce combines them.
//
// Inside a CTA each warp takes chunks of TPC = (32 / (D/8)) * UNROLL consecutive tokens, issues all
// of a chunk's K and V loads before using any (UNROLL independent 16-byte loads of each per lane
// in flight), and keeps, per lane group and per query head, an online-softmax state (running max
// m, running sum l, accumulator for its 8 elements of head_dim). Scores live in the log2 domain
// (q is pre-scaled by scale * log2(e)) so exp is one ex2.approx. States merge across lane groups
// with shuffles and across warps through shared memory.
//
// Safety: a lane whose token t is at or past end = min(context_len, partition end) loads token
// end - 1 instead (masked out of the softmax), and a block-table entry is read only for such a
// clamped token, so slots past a sequence's length and unmapped table entries are never read
// (the tests poison them with NaN).
// ----------------------------------------------------------------------------------------------

namespace pagesim {

typedef unsigned short u16;
typedef unsigned int u32;

constexpr int kWarpSize = 32;
constexpr int kNumWarps = 4;
constexpr int kNumThreads = kNumWarps * kWarpSize;
constexpr int kVec = 8;  // 16-bit elements per 16-byte load
constexpr u32 kFullMask = 0xffffffffu;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x; ex2.approx(-inf) = +0, which masked scores rely on.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Read-only 16-byte load through the non-coherent path (K/V/q never change during a launch).
__device__ __forceinline__ uint4 load_16B(const u16* ptr) {
  uint4 r;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(ptr));
  return r;
}

__device__ __forceinline__ int load_i32(const int* ptr) {
  int r;
  asm("ld.global.nc.s32 %0, [%1];" : "=r"(r) : "l"(ptr));
  return r;
}

template <int DT>
struct Elem;

template <>
struct Elem<0> {  // IEEE fp16
  static __device__ __forceinline__ void unpack2(u32 x, float& lo, float& hi) {
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\t"
        "cvt.f32.f16 %1, h;\n\t}"
        : "=f"(lo), "=f"(hi)
        : "r"(x));
  }
  static __device__ __forceinline__ u16 pack(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
};

template <>
struct Elem<1> {  // bfloat16: the upper 16 bits of a float32
  static __device__ __forceinline__ void unpack2(u32 x, float& lo, float& hi) {
    lo = __uint_as_float(x << 16);
    hi = __uint_as_float(x & 0xffff0000u);
  }
  static __device__ __forceinline__ u16 pack(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
};

// Element 2i sits in the low half of word i (little endian).
template <int DT>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[kVec]) {
  Elem<DT>::unpack2(v.x, f[0], f[1]);
  Elem<DT>::unpack2(v.y, f[2], f[3]);
  Elem<DT>::unpack2(v.z, f[4], f[5]);
  Elem<DT>::unpack2(v.w, f[6], f[7]);
}

// Loads in flight per lane per chunk, traded against registers: each query head a CTA serves
// holds 8 q values, 8 accumulators and UNROLL scores per lane.
template <int HEADS>
struct Unroll {
  static constexpr int value = HEADS <= 2 ? 8 : (HEADS <= 4 ? 4 : 2);
};

// CTAs of kNumThreads that must fit on one SM at once: the second argument of __launch_bounds__,
// so ptxas caps registers at 65536 / (kNumThreads x this) per thread (128 for 4, 168 for 3; SMs
// of sm_80 and sm_90 have 64K registers). Without it ptxas picks freely, and under CuPy's
// -ftz=true the GQA-4 variant took 157 registers on sm_90: 3 CTAs per SM instead of 4. The values
// are the most that compile with no spill and no stack frame (ptxas of CUDA 13.0, with and
// without -ftz; tests/test_kernel_compile.py checks every catalog variant): more heads per CTA
// hold more softmax state per lane, and sm_8x's ptxas needs a few more registers at 2, 4 and 7
// heads. calibration/partitions.py mirrors this table (static_asserts in the compile test keep
// the two equal); the launch plan sizes split-K from the occupancy that results.
template <int HEADS, int HEAD_DIM>
struct MinCtasPerSm {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr int value = (HEADS == 1 || HEADS == 3) ? 4 : (HEADS <= 6 ? 3 : 2);
#else
  // head_dim 256 with 2 heads spills 4 bytes at 4 CTAs (UNROLL 8 and a whole warp per token).
  static constexpr int value =
      HEADS <= 4 ? ((HEADS == 2 && HEAD_DIM == 256) ? 3 : 4) : (HEADS <= 7 ? 3 : 2);
#endif
};

// grid = (num_kv_heads * (num_heads / num_kv_heads / HEADS), num_seqs, num_partitions)
// block = kNumThreads
template <int DT, int HEAD_DIM, int BLOCK_SIZE, int HEADS, bool PAGED>
__global__ void __launch_bounds__(kNumThreads, (MinCtasPerSm<HEADS, HEAD_DIM>::value))
    decode_attention(
    u16* __restrict__ out,             // [num_seqs, num_heads, HEAD_DIM]      (num_partitions == 1)
    float* __restrict__ part_acc,      // [num_seqs, num_heads, num_partitions, HEAD_DIM]
    float* __restrict__ part_max,      // [num_seqs, num_heads, num_partitions] (log2 domain)
    float* __restrict__ part_sum,      // [num_seqs, num_heads, num_partitions]
    const u16* __restrict__ q,         // [num_seqs, num_heads, HEAD_DIM]
    const u16* __restrict__ k_cache,   // see the layouts above
    const u16* __restrict__ v_cache,
    const int* __restrict__ block_tables,  // [num_seqs, row_stride] (paged only)
    const int* __restrict__ context_lens,  // [num_seqs]
    const int row_stride,      // paged: block-table row length; contiguous: token slots per row
    const int num_heads, const int num_kv_heads,
    const int partition_size,  // tokens per partition
    const int num_partitions,  // gridDim.z
    const float scale_log2) {  // softmax scale * log2(e)
  static_assert(HEAD_DIM % kVec == 0, "head_dim must be a multiple of 8");
  constexpr int LPT = HEAD_DIM / kVec;  // lanes per token
  static_assert(LPT <= kWarpSize && kWarpSize % LPT == 0, "head_dim must divide 256");
  constexpr int TPW = kWarpSize / LPT;  // tokens per warp step
  static_assert(BLOCK_SIZE % TPW == 0, "a warp step must not straddle two blocks");
  constexpr int UNROLL = Unroll<HEADS>::value;
  constexpr int TPC = TPW * UNROLL;  // tokens per warp chunk

  const int group = num_heads / num_kv_heads;
  const int tiles = group / HEADS;
  const int kv_head = blockIdx.x / tiles;
  const int head0 = kv_head * group + (blockIdx.x % tiles) * HEADS;
  const int seq = blockIdx.y;
  const int part = blockIdx.z;
  const int len = context_lens[seq];
  const int start = part * partition_size;
  if (part > 0 && start >= len) return;  // nothing here; the reduce reads only live partitions
  const int end = min(len, start + partition_size);

  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int slot = lane / LPT;  // which token of a warp step
  const int chunk = lane % LPT;  // which 8 elements of head_dim

  float qf[HEADS][kVec];
#pragma unroll
  for (int h = 0; h < HEADS; ++h) {
    const u16* qp = q + ((size_t)seq * num_heads + head0 + h) * HEAD_DIM + chunk * kVec;
    unpack8<DT>(load_16B(qp), qf[h]);
#pragma unroll
    for (int e = 0; e < kVec; ++e) qf[h][e] *= scale_log2;
  }

  float m[HEADS], l[HEADS], acc[HEADS][kVec];
#pragma unroll
  for (int h = 0; h < HEADS; ++h) {
    m[h] = neg_inf();
    l[h] = 0.f;
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[h][e] = 0.f;
  }

  const int* table = block_tables + (size_t)seq * row_stride;
  for (int base = start + warp * TPC; base < end; base += kNumWarps * TPC) {
    // Tokens past `end` are clamped to end - 1 (a token of this partition, < context_len, in a
    // mapped block) and masked out of the softmax below: every load is unconditional, so the
    // compiler issues all block-table loads back to back, then all UNROLL 16-byte loads of K and
    // of V, instead of one branch and one table-load latency per token.
    int tok[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) tok[u] = min(base + u * TPW + slot, end - 1);
    size_t row[UNROLL];
    if (PAGED) {
      int block[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) block[u] = load_i32(table + tok[u] / BLOCK_SIZE);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        row[u] = ((size_t)block[u] * num_kv_heads + kv_head) * BLOCK_SIZE + tok[u] % BLOCK_SIZE;
    } else {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        row[u] = ((size_t)seq * num_kv_heads + kv_head) * row_stride + tok[u];
    }
    uint4 kr[UNROLL], vr[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const size_t offset = row[u] * HEAD_DIM + chunk * kVec;
      kr[u] = load_16B(k_cache + offset);
      vr[u] = load_16B(v_cache + offset);
    }

    // Scores (log2 domain); masked tokens get -inf.
    float p[UNROLL][HEADS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float kf[kVec];
      unpack8<DT>(kr[u], kf);
      const bool valid = base + u * TPW + slot < end;
#pragma unroll
      for (int h = 0; h < HEADS; ++h) {
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot = fmaf(qf[h][e], kf[e], dot);
#pragma unroll
        for (int o = LPT / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(kFullMask, dot, o);
        p[u][h] = valid ? dot : neg_inf();
      }
    }

    // Online softmax: one rescale per chunk, one exp per token.
#pragma unroll
    for (int h = 0; h < HEADS; ++h) {
      float chunk_max = p[0][h];
#pragma unroll
      for (int u = 1; u < UNROLL; ++u) chunk_max = fmaxf(chunk_max, p[u][h]);
      const float m_new = fmaxf(m[h], chunk_max);
      const float m_ref = m_new == neg_inf() ? 0.f : m_new;  // all masked so far: avoid -inf - -inf
      const float corr = fast_exp2(m[h] - m_ref);
      m[h] = m_new;
      l[h] *= corr;
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[h][e] *= corr;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        p[u][h] = fast_exp2(p[u][h] - m_ref);
        l[h] += p[u][h];
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float vf[kVec];
      unpack8<DT>(vr[u], vf);
#pragma unroll
      for (int h = 0; h < HEADS; ++h) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[h][e] = fmaf(p[u][h], vf[e], acc[h][e]);
      }
    }
  }

  // Merge the token slots of the warp (lanes chunk, chunk + LPT, chunk + 2 LPT, ...).
#pragma unroll
  for (int o = LPT; o < kWarpSize; o <<= 1) {
#pragma unroll
    for (int h = 0; h < HEADS; ++h) {
      const float m_other = __shfl_xor_sync(kFullMask, m[h], o);
      const float l_other = __shfl_xor_sync(kFullMask, l[h], o);
      const float m_new = fmaxf(m[h], m_other);
      const float m_ref = m_new == neg_inf() ? 0.f : m_new;
      const float a = fast_exp2(m[h] - m_ref);
      const float b = fast_exp2(m_other - m_ref);
      l[h] = l[h] * a + l_other * b;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float acc_other = __shfl_xor_sync(kFullMask, acc[h][e], o);
        acc[h][e] = acc[h][e] * a + acc_other * b;
      }
      m[h] = m_new;
    }
  }

  // Merge the warps through shared memory, one query head at a time.
  __shared__ float s_acc[kNumWarps][HEAD_DIM];
  __shared__ float s_max[kNumWarps];
  __shared__ float s_sum[kNumWarps];
#pragma unroll
  for (int h = 0; h < HEADS; ++h) {
    if (slot == 0) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) s_acc[warp][chunk * kVec + e] = acc[h][e];
      if (chunk == 0) {
        s_max[warp] = m[h];
        s_sum[warp] = l[h];
      }
    }
    __syncthreads();
    float m_all = s_max[0];
#pragma unroll
    for (int w = 1; w < kNumWarps; ++w) m_all = fmaxf(m_all, s_max[w]);
    const float m_ref = m_all == neg_inf() ? 0.f : m_all;
    float weight[kNumWarps];
    float l_all = 0.f;
#pragma unroll
    for (int w = 0; w < kNumWarps; ++w) {
      weight[w] = fast_exp2(s_max[w] - m_ref);
      l_all += s_sum[w] * weight[w];
    }
    const size_t head = (size_t)seq * num_heads + head0 + h;
    for (int d = threadIdx.x; d < HEAD_DIM; d += kNumThreads) {
      float a = 0.f;
#pragma unroll
      for (int w = 0; w < kNumWarps; ++w) a += s_acc[w][d] * weight[w];
      if (num_partitions == 1) {
        out[head * HEAD_DIM + d] = Elem<DT>::pack(l_all > 0.f ? a / l_all : 0.f);
      } else {
        const size_t index = head * num_partitions + part;
        part_acc[index * HEAD_DIM + d] = a;
        if (d == 0) {
          part_max[index] = m_all;
          part_sum[index] = l_all;
        }
      }
    }
    __syncthreads();
  }
}

// Combines the partitions of decode_attention. grid = (num_heads, num_seqs), block = HEAD_DIM.
template <int DT, int HEAD_DIM>
__global__ void __launch_bounds__(HEAD_DIM) decode_attention_reduce(
    u16* __restrict__ out,               // [num_seqs, num_heads, HEAD_DIM]
    const float* __restrict__ part_acc,  // [num_seqs, num_heads, num_partitions, HEAD_DIM]
    const float* __restrict__ part_max,  // [num_seqs, num_heads, num_partitions]
    const float* __restrict__ part_sum,  // [num_seqs, num_heads, num_partitions]
    const int* __restrict__ context_lens, const int num_heads, const int partition_size,
    const int num_partitions) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int d = threadIdx.x;
  const int len = context_lens[seq];
  const int live = max(1, min(num_partitions, (len + partition_size - 1) / partition_size));
  const size_t base = ((size_t)seq * num_heads + head) * num_partitions;
  float m_all = neg_inf();
  for (int i = 0; i < live; ++i) m_all = fmaxf(m_all, part_max[base + i]);
  const float m_ref = m_all == neg_inf() ? 0.f : m_all;
  float l_all = 0.f;
  float a = 0.f;
  for (int i = 0; i < live; ++i) {
    const float w = fast_exp2(part_max[base + i] - m_ref);
    l_all += part_sum[base + i] * w;
    a += part_acc[(base + i) * HEAD_DIM + d] * w;
  }
  out[((size_t)seq * num_heads + head) * HEAD_DIM + d] =
      Elem<DT>::pack(l_all > 0.f ? a / l_all : 0.f);
}

}  // namespace pagesim

// Explicit instantiations for offline compilation checks (nvcc -c -DPAGESIM_INSTANTIATE_GRID);
// at run time NVRTC instantiates exactly the variants asked for through name expressions.
#define PAGESIM_DECODE(DT, D, B, H, P)                                                       \
  template __global__ void pagesim::decode_attention<DT, D, B, H, P>(                         \
      pagesim::u16*, float*, float*, float*, const pagesim::u16*, const pagesim::u16*,        \
      const pagesim::u16*, const int*, const int*, const int, const int, const int, const int, \
      const int, const float);
#define PAGESIM_REDUCE(DT, D)                                                           \
  template __global__ void pagesim::decode_attention_reduce<DT, D>(                     \
      pagesim::u16*, const float*, const float*, const float*, const int*, const int, \
      const int, const int);

#ifdef PAGESIM_INSTANTIATE_GRID
PAGESIM_DECODE(0, 128, 16, 1, true)   // Llama-2-7B / 13B (MHA)
PAGESIM_DECODE(0, 128, 16, 1, false)  // its contiguous baseline
PAGESIM_DECODE(0, 128, 16, 4, true)   // Llama-3-8B (GQA 4)
PAGESIM_DECODE(0, 128, 16, 8, true)   // Llama-2-70B (GQA 8)
PAGESIM_DECODE(0, 128, 16, 7, true)   // Qwen2.5-7B (GQA 7)
PAGESIM_DECODE(1, 128, 32, 2, true)
PAGESIM_DECODE(0, 64, 8, 1, true)
PAGESIM_DECODE(1, 64, 32, 3, true)
PAGESIM_DECODE(0, 256, 8, 1, true)
PAGESIM_DECODE(1, 256, 16, 8, true)
PAGESIM_DECODE(0, 256, 16, 2, true)   // the one layout that needs 3 CTAs per SM at <= 4 heads
PAGESIM_REDUCE(0, 64)
PAGESIM_REDUCE(0, 128)
PAGESIM_REDUCE(1, 128)
PAGESIM_REDUCE(0, 256)
#endif
