// Blockwise 8-bit quantization of optimizer state (quant_cpu.h).
#include "quant/quant_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ablate/bf16.h"

namespace ablate::kernels {
namespace {

// Dynamic-tree magnitudes for a `bits`-wide field, indexed by the field value u; increasing in u.
std::vector<float> DynamicMagnitudes(int bits) {
  std::vector<float> mag(size_t(1) << bits);
  mag[0] = 0.0f;
  for (uint32_t u = 1; u < mag.size(); ++u) {
    int lead = 31 - __builtin_clz(u);  // position of the leading one = number of fraction bits
    int e = bits - 1 - lead;           // zero bits above it: the decade
    uint32_t frac = u - (1u << lead);
    double v = std::pow(10.0, -e) * (0.1 + 0.9 * double(frac + 1) / double(1u << lead));
    mag[u] = float(v);
  }
  return mag;
}

struct DynamicCode {
  std::array<float, 256> table{};  // code -> value
  std::vector<float> magnitude;    // field value u -> magnitude, sorted ascending
  // Midpoints between consecutive magnitudes, padded with +inf to a power of two (128 or 256
  // entries) for the branchless search.
  std::vector<float> threshold;
  int steps = 0;  // log2(threshold.size())
};

DynamicCode BuildDynamic(bool is_signed) {
  DynamicCode c;
  const int bits = is_signed ? 7 : 8;
  c.magnitude = DynamicMagnitudes(bits);
  for (size_t i = 0; i + 1 < c.magnitude.size(); ++i)
    c.threshold.push_back(float(0.5 * (double(c.magnitude[i]) + double(c.magnitude[i + 1]))));
  c.threshold.push_back(std::numeric_limits<float>::infinity());
  c.steps = bits;
  for (int code = 0; code < 256; ++code) {
    if (is_signed) {
      float m = c.magnitude[code & 0x7f];
      c.table[code] = (code & 0x80) && m != 0.0f ? -m : m;
    } else {
      c.table[code] = c.magnitude[code];
    }
  }
  return c;
}

const DynamicCode& Dynamic(bool is_signed) {
  static const DynamicCode kSigned = BuildDynamic(true);
  static const DynamicCode kUnsigned = BuildDynamic(false);
  return is_signed ? kSigned : kUnsigned;
}

std::array<float, 256> BuildLinear(bool is_signed) {
  std::array<float, 256> t{};
  for (int code = 0; code < 256; ++code) {
    if (is_signed) {
      int q = std::max(int(int8_t(uint8_t(code))), -127);
      t[code] = float(double(q) / 127.0);
    } else {
      t[code] = float(double(code) / 255.0);
    }
  }
  return t;
}

}  // namespace

const char* QuantSchemeName(QuantScheme s) {
  return s == QuantScheme::kLinear ? "linear" : "dynamic";
}

const std::array<float, 256>& QuantCodeTable(QuantScheme scheme, bool is_signed) {
  static const std::array<float, 256> kLinearSigned = BuildLinear(true);
  static const std::array<float, 256> kLinearUnsigned = BuildLinear(false);
  if (scheme == QuantScheme::kDynamic) return Dynamic(is_signed).table;
  return is_signed ? kLinearSigned : kLinearUnsigned;
}

uint8_t QuantizeNormalized(float t, QuantScheme scheme, bool is_signed) {
  t = std::clamp(t, -1.0f, 1.0f);
  if (!is_signed && !(t > 0.0f)) return 0;
  if (scheme == QuantScheme::kLinear) {
    if (is_signed) return uint8_t(int8_t(RoundHalfEven(127.0f * t)));
    return uint8_t(RoundHalfEven(255.0f * t));
  }
  const DynamicCode& c = Dynamic(is_signed);
  const float a = std::fabs(t);
  // Number of midpoints strictly below a = index of the nearest magnitude (ties go down), by
  // binary lifting: no data-dependent branches, which random state values would mispredict.
  const float* th = c.threshold.data();
  uint32_t u = 0;
  for (uint32_t step = 1u << (c.steps - 1); step > 0; step >>= 1)
    u += th[u + step - 1] < a ? step : 0;
  if (is_signed && t < 0.0f && u != 0) u |= 0x80;
  return uint8_t(u);
}

void QuantizeBlockwise(const float* x, int64_t n, QuantScheme scheme, bool is_signed,
                       uint8_t* codes, float* scales) {
  const int64_t blocks = NumQuantBlocks(n);
  (void)QuantCodeTable(scheme, is_signed);  // build the tables before the parallel region
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kQuantBlockSize, hi = std::min(n, lo + kQuantBlockSize);
    float absmax = 0.0f;
    bool finite = true;
    for (int64_t i = lo; i < hi; ++i) {
      float a = std::fabs(x[i]);
      finite = finite && std::isfinite(a);
      absmax = std::max(absmax, a);
    }
    if (!finite || absmax == 0.0f) {
      scales[b] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      std::fill(codes + lo, codes + hi, uint8_t(0));
      continue;
    }
    scales[b] = absmax;
    // Divide rather than multiply by 1/absmax so that the absmax element maps to exactly +-1.
    for (int64_t i = lo; i < hi; ++i)
      codes[i] = QuantizeNormalized(x[i] / absmax, scheme, is_signed);
  }
}

void DequantizeBlockwise(const uint8_t* codes, const float* scales, int64_t n, QuantScheme scheme,
                         bool is_signed, float* out) {
  const std::array<float, 256>& table = QuantCodeTable(scheme, is_signed);
  const int64_t blocks = NumQuantBlocks(n);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kQuantBlockSize, hi = std::min(n, lo + kQuantBlockSize);
    const float s = scales[b];
    for (int64_t i = lo; i < hi; ++i) out[i] = table[codes[i]] * s;
  }
}

BlockQuantizedTensor::BlockQuantizedTensor(int64_t n, QuantScheme scheme, bool is_signed)
    : n_(n),
      scheme_(scheme),
      is_signed_(is_signed),
      codes_(size_t(n), uint8_t(0)),
      scales_(size_t(NumQuantBlocks(n)), 0.0f) {}

void BlockQuantizedTensor::Quantize(const float* x) {
  QuantizeBlockwise(x, n_, scheme_, is_signed_, codes_.data(), scales_.data());
}

void BlockQuantizedTensor::Dequantize(float* out) const {
  DequantizeBlockwise(codes_.data(), scales_.data(), n_, scheme_, is_signed_, out);
}

}  // namespace ablate::kernels
