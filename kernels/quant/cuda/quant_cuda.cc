// The device copy of kernels/quant's code tables (quant_cuda.h).
#include "quant/cuda/quant_cuda.h"

#include <algorithm>
#include <cmath>

namespace ablate::kernels::cuda {

QuantTables MakeQuantTables(QuantScheme signed_scheme, QuantScheme unsigned_scheme) {
  QuantTables tables{};
  const auto& st = kernels::QuantCodeTable(signed_scheme, true);
  const auto& ut = kernels::QuantCodeTable(unsigned_scheme, false);
  const auto& udyn = kernels::QuantCodeTable(kernels::QuantScheme::kDynamic, false);
  const auto& sdyn = kernels::QuantCodeTable(kernels::QuantScheme::kDynamic, true);
  std::copy(st.begin(), st.end(), tables.signed_table);
  std::copy(ut.begin(), ut.end(), tables.unsigned_table);
  // Midpoints of the sorted magnitudes, as kernels/quant builds them (signed: codes 0..127 are the
  // non-negative magnitudes).
  for (int i = 0; i < 127; ++i)
    tables.signed_th[i] = float(0.5 * (double(sdyn[size_t(i)]) + double(sdyn[size_t(i) + 1])));
  tables.signed_th[127] = INFINITY;
  for (int i = 0; i < 255; ++i)
    tables.unsigned_th[i] = float(0.5 * (double(udyn[size_t(i)]) + double(udyn[size_t(i) + 1])));
  tables.unsigned_th[255] = INFINITY;
  tables.signed_dynamic = signed_scheme == kernels::QuantScheme::kDynamic ? 1 : 0;
  tables.unsigned_dynamic = unsigned_scheme == kernels::QuantScheme::kDynamic ? 1 : 0;
  return tables;
}

}  // namespace ablate::kernels::cuda
