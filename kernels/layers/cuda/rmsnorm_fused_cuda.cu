// The RMSNorm backward of the residual stream fused into one pass (layers_cuda.h,
// RmsNormBackwardFusedCuda: the contract is there): the input gradient, its bf16 copy (the next
// GEMM's operand) and the gain's column partials from one read of each row, where the unfused
// chain made several fp32 round trips; the partials are summed in a fixed order (deterministic).
// Also the column sum of partials (SumPartialsColumns, layers_common.cuh) the QK-norm backward
// (qkv_norm_rope_cuda.cu) shares.
#include <algorithm>
#include <cstdint>
#include <string>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

// One warp per row; lane j holds columns lane + 32 * i (i < K). Every load of a row is issued
// before its reduction (one memory round trip per row), the dweight accumulators live in shared
// memory (each warp its own row of them, so registers stay at 3K and occupancy up), the gains come
// through the read-only cache. Fixed rows per warp, fixed warp order in the block reduction:
// deterministic.
template <int K>
__global__ void __launch_bounds__(kFusedThreads)
    RmsNormBackwardFusedKernel(float* dinp, bf16* dinp_bf, bool accumulate, float* partial,
                               const float* dout, const float* inp, const float* weight,
                               const float* rstd, int64_t N, int C) {
  extern __shared__ float sh[];  // (kFusedWarps, C)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* acc = sh + warp * C;
  for (int c = lane; c < C; c += 32) acc[c] = 0.f;
  for (int64_t row = int64_t(blockIdx.x) * kFusedWarps + warp; row < N;
       row += int64_t(gridDim.x) * kFusedWarps) {
    const float* dy = dout + row * C;
    const float* x = inp + row * C;
    float* dx = dinp + row * C;
    float dyv[K], xv[K], dxv[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int c = lane + 32 * i;
      const bool in = c < C;
      dyv[i] = in ? dy[c] : 0.f;
      xv[i] = in ? x[c] : 0.f;
      dxv[i] = in && accumulate ? dx[c] : 0.f;
    }
    const float rs = rstd[row];
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int c = lane + 32 * i;
      if (c < C) dot += __ldg(weight + c) * dyv[i] * xv[i];
    }
    dot = WarpSum(dot);
    const float k = rs * rs * rs * dot / float(C);
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int c = lane + 32 * i;
      if (c < C) {
        float g = rs * __ldg(weight + c) * dyv[i] - k * xv[i];
        if (accumulate) g += dxv[i];
        dx[c] = g;
        if (dinp_bf != nullptr) dinp_bf[row * C + c] = __float2bfloat16_rn(g);
        acc[c] += dyv[i] * xv[i] * rs;
      }
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.f;
    for (int w = 0; w < kFusedWarps; ++w) s += sh[w * C + c];
    partial[int64_t(blockIdx.x) * C + c] = s;
  }
}

// out[c] += sum over p of partial[p * ld + c], c < n, in a fixed order: block = 32 columns x 8
// lanes of p; each lane sums p = lane, lane + 8, ... (coalesced rows), then the 8 in order.
__global__ void SumPartialsColumnsKernel(float* out, const float* partial, int P, int ld, int n) {
  __shared__ float sh[8][33];
  const int cx = threadIdx.x % 32, py = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + cx;
  float acc = 0.f;
  if (c < n) {
    for (int p = py; p < P; p += 8) acc += partial[int64_t(p) * ld + c];
  }
  sh[py][cx] = acc;
  __syncthreads();
  if (py == 0 && c < n) {
    float t = 0.f;
    for (int w = 0; w < 8; ++w) t += sh[w][cx];
    out[c] += t;
  }
}

}  // namespace

namespace layers_internal {

void SumPartialsColumns(float* out, const float* partial, int P, int ld, int n,
                        cudaStream_t stream) {
  SumPartialsColumnsKernel<<<unsigned((n + 31) / 32), 256, 0, stream>>>(out, partial, P, ld, n);
}

}  // namespace layers_internal

size_t RmsNormBackwardFusedScratch(int64_t N, int C) {
  return size_t(FusedBlocks(N)) * size_t(std::max(C, 1));
}

Status RmsNormBackwardFusedCuda(float* dinp, bf16* dinp_bf, bool accumulate, float* dweight,
                                const float* dout, const float* inp, const float* weight,
                                const float* rstd, int64_t N, int C, float* scratch,
                                size_t scratch_floats, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("RmsNormBackwardFusedCuda", N, C));
  if (C > 1024) {
    return InvalidArgument("RmsNormBackwardFusedCuda: C = " + std::to_string(C) +
                           " exceeds 1024 (use RmsNormBackwardCuda)");
  }
  if (scratch_floats < RmsNormBackwardFusedScratch(N, C)) {
    return InvalidArgument("RmsNormBackwardFusedCuda: scratch of " +
                           std::to_string(scratch_floats) + " floats, need " +
                           std::to_string(RmsNormBackwardFusedScratch(N, C)));
  }
  if (N == 0) return Status::Ok();
  const int P = FusedBlocks(N);
  const size_t smem = size_t(kFusedWarps) * C * sizeof(float);
  if (C <= 256) {
    RmsNormBackwardFusedKernel<8><<<P, kFusedThreads, smem, stream>>>(
        dinp, dinp_bf, accumulate, scratch, dout, inp, weight, rstd, N, C);
  } else if (C <= 512) {
    RmsNormBackwardFusedKernel<16><<<P, kFusedThreads, smem, stream>>>(
        dinp, dinp_bf, accumulate, scratch, dout, inp, weight, rstd, N, C);
  } else if (C <= 768) {
    RmsNormBackwardFusedKernel<24><<<P, kFusedThreads, smem, stream>>>(
        dinp, dinp_bf, accumulate, scratch, dout, inp, weight, rstd, N, C);
  } else {
    RmsNormBackwardFusedKernel<32><<<P, kFusedThreads, smem, stream>>>(
        dinp, dinp_bf, accumulate, scratch, dout, inp, weight, rstd, N, C);
  }
  SumPartialsColumns(dweight, scratch, P, C, C, stream);
  return Launched("RmsNormBackwardFusedCuda");
}

}  // namespace ablate::kernels::cuda
