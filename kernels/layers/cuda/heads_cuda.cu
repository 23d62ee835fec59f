// The permutes between token-major and head-major layouts on the GPU (layers_cuda.h, "Permutes":
// the contract is there): the QKV split and its backward, and the heads merge and its inverse
// (by 16-byte vectors where D and the pointers allow, else per element).
#include <cstdint>
#include <string>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

// Element i of a (B, Tn, 3, H, D) qkv tensor (C = H * D): which of q, k, v (0, 1, 2) it belongs
// to and its index in that tensor's (B, H, Tn, D) layout.
__device__ __forceinline__ int64_t QkvHeadsIndex(int64_t i, int64_t C, int Tn, int H, int D,
                                                 int* which) {
  const int64_t bt = i / (3 * C);
  const int64_t rem = i - bt * 3 * C;
  *which = int(rem / C);
  const int64_t hc = rem - *which * C;
  const int h = int(hc / D), d = int(hc - int64_t(h) * D);
  const int64_t b = bt / Tn, t = bt - b * Tn;
  return ((b * H + h) * Tn + t) * D + d;
}

template <typename Tin, typename Tqk, typename Tv>
__global__ void QkvSplitForwardKernel(Tqk* q, Tqk* k, Tv* v, const Tin* qkv, int B, int Tn, int H,
                                      int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * 3 * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int which;
    const int64_t dst = QkvHeadsIndex(i, C, Tn, H, D, &which);
    const float x = ToF(qkv[i]);
    if (which == 0) {
      q[dst] = FromF<Tqk>(x);
    } else if (which == 1) {
      k[dst] = FromF<Tqk>(x);
    } else {
      v[dst] = FromF<Tv>(x);
    }
  }
}

template <typename Tqk, typename Tv, typename Tout>
__global__ void QkvSplitBackwardKernel(Tout* dqkv, const Tqk* dq, const Tqk* dk, const Tv* dv, int B,
                                       int Tn, int H, int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * 3 * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int which;
    const int64_t src = QkvHeadsIndex(i, C, Tn, H, D, &which);
    const float g = which == 0 ? ToF(dq[src]) : which == 1 ? ToF(dk[src]) : ToF(dv[src]);
    dqkv[i] = FromF<Tout>(g);
  }
}

template <typename T>
__global__ void HeadsMergeForwardKernel(T* out, const T* inp, int B, int Tn, int H, int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C;
    const int64_t hc = i - bt * C;
    const int h = int(hc / D), d = int(hc - int64_t(h) * D);
    const int64_t b = bt / Tn, t = bt - b * Tn;
    out[i] = inp[((b * H + h) * Tn + t) * D + d];
  }
}

template <typename T>
__global__ void HeadsMergeBackwardKernel(T* dinp, const T* dout, int B, int Tn, int H, int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    // i indexes dinp (B, H, Tn, D).
    const int64_t row = i / D;
    const int d = int(i - row * D);
    const int64_t t = row % Tn;
    const int64_t bh = row / Tn;
    const int64_t h = bh % H, b = bh / H;
    dinp[i] = dout[(b * Tn + t) * C + h * D + d];
  }
}

// 16-byte vectors (8 bf16) of one head's row: one 32-bit index split per vector instead of
// 64-bit ones per element. D % 8 == 0, 16-byte aligned buffers, B*Tn*H*D < 2^31 (the launchers
// check and otherwise take the per-element kernels above).
__global__ void HeadsMergeForwardVecKernel(uint4* out, const uint4* inp, int Tn, int H, int D8,
                                           int total8) {
  const int C8 = H * D8;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total8; i += gridDim.x * blockDim.x) {
    const int bt = i / C8, hc = i - bt * C8;
    const int h = hc / D8, d = hc - h * D8;
    const int b = bt / Tn, t = bt - b * Tn;
    out[i] = inp[((b * H + h) * Tn + t) * D8 + d];
  }
}

__global__ void HeadsMergeBackwardVecKernel(uint4* dinp, const uint4* dout, int Tn, int H, int D8,
                                            int total8) {
  const int C8 = H * D8;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total8; i += gridDim.x * blockDim.x) {
    // i indexes dinp (B, H, Tn, D).
    const int row = i / D8, d = i - row * D8;
    const int bh = row / Tn, t = row - bh * Tn;
    const int b = bh / H, h = bh - b * H;
    dinp[i] = dout[(b * Tn + t) * C8 + h * D8 + d];
  }
}

}  // namespace

