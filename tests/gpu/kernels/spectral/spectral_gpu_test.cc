// Batched Psi_p on the GPU (kernels/spectral/cuda/spectral_cuda.h) against the float64 Psi_p of
// kernels/spectral (spectral_cpu.h). Needs a GPU; every test skips (GTEST_SKIP) without one.
//
// What is checked (tolerances in the tests; the measured values are printed): well-conditioned
// matrices (sigma in [0.5, 2], scaled by 0.1, 1 and 10) of several shapes and two Gram sizes
// batched together, every route (auto at p in {0, 1/4, 1/2, 1, -1/2, -1, 0.3}, eigh and coupled
// Newton forced), TF32 off and on, against Psi<double> matrix by matrix; the route agrees with the
// CPU's; and 40000 matrices of one size (more than a grid dimension's half) on the coupled Newton
// route. The device optimizer's use of it is tests/gpu/worker/trainer/optim_gpu_test.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "spectral/cuda/spectral_cuda.h"
#include "spectral/spectral_cpu.h"

namespace ablate::kernels::cuda {
namespace {

// Relative L2 error and cosine of got[at, at + want.size()) against want.
struct Err {
  double rel_l2 = 0;
  double cosine = 1;
};
Err CompareSlice(const std::vector<float>& got, size_t at, const std::vector<double>& want) {
  const std::vector<float> g(got.begin() + at, got.begin() + at + want.size());
  return {gputest::RelL2(g, want), gputest::Cosine(g, want)};
}

// A row-major (m, n) matrix U diag(sigma) V^T with random orthonormal U, V and sigma spread
// evenly over [lo, hi].
std::vector<double> WithSingularValues(int m, int n, double lo, double hi, uint64_t seed) {
  auto orth = [](int rows, int cols, uint64_t s) {  // (rows, cols) with orthonormal columns
    auto a = gputest::Randn(size_t(rows) * cols, s);
    std::vector<double> q(a.begin(), a.end());
    for (int j = 0; j < cols; ++j) {
      for (int k = 0; k < j; ++k) {
        double d = 0;
        for (int i = 0; i < rows; ++i) d += q[size_t(i) * cols + j] * q[size_t(i) * cols + k];
        for (int i = 0; i < rows; ++i) q[size_t(i) * cols + j] -= d * q[size_t(i) * cols + k];
      }
      double nn = 0;
      for (int i = 0; i < rows; ++i) nn += q[size_t(i) * cols + j] * q[size_t(i) * cols + j];
      nn = std::sqrt(nn);
      for (int i = 0; i < rows; ++i) q[size_t(i) * cols + j] /= nn;
    }
    return q;
  };
  const int r = std::min(m, n);
  const auto u = orth(m, r, seed), v = orth(n, r, seed + 1);
  std::vector<double> o(size_t(m) * n, 0.0);
  for (int k = 0; k < r; ++k) {
    const double s = r == 1 ? hi : lo + (hi - lo) * k / (r - 1);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        o[size_t(i) * n + j] += s * u[size_t(i) * r + k] * v[size_t(j) * r + k];
  }
  return o;
}

TEST(BatchedPsiTest, MatchesCpuFloat64OnWellConditionedMatrices) {
  SKIP_WITHOUT_GPU();
  // Two Gram sizes (r = 32: tall, wide and square groups batched together; r = 12).
  const std::vector<PsiGroup> groups = {
      {48, 32, 3}, {32, 48, 2}, {32, 32, 4}, {20, 12, 2}, {12, 20, 1}};
  struct PCase {
    double p;
    const char* method;
  };
  const std::vector<PCase> ps = {{0.0, "auto"}, {0.25, "auto"}, {0.5, "auto"},
                                 {1.0, "auto"}, {-0.5, "auto"}, {-1.0, "auto"},
                                 {0.3, "auto"}, {0.5, "eigh"},  {0.75, "coupled_newton"}};
  for (bool tf32 : {false, true}) {
    auto psi = BatchedPsi::Create(groups, nullptr, tf32);
    ASSERT_TRUE(psi.ok()) << psi.status().ToString();
    std::printf("[BatchedPsi tf32=%s] eigh %s\n", tf32 ? "on" : "off",
                (*psi)->eigh_batched() ? "batched (XsyevBatched)" : "per matrix (Xsyevd)");
    for (const PCase& pc : ps) {
      kernels::PsiOptions opt;
      if (std::string(pc.method) == "eigh") opt.method = kernels::PsiMethod::kEigh;
      if (std::string(pc.method) == "coupled_newton")
        opt.method = kernels::PsiMethod::kCoupledNewton;
      std::vector<std::vector<double>> host(groups.size());
      std::vector<std::unique_ptr<gputest::Dev<float>>> din, dout;
      std::vector<float*> in, out;
      for (size_t g = 0; g < groups.size(); ++g) {
        const auto& gr = groups[g];
        std::vector<float> f;
        for (int k = 0; k < gr.count; ++k) {
          auto o = WithSingularValues(gr.m, gr.n, 0.5, 2.0, 1000 * g + 2 * k);
          // A matrix scaled by 10^k checks the per-matrix norms (scale-equivariance of Psi).
          for (auto& x : o) x *= std::pow(10.0, double(k % 3) - 1.0);
          for (double x : o) f.push_back(float(x));
        }
        host[g].assign(f.begin(), f.end());
        din.push_back(std::make_unique<gputest::Dev<float>>(f));
        dout.push_back(std::make_unique<gputest::Dev<float>>(f.size()));
        in.push_back(din.back()->p);
        out.push_back(dout.back()->p);
      }
      auto route = (*psi)->Run(in, out, pc.p, opt, true);
      ASSERT_TRUE(route.ok()) << route.status().ToString();
      auto res = (*psi)->ResidualMax();
      ASSERT_TRUE(res.ok());
      ASSERT_TRUE((*psi)->CheckEigh().ok());
      double worst = 0, worst_cos = 1;
      for (size_t g = 0; g < groups.size(); ++g) {
        const auto& gr = groups[g];
        const auto got = dout[g]->Get();
        const size_t per = size_t(gr.m) * gr.n;
        for (int k = 0; k < gr.count; ++k) {
          std::vector<double> want(per);
          kernels::PsiStats ps;
          ASSERT_TRUE(kernels::Psi<double>(host[g].data() + k * per, gr.m, gr.n, pc.p, opt,
                                           want.data(), &ps)
                          .ok());
          EXPECT_EQ(ps.used, *route);
          const Err e = CompareSlice(got, k * per, want);
          worst = std::max(worst, e.rel_l2);
          worst_cos = std::min(worst_cos, e.cosine);
        }
      }
      std::printf("  p=%5.2f %-15s rel. L2 vs float64 %.3g (cosine %.8f), residual %.3g\n", pc.p,
                  kernels::PsiMethodName(*route), worst, worst_cos, *res);
      const double tol = tf32 ? 2e-2 : 1e-4;
      EXPECT_LE(worst, tol) << "p=" << pc.p << " " << pc.method << " tf32=" << tf32;
      if (*route == kernels::PsiMethod::kCoupledNewton) {
        EXPECT_LT(*res, tf32 ? 1e-2 : 1e-4);
      }
    }
  }
}

// More matrices of one size than half a grid dimension (32767): the coupled Newton iteration
// symmetrizes two batches of them per step.
TEST(BatchedPsiTest, CoupledNewtonOnFortyThousandMatrices) {
  SKIP_WITHOUT_GPU();
  const PsiGroup g{4, 4, 40000};
  auto psi = BatchedPsi::Create({g}, nullptr, false);
  ASSERT_TRUE(psi.ok()) << psi.status().ToString();
  const size_t per = size_t(g.m) * g.n;
  std::vector<float> f;
  for (int k = 0; k < g.count; ++k) {
    for (double x : WithSingularValues(g.m, g.n, 0.5, 2.0, 7 + k)) f.push_back(float(x));
  }
  gputest::Dev<float> din(f), dout(f.size());
  kernels::PsiOptions opt;
  opt.method = kernels::PsiMethod::kCoupledNewton;
  auto route = (*psi)->Run({din.p}, {dout.p}, 0.5, opt, true);
  ASSERT_TRUE(route.ok()) << route.status().ToString();
  ASSERT_EQ(*route, kernels::PsiMethod::kCoupledNewton);
  const auto got = dout.Get();
  std::vector<int> check;  // every 997th matrix and the last (past 32767 both)
  for (int k = 0; k < g.count; k += 997) check.push_back(k);
  check.push_back(g.count - 1);
  double worst = 0;
  for (int k : check) {
    std::vector<double> host(f.begin() + k * per, f.begin() + (k + 1) * per), want(per);
    kernels::PsiStats ps;
    ASSERT_TRUE(kernels::Psi<double>(host.data(), g.m, g.n, 0.5, opt, want.data(), &ps).ok());
    worst = std::max(worst, CompareSlice(got, k * per, want).rel_l2);
  }
  EXPECT_LE(worst, 1e-4);
}

}  // namespace
}  // namespace ablate::kernels::cuda
