// bfloat16 rounding on the CPU, bit-exact with the GPU's __float2bfloat16_rn (round to nearest even).
// Used wherever the CPU twin must see the same operand precision as a bf16 tensor-core MMA.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ablate {

// Rounds x to the nearest bfloat16 value (ties to even) and returns it as a float. NaN stays NaN.
inline float RoundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return x;  // NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
inline double RoundToBf16(double x) { return RoundToBf16(static_cast<float>(x)); }

// The 16-bit pattern of RoundToBf16(x) (a host-side bf16 buffer's element), and the float a
// pattern stands for.
inline uint16_t Bf16Bits(float x) {
  const float r = RoundToBf16(x);
  uint32_t u;
  std::memcpy(&u, &r, 4);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16Value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Round half to even, as cvt.rni does; the one rounding rule of every INT8 quantizer.
inline double RoundHalfEven(double x) { return std::nearbyint(x); }
inline float RoundHalfEven(float x) { return std::nearbyintf(x); }

}  // namespace ablate
