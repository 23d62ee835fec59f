// The token embedding on the GPU (layers_cuda.h, "Encoder": the contract of every function is
// there): the lookup, the one-block-per-token backward over host-built token buckets, and the
// planned backward (fixed chunks of each token's rows, then the chunks of a token in order), both
// deterministic scatter-adds. The host builds the buckets and plans from its copy of the tokens.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

__global__ void EncoderForwardKernel(float* out, const int32_t* tokens, const float* wte, int64_t N,
                                     int C) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C;
    const int c = int(i - r * C);
    out[i] = wte[int64_t(tokens[r]) * C + c];
  }
}

__global__ void EncoderBackwardKernel(float* dwte, const float* dout, const int32_t* unique,
                                      const int32_t* offsets, const int32_t* rows, int C) {
  const int u = blockIdx.x;
  const int tok = unique[u];
  const int begin = offsets[u], end = offsets[u + 1];
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.f;
    for (int i = begin; i < end; ++i) acc += dout[int64_t(rows[i]) * C + c];
    dwte[int64_t(tok) * C + c] += acc;
  }
}

// The planned embedding backward (see EncoderBackwardPlan). Kernel 1: one block per chunk, each
// thread a column (or 4 with float4), the chunk's rows summed in ascending order.
template <bool kVec>
__global__ void EncoderChunkKernel(float* dwte, float* scratch, const float* dout,
                                   const int32_t* rows, const int32_t* chunk_begin,
                                   const int32_t* chunk_token, const int32_t* chunk_slot, int C) {
  const int ch = blockIdx.x;
  const int begin = chunk_begin[ch], end = chunk_begin[ch + 1];
  const int slot = chunk_slot[ch];
  float* dst = slot < 0 ? dwte + int64_t(chunk_token[ch]) * C : scratch + int64_t(slot) * C;
  if (kVec) {
    const int C4 = C / 4;
    for (int c = threadIdx.x; c < C4; c += blockDim.x) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int i = begin; i < end; ++i) {
        const float4 x = reinterpret_cast<const float4*>(dout + int64_t(rows[i]) * C)[c];
        acc.x += x.x;
        acc.y += x.y;
        acc.z += x.z;
        acc.w += x.w;
      }
      float4* d = reinterpret_cast<float4*>(dst) + c;
      if (slot < 0) {
        float4 o = *d;
        o.x += acc.x;
        o.y += acc.y;
        o.z += acc.z;
        o.w += acc.w;
        *d = o;
      } else {
        *d = acc;
      }
    }
  } else {
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.f;
      for (int i = begin; i < end; ++i) acc += dout[int64_t(rows[i]) * C + c];
      if (slot < 0) {
        dst[c] += acc;
      } else {
        dst[c] = acc;
      }
    }
  }
}

// Kernel 2: a token with several chunks gets its chunk sums in chunk order. Grid (tokens,
// column blocks): the token count can pass gridDim.y's 65535 with a large vocabulary.
__global__ void EncoderMultiKernel(float* dwte, const float* scratch, const int32_t* multi_token,
                                   const int32_t* multi_begin, int C) {
  const int m = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float tot = 0.f;
  for (int s = multi_begin[m]; s < multi_begin[m + 1]; ++s) tot += scratch[int64_t(s) * C + c];
  dwte[int64_t(multi_token[m]) * C + c] += tot;
}

}  // namespace

Status EncoderForwardCuda(float* out, const int32_t* tokens, const float* wte, int64_t N, int C,
                          cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("EncoderForwardCuda", N, C));
  if (N == 0) return Status::Ok();
  EncoderForwardKernel<<<Blocks(N * C, 256), 256, 0, stream>>>(out, tokens, wte, N, C);
  return Launched("EncoderForwardCuda");
}

void BuildTokenBuckets(const int32_t* tokens, int64_t N, int V, TokenBuckets* out) {
  std::vector<int32_t> count(size_t(V) + 1, 0);
  for (int64_t i = 0; i < N; ++i) ++count[size_t(tokens[i]) + 1];
  out->tokens.clear();
  out->offsets.assign(1, 0);
  std::vector<int32_t> start(size_t(V) + 1, 0);
  for (int v = 0; v < V; ++v) start[v + 1] = start[v] + count[v + 1];
  for (int v = 0; v < V; ++v) {
    if (count[v + 1] > 0) {
      out->tokens.push_back(v);
      out->offsets.push_back(start[v + 1]);
    }
  }
  out->rows.assign(size_t(N), 0);
  std::vector<int32_t> pos(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < N; ++i) out->rows[size_t(pos[tokens[i]]++)] = int32_t(i);
}

