// 8-bit blockwise state on the GPU (kernels/ALGORITHMS.md §2.3), host side: the code tables of
// kernels/quant (quant_cpu.h) in the layout a kernel uploads once. The device half, the quantizer
// of one block held in a CUDA block's registers, is quant_cuda.cuh; the optimizer's update
// kernels (optim/cuda) use both. The GPU uses the CPU's tables, thresholds and round-half-even,
// so it reproduces the CPU's codes and scales byte for byte.
// Thread safety: MakeQuantTables is pure.
#pragma once

#include "quant/quant_cpu.h"

namespace ablate::kernels::cuda {

// Code tables of kernels/quant, uploaded once: the decoded values of the signed code in use
// (linear or dynamic) and of the unsigned one (v), and the dynamic codes' midpoints
// (QuantizeNormalized's binary search), padded with +inf.
struct QuantTables {
  float signed_table[256];
  float unsigned_table[256];
  float signed_th[128];
  float unsigned_th[256];
  int signed_dynamic;    // 1: the signed states use the dynamic code, 0: linear
  int unsigned_dynamic;  // 1: the unsigned states (v) use the dynamic code, 0: linear
};

// The tables of a state whose signed tensors (m, momentum) use `signed_scheme` and whose unsigned
// tensors (the second moment v) use `unsigned_scheme`: QuantCodeTable's values and the midpoints
// of the sorted dynamic magnitudes as kernels/quant builds them.
QuantTables MakeQuantTables(QuantScheme signed_scheme,
                            QuantScheme unsigned_scheme = QuantScheme::kDynamic);

}  // namespace ablate::kernels::cuda
