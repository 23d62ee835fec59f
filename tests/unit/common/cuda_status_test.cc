// ablate/cuda_status.h: CUDA runtime errors as a Status (no GPU needed: only the error names).
#include "ablate/cuda_status.h"

#include <gtest/gtest.h>

namespace ablate {
namespace {

TEST(CudaStatus, SuccessIsOk) { EXPECT_TRUE(CudaStatus(cudaSuccess, "anything").ok()); }

TEST(CudaStatus, AnErrorNamesTheCallAndTheError) {
  Status st = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc of the arena");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("cudaMalloc of the arena: "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("cudaErrorMemoryAllocation"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ablate