template <typename Tin, typename Tqk, typename Tv>
Status QkvSplitForwardCuda(Tqk* q, Tqk* k, Tv* v, const Tin* qkv, int B, int Tn, int H, int D,
                           cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("QkvSplitForwardCuda", int64_t(B) * Tn, int64_t(H) * D));
  const int64_t total = int64_t(B) * Tn * 3 * H * D;
  if (total == 0) return Status::Ok();
  QkvSplitForwardKernel<Tin, Tqk, Tv><<<Blocks(total, 256), 256, 0, stream>>>(q, k, v, qkv, B, Tn, H, D);
  return Launched("QkvSplitForwardCuda");
}

template <typename Tqk, typename Tv, typename Tout>
Status QkvSplitBackwardCuda(Tout* dqkv, const Tqk* dq, const Tqk* dk, const Tv* dv, int B, int Tn,
                            int H, int D, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("QkvSplitBackwardCuda", int64_t(B) * Tn, int64_t(H) * D));
  const int64_t total = int64_t(B) * Tn * 3 * H * D;
  if (total == 0) return Status::Ok();
  QkvSplitBackwardKernel<Tqk, Tv, Tout><<<Blocks(total, 256), 256, 0, stream>>>(dqkv, dq, dk, dv, B, Tn, H, D);
  return Launched("QkvSplitBackwardCuda");
}

// dst <- src permuted (B, H, Tn, D) -> (B, Tn, H, D) when kMerge, the inverse otherwise; by
// 16-byte vectors when D and both pointers allow.
template <bool kMerge, typename T>
Status HeadsPermuteCuda(const char* who, T* dst, const T* src, int B, int Tn, int H, int D,
                        cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes(who, int64_t(B) * Tn, int64_t(H) * D));
  const int64_t total = int64_t(B) * Tn * H * D;
  if (total == 0) return Status::Ok();
  constexpr int kPer = 16 / sizeof(T);
  if (D % kPer == 0 && total < (int64_t(1) << 31) && Aligned16(dst) && Aligned16(src)) {
    const int total8 = int(total / kPer);
    uint4* d = reinterpret_cast<uint4*>(dst);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    if constexpr (kMerge) {
      HeadsMergeForwardVecKernel<<<Blocks(total8, 256), 256, 0, stream>>>(d, s, Tn, H, D / kPer,
                                                                          total8);
    } else {
      HeadsMergeBackwardVecKernel<<<Blocks(total8, 256), 256, 0, stream>>>(d, s, Tn, H, D / kPer,
                                                                           total8);
    }
    return Launched(who);
  }
  if constexpr (kMerge) {
    HeadsMergeForwardKernel<T><<<Blocks(total, 256), 256, 0, stream>>>(dst, src, B, Tn, H, D);
  } else {
    HeadsMergeBackwardKernel<T><<<Blocks(total, 256), 256, 0, stream>>>(dst, src, B, Tn, H, D);
  }
  return Launched(who);
}

template <typename T>
Status HeadsMergeForwardCuda(T* out, const T* inp, int B, int Tn, int H, int D,
                             cudaStream_t stream) {
  return HeadsPermuteCuda<true>("HeadsMergeForwardCuda", out, inp, B, Tn, H, D, stream);
}

template <typename T>
Status HeadsMergeBackwardCuda(T* dinp, const T* dout, int B, int Tn, int H, int D,
                              cudaStream_t stream) {
  return HeadsPermuteCuda<false>("HeadsMergeBackwardCuda", dinp, dout, B, Tn, H, D, stream);
}

// ---------------------------------------------------------------------------------------------
// Instantiations (the combinations layers_cuda.h lists).
template Status QkvSplitForwardCuda<float, float, bf16>(float*, float*, bf16*, const float*, int, int,
                                                        int, int, cudaStream_t);
template Status QkvSplitForwardCuda<float, bf16, bf16>(bf16*, bf16*, bf16*, const float*, int, int,
                                                       int, int, cudaStream_t);
template Status QkvSplitForwardCuda<float, float, float>(float*, float*, float*, const float*, int,
                                                         int, int, int, cudaStream_t);
template Status QkvSplitBackwardCuda<float, bf16, bf16>(bf16*, const float*, const float*,
                                                        const bf16*, int, int, int, int,
                                                        cudaStream_t);
template Status QkvSplitBackwardCuda<float, float, float>(float*, const float*, const float*,
                                                          const float*, int, int, int, int,
                                                          cudaStream_t);
template Status QkvSplitBackwardCuda<bf16, bf16, bf16>(bf16*, const bf16*, const bf16*,
                                                       const bf16*, int, int, int, int,
                                                       cudaStream_t);

#define INST_HEADS(T)                                                                              \
  template Status HeadsMergeForwardCuda<T>(T*, const T*, int, int, int, int, cudaStream_t);        \
  template Status HeadsMergeBackwardCuda<T>(T*, const T*, int, int, int, int, cudaStream_t);
INST_HEADS(float)
INST_HEADS(bf16)

}  // namespace ablate::kernels::cuda
