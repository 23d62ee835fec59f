// The SageBwd emulator against a literal float64 transcription of kernels/ALGORITHMS.md §1.2 and the
// attention_cpu.h contract. The transcription shares no code with the emulator and is written for
// reading, not speed: whole-group quantization, integer products summed in double (exact), and a
// backward that visits every block, fully masked ones included (they must contribute nothing).
// It pins down the quantization groups (including K / V groups of kv_group keys, the forward's
// K tile, against the backward's bkv-key blocks), scales and rounding, which accuracy against
// exact attention alone cannot tell apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ablate/bf16.h"
#include "attention/attention_cpu.h"
#include "attention_test_util.h"

namespace ablate::kernels {
namespace {

using Vec = std::vector<double>;

// psi over one group: integers in [-127, 127] and the scale.
struct Quantized {
  Vec x;
  double scale;
};

Quantized Psi(const Vec& x) {
  double max_abs = 0;
  for (double e : x) max_abs = std::max(max_abs, std::fabs(e));
  double s = max_abs / 127;
  if (s == 0) s = 1;
  Quantized out{Vec(x.size()), s};
  for (size_t i = 0; i < x.size(); ++i) {
    out.x[i] = std::clamp(std::nearbyint(x[i] / s), -127.0, 127.0);
  }
  return out;
}

// Rows [r0, r0 + n) of an (N, D) matrix, minus shift (D) when given.
Vec Rows(const double* x, int r0, int n, int D, const Vec* shift) {
  Vec out(size_t(n) * D);
  for (int r = 0; r < n; ++r) {
    for (int d = 0; d < D; ++d) {
      out[r * D + d] = x[(r0 + r) * D + d] - (shift ? (*shift)[d] : 0.0);
    }
  }
  return out;
}

struct HeadResult {
  Vec o, lse, dq, dk, dv;
};

HeadResult LiteralHead(int N, int D, bool causal, const AttnOptions& opt, const double* q,
                       const double* k, const double* v, const double* dout) {
  const double tau = 1.0 / std::sqrt(double(D));
  const int bq = opt.bq, bkv = opt.bkv;
  // K and V are quantized in groups of kvg keys, which are also the forward's K tiles; the
  // backward's blocks stay bkv keys.
  const int kvg = opt.kv_group == 0 ? bkv : opt.kv_group;
  const int ntq = (N + bq - 1) / bq, ntk = (N + bkv - 1) / bkv, ngk = (N + kvg - 1) / kvg;
  auto q_rows = [&](int i) { return std::min(bq, N - i * bq); };
  auto k_rows = [&](int j) { return std::min(bkv, N - j * bkv); };
  auto g_rows = [&](int g) { return std::min(kvg, N - g * kvg); };
  auto visible = [&](int r, int c) { return !causal || c <= r; };

  Vec kbar(D, 0.0);
  if (opt.smooth_k) {
    for (int n = 0; n < N; ++n) {
      for (int d = 0; d < D; ++d) kbar[d] += k[n * D + d];
    }
    for (double& e : kbar) e /= N;
  }
  const Vec ks = Rows(k, 0, N, D, &kbar);  // K - kbar

  std::vector<Vec> mu(ntq, Vec(D, 0.0));
  std::vector<Quantized> qh(ntq), doh(ntq), kh(ngk), vh(ngk);
  for (int i = 0; i < ntq; ++i) {
    if (opt.smooth_q) {
      for (int r = 0; r < q_rows(i); ++r) {
        for (int d = 0; d < D; ++d) mu[i][d] += q[(i * bq + r) * D + d];
      }
      for (double& e : mu[i]) e /= q_rows(i);
    }
    qh[i] = Psi(Rows(q, i * bq, q_rows(i), D, &mu[i]));
    doh[i] = Psi(Rows(dout, i * bq, q_rows(i), D, nullptr));
  }
  for (int g = 0; g < ngk; ++g) {
    kh[g] = Psi(Rows(ks.data(), g * kvg, g_rows(g), D, nullptr));
    vh[g] = Psi(Rows(v, g * kvg, g_rows(g), D, nullptr));
  }
  // Code d of key c's K^ / V^ row, and that row's scale.
  auto khat = [&](int c, int d) { return kh[c / kvg].x[(c % kvg) * D + d]; };
  auto vhat = [&](int c, int d) { return vh[c / kvg].x[(c % kvg) * D + d]; };
  auto sk = [&](int c) { return kh[c / kvg].scale; };
  auto sv = [&](int c) { return vh[c / kvg].scale; };
  // Logit of query r (row rr of Q tile i) and key c.
  auto logit = [&](int i, int rr, int c) {
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += qh[i].x[rr * D + d] * khat(c, d);
    double s = tau * qh[i].scale * sk(c) * dot;
    if (opt.smooth_q) {
      double bias = 0;
      for (int d = 0; d < D; ++d) bias += mu[i][d] * ks[c * D + d];
      s += tau * bias;
    }
    return s;
  };

  HeadResult out{Vec(N * D, 0.0), Vec(N), Vec(N * D, 0.0), Vec(N * D, 0.0), Vec(N * D, 0.0)};
  // Forward: online softmax over K tiles (= K / V groups) in ascending order, P~ quantized per
  // row and block.
  for (int r = 0; r < N; ++r) {
    const int i = r / bq, rr = r % bq;
    double m = -std::numeric_limits<double>::infinity(), l = 0;
    Vec acc(D, 0.0);
    for (int j = 0; j < ngk; ++j) {
      Vec s, pt;
      std::vector<int> cols;  // keys
      for (int cc = 0; cc < g_rows(j); ++cc) {
        if (visible(r, j * kvg + cc)) {
          cols.push_back(j * kvg + cc);
          s.push_back(logit(i, rr, j * kvg + cc));
        }
      }
      if (cols.empty()) continue;
      const double m_new = std::max(m, *std::max_element(s.begin(), s.end()));
      for (double e : s) pt.push_back(std::exp(e - m_new));
      double sp = *std::max_element(pt.begin(), pt.end()) / 127;
      if (sp == 0) sp = 1;
      const double alpha = std::exp(m - m_new);
      double sum_pt = 0;
      for (double e : pt) sum_pt += e;
      for (int d = 0; d < D; ++d) {
        double dot = 0;
        for (size_t x = 0; x < cols.size(); ++x) {
          dot += std::nearbyint(pt[x] / sp) * vhat(cols[x], d);
        }
        acc[d] = alpha * acc[d] + sp * vh[j].scale * dot;
      }
      l = alpha * l + sum_pt;
      m = m_new;
    }
    for (int d = 0; d < D; ++d) out.o[r * D + d] = acc[d] / l;
    out.lse[r] = m + std::log(l);
  }

  // Backward, block by block.
  Vec drow(N, 0.0);
  for (int r = 0; r < N; ++r) {
    for (int d = 0; d < D; ++d) drow[r] += dout[r * D + d] * out.o[r * D + d];
  }
  for (int i = 0; i < ntq; ++i) {
    for (int j = 0; j < ntk; ++j) {
      const int nr = q_rows(i), nc = k_rows(j);
      Vec p(nr * nc, 0.0), ds(nr * nc, 0.0);
      for (int rr = 0; rr < nr; ++rr) {
        const int r = i * bq + rr;
        for (int cc = 0; cc < nc; ++cc) {
          const int c = j * bkv + cc;
          if (!visible(r, c)) continue;
          const double pv = std::exp(logit(i, rr, c) - out.lse[r]);
          double dp = 0;
          if (opt.int8_dp) {
            for (int d = 0; d < D; ++d) dp += doh[i].x[rr * D + d] * vhat(c, d);
            dp *= doh[i].scale * sv(c);
          } else {
            for (int d = 0; d < D; ++d) {
              dp += double(RoundToBf16(dout[r * D + d])) * double(RoundToBf16(v[c * D + d]));
            }
          }
          p[rr * nc + cc] = pv;
          ds[rr * nc + cc] = pv * (dp - drow[r]);
        }
      }
      // dV: P with one scale per key column, dO^ per Q tile.
      for (int cc = 0; cc < nc; ++cc) {
        Vec col(nr);
        for (int rr = 0; rr < nr; ++rr) col[rr] = p[rr * nc + cc];
        const Quantized pc = Psi(col);
        for (int d = 0; d < D; ++d) {
          double dot = 0;
          for (int rr = 0; rr < nr; ++rr) dot += pc.x[rr] * doh[i].x[rr * D + d];
          out.dv[(j * bkv + cc) * D + d] += pc.scale * doh[i].scale * dot;
        }
      }
      // dQ: dS with one scale per query row; K^ per group; plus, with dq_kmean_correction, the
      // K-smoothing term.
      for (int rr = 0; rr < nr; ++rr) {
        const Vec row(ds.begin() + rr * nc, ds.begin() + (rr + 1) * nc);
        const Quantized dr = Psi(row);
        double rowsum = 0;
        for (double e : row) rowsum += e;
        for (int d = 0; d < D; ++d) {
          double dot = 0;
          for (int cc = 0; cc < nc; ++cc) dot += dr.x[cc] * khat(j * bkv + cc, d);
          out.dq[(i * bq + rr) * D + d] += tau * dr.scale * sk(j * bkv) * dot +
                                           (opt.dq_kmean_correction ? tau * rowsum * kbar[d] : 0.0);
        }
      }
      // dK: dS with one scale per key column; Q^ per Q tile; plus the Q-smoothing term.
      for (int cc = 0; cc < nc; ++cc) {
        Vec col(nr);
        for (int rr = 0; rr < nr; ++rr) col[rr] = ds[rr * nc + cc];
        const Quantized dc = Psi(col);
        double colsum = 0;
        for (double e : col) colsum += e;
        for (int d = 0; d < D; ++d) {
          double dot = 0;
          for (int rr = 0; rr < nr; ++rr) dot += dc.x[rr] * qh[i].x[rr * D + d];
          out.dk[(j * bkv + cc) * D + d] +=
              tau * dc.scale * qh[i].scale * dot + tau * colsum * mu[i][d];
        }
      }
    }
  }
  return out;
}

struct LiteralCase {
  int bq, bkv;
  bool causal, smooth_k, smooth_q, int8_dp;
  int kv_group = 0;
  bool dq_correction = false;
};

class SageLiteralTest : public ::testing::TestWithParam<LiteralCase> {};

TEST_P(SageLiteralTest, EmulatorMatchesLiteralTranscription) {
  const LiteralCase c = GetParam();
  const AttnShape s{.B = 1, .H = 2, .N = 77, .D = 16, .causal = c.causal};
  AttnOptions opt;
  opt.bq = c.bq;
  opt.bkv = c.bkv;
  opt.smooth_k = c.smooth_k;
  opt.smooth_q = c.smooth_q;
  opt.int8_dp = c.int8_dp;
  opt.kv_group = c.kv_group;
  opt.dq_kmean_correction = c.dq_correction;
  testing::Inputs in = testing::MakeInputs(s, 1.0, 2000 + c.bq);
  for (double& e : in.k) e += 0.7;  // a key mean for K-smoothing to remove
  for (double& e : in.q) e -= 0.4;  // a query mean for Q-smoothing to remove
  const testing::Result emu = testing::RunSage<double>(in, opt);
  const int64_t nd = int64_t(s.N) * s.D;
  for (int bh = 0; bh < s.B * s.H; ++bh) {
    const HeadResult lit =
        LiteralHead(s.N, s.D, s.causal, opt, in.q.data() + bh * nd, in.k.data() + bh * nd,
                    in.v.data() + bh * nd, in.dout.data() + bh * nd);
    auto check = [&](const char* name, const Vec& want, const Vec& got, int64_t off) {
      const ErrorStats e = CompareTensors(got.data() + off, want.data(), int64_t(want.size()));
      EXPECT_LT(e.rel_l2, 1e-12) << name << " head " << bh;
    };
    check("o", lit.o, emu.o, bh * nd);
    check("lse", lit.lse, emu.lse, int64_t(bh) * s.N);
    check("dq", lit.dq, emu.dq, bh * nd);
    check("dk", lit.dk, emu.dk, bh * nd);
    check("dv", lit.dv, emu.dv, bh * nd);
  }
}

INSTANTIATE_TEST_SUITE_P(Options, SageLiteralTest,
                         ::testing::Values(LiteralCase{32, 16, true, true, false, false},
                                           LiteralCase{32, 16, false, true, false, false},
                                           LiteralCase{16, 32, true, true, false, false},
                                           LiteralCase{77, 5, true, true, false, false},
                                           LiteralCase{32, 16, true, false, false, false},
                                           LiteralCase{32, 16, true, true, true, false},
                                           LiteralCase{16, 32, false, false, true, false},
                                           LiteralCase{32, 16, true, true, false, true},
                                           LiteralCase{16, 8, true, true, true, true},
                                           LiteralCase{32, 16, true, true, false, false, 32},
                                           LiteralCase{32, 16, false, true, false, true, 32},
                                           LiteralCase{16, 8, true, true, true, true, 24},
                                           LiteralCase{32, 16, true, true, false, false, 0, true},
                                           LiteralCase{16, 8, true, true, true, true, 24, true}),
                         [](const auto& info) {
                           const LiteralCase& c = info.param;
                           return "bq" + std::to_string(c.bq) + "_bkv" + std::to_string(c.bkv) +
                                  (c.causal ? "_causal" : "_full") + (c.smooth_k ? "_sk" : "") +
                                  (c.smooth_q ? "_sq" : "") + (c.int8_dp ? "_int8dp" : "") +
                                  (c.kv_group ? "_kvg" + std::to_string(c.kv_group) : "") +
                                  (c.dq_correction ? "_dqcorr" : "");
                         });

}  // namespace
}  // namespace ablate::kernels
