// 8-bit blockwise optimizer state on the CPU (kernels/ALGORITHMS.md §2.3): the reference of the GPU
// kernels.
//
// A tensor of n float values is cut into blocks of kQuantBlockSize = 2048 consecutive values
// (block b covers [b * 2048, min(n, (b + 1) * 2048)); the last block may be short). Each block
// keeps one float scale, its absmax = max |x| over the block, and one uint8 code per value. A
// value decodes as
//     x~ = QuantCodeTable(scheme, is_signed)[code] * scale
// so a GPU kernel only needs the 256-entry table and the scales. Schemes:
//   kLinear,  signed:   code = (uint8) int8 q, q = round_half_even(127 x / absmax) in [-127, 127]
//                       table[c] = int8(c) / 127 (c = 0x80, q = -128, is never produced; it
//                       decodes to -1). |x - x~| <= absmax / 254 (+ float rounding).
//   kLinear,  unsigned: q = round_half_even(255 x / absmax) in [0, 255]; |x - x~| <= absmax / 510.
//   kDynamic: a dynamic-tree code (bitsandbytes style, our own table). The magnitude field u
//             (7 bits signed, with the sign in bit 7; 8 bits unsigned) reads, from the top, e zero
//             bits (the decade, in unary), a one bit, and f = B - 1 - e fraction bits F (B = field
//             width). u = 0 is 0; otherwise |value| = 10^-e * (0.1 + 0.9 (F + 1) / 2^f).
//             So decade e covers (10^-(e+1), 10^-e] with 2^f evenly spaced points, the top one
//             exact: 1.0 is a code (the absmax element is exact) and the smallest non-zero
//             magnitude is 1e-6 (signed) or 1e-7 (unsigned). The code of x is the table entry
//             nearest to x / absmax (a binary search over the sorted magnitudes; an exact tie goes
//             to the smaller magnitude; the sign is kept). The largest error inside decade e is
//             half its spacing, absmax * 10^-e * 0.9 / 2^(f+1): for |x| near absmax it is coarser
//             than kLinear (0.0070 vs 0.0039 absmax, signed), but for small values it is far finer
//             (|x| ~ 1e-3 absmax: <= 2.8e-4 absmax vs 3.9e-3 absmax).
// Unsigned variants (for the second moment v >= 0) spend the sign bit on resolution: twice as
// many points. Negative inputs to an unsigned tensor quantize to 0. For Adam's v use kDynamic:
// with kLinear every entry below absmax / 510 of its block decodes to exactly 0, and the update
// m / (sqrt(v) + eps) of that coordinate blows up to m / eps (the tests measure it).
// A block of zeros has scale 0 and decodes to zeros. A block holding a NaN or an Inf gets scale
// NaN (all its codes 0), so it decodes to NaN: divergence shows instead of being hidden.
//
// Memory: n bytes of codes + 4 bytes per block, i.e. ~1.002 bytes per value instead of 4
// (75% saved against fp32 state).
//
// Thread safety: the free functions are pure (OpenMP over blocks, deterministic for any thread
// count). BlockQuantizedTensor is a value type; concurrent const use is safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ablate::kernels {

inline constexpr int64_t kQuantBlockSize = 2048;

enum class QuantScheme { kLinear, kDynamic };

const char* QuantSchemeName(QuantScheme s);  // "linear", "dynamic"

// The 256 decoded values (before the block scale), indexed by code. Built once, immutable.
const std::array<float, 256>& QuantCodeTable(QuantScheme scheme, bool is_signed);

inline int64_t NumQuantBlocks(int64_t n) { return (n + kQuantBlockSize - 1) / kQuantBlockSize; }

// Storage of n quantized values: codes plus one float scale per block.
inline size_t QuantizedBytes(int64_t n) {
  return size_t(n) + sizeof(float) * size_t(NumQuantBlocks(n));
}

// The code of one normalized value t = x / absmax, t in [-1, 1] (clamped outside).
uint8_t QuantizeNormalized(float t, QuantScheme scheme, bool is_signed);

// x: (n) float -> codes: (n) uint8, scales: (NumQuantBlocks(n)) float. The blocks are independent,
// so a block-aligned sub-range may be processed alone by offsetting x, codes (by b * 2048) and
// scales (by b).
void QuantizeBlockwise(const float* x, int64_t n, QuantScheme scheme, bool is_signed,
                       uint8_t* codes, float* scales);

// codes: (n) uint8, scales: (NumQuantBlocks(n)) float -> out: (n) float.
void DequantizeBlockwise(const uint8_t* codes, const float* scales, int64_t n, QuantScheme scheme,
                         bool is_signed, float* out);

// Owns the codes and scales of one state tensor. A fresh tensor holds zeros (codes 0, scales 0).
class BlockQuantizedTensor {
 public:
  BlockQuantizedTensor() = default;
  BlockQuantizedTensor(int64_t n, QuantScheme scheme, bool is_signed);

  void Quantize(const float* x);      // x: (size()) float
  void Dequantize(float* out) const;  // out: (size()) float

  int64_t size() const { return n_; }
  int64_t num_blocks() const { return int64_t(scales_.size()); }
  QuantScheme scheme() const { return scheme_; }
  bool is_signed() const { return is_signed_; }
  // Storage bytes: codes + scales (QuantizedBytes(size())).
  size_t bytes() const { return codes_.size() + sizeof(float) * scales_.size(); }

  // Raw access for checkpoints: codes (size()) uint8, scales (num_blocks()) float.
  const uint8_t* codes() const { return codes_.data(); }
  uint8_t* mutable_codes() { return codes_.data(); }
  const float* scales() const { return scales_.data(); }
  float* mutable_scales() { return scales_.data(); }

 private:
  int64_t n_ = 0;
  QuantScheme scheme_ = QuantScheme::kLinear;
  bool is_signed_ = true;
  std::vector<uint8_t> codes_;
  std::vector<float> scales_;
};

}  // namespace ablate::kernels