Status EncoderBackwardCuda(float* dwte, const float* dout, const int32_t* unique,
                           const int32_t* offsets, const int32_t* rows, int n_unique, int C,
                           cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("EncoderBackwardCuda", n_unique, C));
  if (n_unique == 0) return Status::Ok();
  const int threads = std::min(256, ((C + 31) / 32) * 32);
  EncoderBackwardKernel<<<n_unique, threads, 0, stream>>>(dwte, dout, unique, offsets, rows, C);
  return Launched("EncoderBackwardCuda");
}

size_t EncoderBackwardPlanInts(int64_t N) {
  return size_t(4 * N + 5 * (N / kEncoderChunkRows) + 8);
}

size_t EncoderBackwardScratch(int64_t N, int C) {
  return size_t(2 * (N / kEncoderChunkRows) + 2) * size_t(std::max(C, 1));
}

void BuildEncoderBackwardPlan(const int32_t* tokens, int64_t N, int V, EncoderBackwardPlan* out) {
  TokenBuckets bk;
  BuildTokenBuckets(tokens, N, V, &bk);
  const int n_unique = int(bk.tokens.size());
  std::vector<int32_t> chunk_begin, chunk_token, chunk_slot, multi_token, multi_begin;
  int slots = 0;
  for (int u = 0; u < n_unique; ++u) {
    const int begin = bk.offsets[u], end = bk.offsets[u + 1];
    const bool multi = end - begin > kEncoderChunkRows;
    if (multi) {
      multi_token.push_back(bk.tokens[u]);
      multi_begin.push_back(slots);
    }
    for (int lo = begin; lo < end; lo += kEncoderChunkRows) {
      chunk_begin.push_back(lo);
      chunk_token.push_back(bk.tokens[u]);
      chunk_slot.push_back(multi ? slots++ : -1);
    }
  }
  chunk_begin.push_back(int32_t(N));
  multi_begin.push_back(slots);
  out->n = N;
  out->n_chunks = int(chunk_token.size());
  out->n_multi = int(multi_token.size());
  out->n_slots = slots;
  auto& d = out->data;
  d.clear();
  d.reserve(EncoderBackwardPlanInts(N));
  d.insert(d.end(), bk.rows.begin(), bk.rows.end());
  d.insert(d.end(), chunk_begin.begin(), chunk_begin.end());
  d.insert(d.end(), chunk_token.begin(), chunk_token.end());
  d.insert(d.end(), chunk_slot.begin(), chunk_slot.end());
  d.insert(d.end(), multi_token.begin(), multi_token.end());
  d.insert(d.end(), multi_begin.begin(), multi_begin.end());
}

Status EncoderBackwardPlannedCuda(float* dwte, const float* dout, const EncoderBackwardPlan& plan,
                                  const int32_t* d_data, int C, float* scratch,
                                  size_t scratch_floats, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("EncoderBackwardPlannedCuda", plan.n, C));
  if (plan.n_chunks == 0) return Status::Ok();
  if (size_t(plan.n_slots) * size_t(C) > scratch_floats) {
    return InvalidArgument("EncoderBackwardPlannedCuda: scratch of " +
                           std::to_string(scratch_floats) + " floats, need " +
                           std::to_string(size_t(plan.n_slots) * size_t(C)));
  }
  const int32_t* rows = d_data;
  const int32_t* chunk_begin = rows + plan.n;
  const int32_t* chunk_token = chunk_begin + plan.n_chunks + 1;
  const int32_t* chunk_slot = chunk_token + plan.n_chunks;
  const int32_t* multi_token = chunk_slot + plan.n_chunks;
  const int32_t* multi_begin = multi_token + plan.n_multi;
  const bool vec = C % 4 == 0 && (reinterpret_cast<uintptr_t>(dwte) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(dout) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(scratch) & 15) == 0;
  const int cols = vec ? C / 4 : C;
  const int threads = std::min(256, ((cols + 31) / 32) * 32);
  if (vec) {
    EncoderChunkKernel<true><<<plan.n_chunks, threads, 0, stream>>>(
        dwte, scratch, dout, rows, chunk_begin, chunk_token, chunk_slot, C);
  } else {
    EncoderChunkKernel<false><<<plan.n_chunks, threads, 0, stream>>>(
        dwte, scratch, dout, rows, chunk_begin, chunk_token, chunk_slot, C);
  }
  if (plan.n_multi > 0) {
    EncoderMultiKernel<<<dim3(unsigned(plan.n_multi), unsigned((C + 255) / 256)), 256, 0,
                         stream>>>(dwte, scratch, multi_token, multi_begin, C);
  }
  return Launched("EncoderBackwardPlannedCuda");
}

}  // namespace ablate::kernels::cuda
