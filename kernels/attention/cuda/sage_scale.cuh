// SageBwd group scales (kernels/ALGORITHMS.md §1.2: s = max|X| / 127, an all-zero group s = 1) and their
// reciprocals, as device functions shared by the SageBwd kernels (sage_*.cu) and the GPU test
// that checks the branch-free forms against the IEEE operations on every input
// (tests/gpu/kernels/attention/sage_scale_gpu_test.cu).
#pragma once

namespace ablate::kernels::cuda {

__device__ __forceinline__ float GroupScale(float max_abs) {
  const float s = max_abs / 127.0f;
  return s == 0.0f ? 1.0f : s;
}
// GroupScale and its reciprocal without the slow-path branches nvcc puts around an IEEE division
// and reciprocal (the backward's scale chain, where all eight consumer warps wait on them in
// lockstep). Div127: x / 127 as q = RN(x RN(1/127)), then one FMA correction, equal to the
// division for every finite x >= 0. RcpNewton: nvcc's own fast path of 1 / s (MUFU.RCP and one
// Newton step), correctly rounded where RcpFastPath (2^-126 <= s < 2^126); the caller takes the
// IEEE reciprocal for the rare s outside (a group whose largest magnitude is below ~1.5e-36)
// behind one warp-uniform test for all its reciprocals (a test each serializes their chains:
// every branch is a reconvergence point). Both equal GroupScale and 1.0f / s bit for bit:
// tests/gpu/kernels/attention/sage_scale_gpu_test.cu checks every input.
__device__ __forceinline__ float GroupScaleBranchless(float max_abs) {
  constexpr float kInv127 = 1.0f / 127.0f;
  const float q = max_abs * kInv127;
  const float s = fmaf(fmaf(-q, 127.0f, max_abs), kInv127, q);
  return s == 0.0f ? 1.0f : s;
}
__device__ __forceinline__ float RcpNewton(float s) {  // == 1.0f / s where RcpFastPath(s)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(s));
  return fmaf(y, fmaf(-s, y, 1.0f), y);
}
__device__ __forceinline__ bool RcpFastPath(float s) {  // 2^-126 <= |s| < 2^126
  return ((__float_as_uint(s) + 0x01800000u) & 0x7f800000u) > 0x01ffffffu;
}

}  // namespace ablate::kernels::cuda
