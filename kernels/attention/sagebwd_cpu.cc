// SageBwd emulator: the INT8 attention kernel of kernels/ALGORITHMS.md §1.2, forward and backward, in T.
//
// Tile by tile it quantizes exactly where the kernel does (see attention_cpu.h for the groups) and
// forms every integer product in int32, which is exact for any tile size, before scaling it into a
// T accumulator; for a given T it differs from the kernel only in the order of the T accumulations.
// The code follows the kernel's loop structure (Q tile outer, K tiles ascending inner, online
// softmax) so the two read side by side.
//
// Quantized values (int8 range [-127, 127]) are stored as int16 and every integer product is
// written as a dot product over contiguous memory, which compiles to SSE2's 16-bit multiply-add
// with int32 sums (pmaddwd); products that contract over keys or queries read transposed copies
// (K^T, V^T, Q^T, dO^T: (D, N)) or transposed blocks.
//
// Parallelism: the forward runs one task per (b, h, Q tile) after a per-(b, h) pass that quantizes
// K and V; the backward runs one task per (b, h), which owns its dQ, dK and dV. No task shares an
// accumulator, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "ablate/bf16.h"
#include "attention/attention_cpu.h"

namespace ablate::kernels {
namespace {

using QInt = int16_t;  // holds one int8 quantized value

// psi's scale for a group whose largest magnitude is max_abs; the all-zero guard makes X^ = 0.
template <typename T>
T GroupScale(T max_abs) {
  const T s = max_abs / T(127);
  return s == T(0) ? T(1) : s;
}

template <typename T>
QInt Quantize(T x, T scale) {
  const T r = RoundHalfEven(x / scale);
  return static_cast<QInt>(std::clamp(r, T(-127), T(127)));
}

// Quantizes the (rows x d) group x - shift (shift: (d) or null) into out; returns its scale.
template <typename T>
T QuantizeGroup(const T* x, const T* shift, int rows, int d, QInt* out) {
  T max_abs = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < d; ++c) {
      const T val = shift ? x[r * d + c] - shift[c] : x[r * d + c];
      max_abs = std::max(max_abs, std::fabs(val));
    }
  }
  const T scale = GroupScale(max_abs);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < d; ++c) {
      const T val = shift ? x[r * d + c] - shift[c] : x[r * d + c];
      out[r * d + c] = Quantize(val, scale);
    }
  }
  return scale;
}

// mean[c] = mean of x[r, c] over the rows (summed in row order).
template <typename T>
void RowMean(const T* x, int rows, int d, T* mean) {
  std::fill(mean, mean + d, T(0));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < d; ++c) mean[c] += x[r * d + c];
  }
  for (int c = 0; c < d; ++c) mean[c] /= T(rows);
}

// xt (cols x rows) = transpose of x (rows x cols).
void Transpose(const QInt* x, int rows, int cols, QInt* xt) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) xt[int64_t(c) * rows + r] = x[int64_t(r) * cols + c];
  }
}

inline int32_t DotI16(const QInt* a, const QInt* b, int n) {
  int32_t acc = 0;
  for (int i = 0; i < n; ++i) acc += int32_t(a[i]) * int32_t(b[i]);
  return acc;
}

template <typename T>
T Dot(const T* a, const T* b, int n) {
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

int KvGroup(const AttnOptions& opt) { return opt.kv_group == 0 ? opt.bkv : opt.kv_group; }

void CheckOptions(const AttnShape& s, const AttnOptions& opt) {
  if (opt.bq < 1 || opt.bkv < 1 || s.N < 1 || s.D < 1 || opt.kv_group < 0 ||
      KvGroup(opt) % opt.bkv != 0) {
    std::fprintf(stderr,
                 "ablate: SageBwd emulator: bad shape or tiles (N=%d D=%d bq=%d bkv=%d "
                 "kv_group=%d: a multiple of bkv or 0)\n",
                 s.N, s.D, opt.bq, opt.bkv, opt.kv_group);
    std::abort();
  }
}

// x, rounded to bf16 when `round` (the ds_bf16 products' operands).
template <typename T>
T Bf16If(bool round, T x) {
  return round ? T(RoundToBf16(x)) : x;
}

// Tiles of one pass: the forward walks K tiles of kvg keys (forward = true), the backward blocks
// of bkv keys; both read the K / V scales of kvg-key groups.
template <typename T>
struct Geometry {
  int N, D, bq, bkv, kvg, ntq, ntk, nkg;
  bool causal;
  T tau;
  Geometry(const AttnShape& s, const AttnOptions& opt, bool forward)
      : N(s.N), D(s.D), bq(opt.bq), bkv(forward ? KvGroup(opt) : opt.bkv), kvg(KvGroup(opt)),
        causal(s.causal) {
    ntq = (N + bq - 1) / bq;
    ntk = (N + bkv - 1) / bkv;
    nkg = (N + kvg - 1) / kvg;
    tau = T(1) / std::sqrt(T(D));
  }
  int QRows(int i) const { return std::min(bq, N - i * bq); }
  int KRows(int j) const { return std::min(bkv, N - j * bkv); }
  int GroupOf(int j) const { return j * bkv / kvg; }  // the K / V group of K tile j
  int GroupRows(int gi) const { return std::min(kvg, N - gi * kvg); }
  // K tiles that Q tile i visits are 0..LastKTile(i): causal skips tiles entirely above the
  // diagonal (first key after the tile's last query).
  int LastKTile(int i) const {
    return causal ? std::min(ntk - 1, (i * bq + QRows(i) - 1) / bkv) : ntk - 1;
  }
  // Keys of K tile j visible to query row gr (causal: keys <= gr).
  int VisibleKeys(int gr, int j) const {
    return causal ? std::clamp(gr - j * bkv + 1, 0, KRows(j)) : KRows(j);
  }
};

// K and V of one (b, h), quantized per kvg-key group, plus the K-smoothing mean.
template <typename T>
struct QuantKV {
  const T *k = nullptr, *v = nullptr;  // this head's K and V (N, D), for the exact products
  std::vector<T> kbar;         // (D), zeros when !smooth_k
  std::vector<QInt> kh, vh;    // (N, D) psi(K - kbar), psi(V), group by group
  std::vector<QInt> kht, vht;  // (D, N) their transposes
  std::vector<T> sk, sv;       // (groups)
};

// kbar: (D), zeros when K-smoothing is off.
template <typename T>
void QuantizeKV(const Geometry<T>& g, const T* k, const T* v, const T* kbar, bool smooth_k,
                QuantKV<T>* out) {
  const int64_t nd = int64_t(g.N) * g.D;
  out->k = k;
  out->v = v;
  out->kbar.assign(kbar, kbar + g.D);
  out->kh.resize(nd);
  out->vh.resize(nd);
  out->kht.resize(nd);
  out->vht.resize(nd);
  out->sk.resize(g.nkg);
  out->sv.resize(g.nkg);
  for (int gi = 0; gi < g.nkg; ++gi) {
    const int64_t off = int64_t(gi) * g.kvg * g.D;
    out->sk[gi] = QuantizeGroup(k + off, smooth_k ? kbar : nullptr, g.GroupRows(gi), g.D,
                                out->kh.data() + off);
    out->sv[gi] = QuantizeGroup(v + off, static_cast<const T*>(nullptr), g.GroupRows(gi), g.D,
                                out->vh.data() + off);
  }
  Transpose(out->kh.data(), g.N, g.D, out->kht.data());
  Transpose(out->vh.data(), g.N, g.D, out->vht.data());
}

// Quantizes Q tile i into qh_tile (its rows x D) and returns the scale; mu (D) receives the tile
// mean when smooth_q, else zeros.
template <typename T>
T QuantizeQTile(const Geometry<T>& g, bool smooth_q, const T* q, int i, QInt* qh_tile, T* mu) {
  const T* qt = q + int64_t(i) * g.bq * g.D;
  if (smooth_q) {
    RowMean(qt, g.QRows(i), g.D, mu);
  } else {
    std::fill(mu, mu + g.D, T(0));
  }
  return QuantizeGroup(qt, smooth_q ? mu : static_cast<const T*>(nullptr), g.QRows(i), g.D,
                       qh_tile);
}

// Q-smoothing bias of K tile j: bias[c] = tau * mu . (K_c - kbar), full precision.
template <typename T>
void BlockBias(const Geometry<T>& g, int j, const T* k, const T* kbar, const T* mu, T* bias) {
  for (int c = 0; c < g.KRows(j); ++c) {
    const T* kc = k + int64_t(j * g.bkv + c) * g.D;
    T acc = 0;
    for (int d = 0; d < g.D; ++d) acc += mu[d] * (kc[d] - kbar[d]);
    bias[c] = g.tau * acc;
  }
}

// Logits of block (Q tile i, K tile j): s (nr x nc), -inf where causally masked.
//   S = (tau * sQ_i * sK_j) * (Q^_i K^_j^T)  [+ bias_c when Q-smoothing]
// The forward and the backward call this same function, so the backward sees the forward's S.
// qh_tile: Q^_i (nr x D); bias: (nc) from BlockBias, or null.
// exact (int8_products without kSageS): tau (Q_i - mu) (K_j - kbar)^T from q_tile (this tile's
// rows of Q), mu and kv.k instead.
template <typename T>
void BlockLogits(const Geometry<T>& g, int i, int j, const QInt* qh_tile, T sq,
                 const QuantKV<T>& kv, const T* bias, T* s, bool exact = false,
                 const T* q_tile = nullptr, const T* mu = nullptr) {
  const int r0 = i * g.bq, c0 = j * g.bkv, nr = g.QRows(i), nc = g.KRows(j), D = g.D;
  const T a = g.tau * sq * kv.sk[g.GroupOf(j)];
  const T inf = std::numeric_limits<T>::infinity();
  for (int r = 0; r < nr; ++r) {
    const QInt* qr = qh_tile + int64_t(r) * D;
    T* sr = s + int64_t(r) * nc;
    const int nvalid = g.VisibleKeys(r0 + r, j);
    for (int c = 0; c < nvalid; ++c) {
      T x;
      if (exact) {
        const T* qx = q_tile + int64_t(r) * D;
        const T* kx = kv.k + int64_t(c0 + c) * D;
        T acc = 0;
        for (int d = 0; d < D; ++d) acc += (qx[d] - mu[d]) * (kx[d] - kv.kbar[d]);
        x = g.tau * acc;
      } else {
        x = a * T(DotI16(qr, kv.kh.data() + int64_t(c0 + c) * D, D));
      }
      sr[c] = bias ? x + bias[c] : x;
    }
    std::fill(sr + nvalid, sr + nc, -inf);
  }
}

// One forward task: Q tile i of one (b, h). q, k, o: this head's (N, D); lse: its (N).
template <typename T>
void ForwardQTile(const Geometry<T>& g, const AttnOptions& opt, const T* q, const T* k,
                  const QuantKV<T>& kv, int i, T* o, T* lse) {
  const int N = g.N, D = g.D, r0 = i * g.bq, nr = g.QRows(i);
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<QInt> qh(int64_t(nr) * D), ph(g.bkv);
  std::vector<T> mu(D);
  const T sq = QuantizeQTile(g, opt.smooth_q, q, i, qh.data(), mu.data());

  std::vector<T> s(int64_t(nr) * g.bkv), p(g.bkv), bias(g.bkv), m(nr, -inf), l(nr, T(0));
  std::vector<T> acc(int64_t(nr) * D, T(0));
  for (int j = 0; j <= g.LastKTile(i); ++j) {
    const int c0 = j * g.bkv, nc = g.KRows(j);
    if (opt.smooth_q) BlockBias(g, j, k, kv.kbar.data(), mu.data(), bias.data());
    BlockLogits(g, i, j, qh.data(), sq, kv, opt.smooth_q ? bias.data() : nullptr, s.data(),
                !(opt.int8_products & kSageS), q + int64_t(r0) * D, mu.data());
    for (int r = 0; r < nr; ++r) {
      const T* sr = s.data() + int64_t(r) * nc;
      const int nvalid = g.VisibleKeys(r0 + r, j);
      if (nvalid == 0) continue;  // P~ row is all zero: nothing to add, nothing to rescale
      T rowmax = -inf;
      for (int c = 0; c < nvalid; ++c) rowmax = std::max(rowmax, sr[c]);
      const T m_new = std::max(m[r], rowmax);
      T pmax = 0, rowsum = 0;
      for (int c = 0; c < nvalid; ++c) {
        p[c] = std::exp(sr[c] - m_new);
        pmax = std::max(pmax, p[c]);
        rowsum += p[c];
      }
      // pmax == exp(rowmax - m_new): the kernel's per-row scale of P~.
      const T sp = GroupScale(pmax);
      for (int c = 0; c < nvalid; ++c) ph[c] = Quantize(p[c], sp);
      const T alpha = std::exp(m[r] - m_new);  // 0 on the first visible tile
      const T coef = sp * kv.sv[g.GroupOf(j)];
      T* ar = acc.data() + int64_t(r) * D;
      if (opt.int8_products & kSagePV) {
        for (int d = 0; d < D; ++d) {
          const int32_t pv = DotI16(ph.data(), kv.vht.data() + int64_t(d) * N + c0, nvalid);
          ar[d] = ar[d] * alpha + coef * T(pv);
        }
      } else {  // exact: P~ V in T
        for (int d = 0; d < D; ++d) ar[d] *= alpha;
        for (int c = 0; c < nvalid; ++c) {
          const T* vr = kv.v + int64_t(c0 + c) * D;
          for (int d = 0; d < D; ++d) ar[d] += p[c] * vr[d];
        }
      }
      l[r] = l[r] * alpha + rowsum;
      m[r] = m_new;
    }
  }
  for (int r = 0; r < nr; ++r) {
    T* orow = o + int64_t(r0 + r) * D;
    const T* ar = acc.data() + int64_t(r) * D;
    for (int d = 0; d < D; ++d) orow[d] = ar[d] / l[r];
    lse[r0 + r] = m[r] + std::log(l[r]);
  }
}

// The whole backward of one (b, h); every pointer is this head's slice.
template <typename T>
void BackwardHead(const Geometry<T>& g, const AttnOptions& opt, const T* q, const T* k, const T* v,
                  const T* o, const T* do_, const T* lse, const T* kbar, T* dq, T* dk, T* dv,
                  T* dbg_p, T* dbg_ds) {
  const int N = g.N, D = g.D;
  const int64_t nd = int64_t(N) * D;
  const T tau = g.tau;

  QuantKV<T> kv;
  QuantizeKV(g, k, v, kbar, opt.smooth_k, &kv);
  // Q^ and dO^ per Q tile, with transposes for dK = dS^T Q and dV = P^T dO.
  std::vector<T> mu(int64_t(g.ntq) * D), sq(g.ntq), sdo(g.ntq);
  std::vector<QInt> qh(nd), doh(nd), qht(nd), doht(nd);
  for (int i = 0; i < g.ntq; ++i) {
    const int64_t off = int64_t(i) * g.bq * D;
    sq[i] = QuantizeQTile(g, opt.smooth_q, q, i, qh.data() + off, mu.data() + int64_t(i) * D);
    sdo[i] =
        QuantizeGroup(do_ + off, static_cast<const T*>(nullptr), g.QRows(i), D, doh.data() + off);
  }
  Transpose(qh.data(), N, D, qht.data());
  Transpose(doh.data(), N, D, doht.data());
  // bf16 operands of dP = dO V^T (unused when int8_dp).
  std::vector<T> dob, vb;
  if (!opt.int8_dp) {
    dob.resize(nd);
    vb.resize(nd);
    for (int64_t x = 0; x < nd; ++x) {
      dob[x] = T(RoundToBf16(do_[x]));
      vb[x] = T(RoundToBf16(v[x]));
    }
  }
  std::vector<T> drow(N);  // D_i = rowsum(dO o O)
  for (int r = 0; r < N; ++r) drow[r] = Dot(do_ + int64_t(r) * D, o + int64_t(r) * D, D);

  std::fill(dq, dq + nd, T(0));
  std::fill(dk, dk + nd, T(0));
  std::fill(dv, dv + nd, T(0));
  std::vector<T> ds_rowsum(N, T(0));

  const int64_t blk = int64_t(g.bq) * g.bkv;
  std::vector<T> pm(blk), ds(blk);
  std::vector<QInt> qblk(blk);  // a quantized block: P^T, dS^ or dS^T
  std::vector<T> colsum(g.bkv), bias(g.bkv);
  std::vector<T> gscale(blk);  // scales of the finer groups (one per group and column), <= blk
  for (int i = 0; i < g.ntq; ++i) {
    const int r0 = i * g.bq, nr = g.QRows(i);
    const T* mui = opt.smooth_q ? mu.data() + int64_t(i) * D : nullptr;
    for (int j = 0; j <= g.LastKTile(i); ++j) {
      const int c0 = j * g.bkv, nc = g.KRows(j);
      if (mui) BlockBias(g, j, k, kv.kbar.data(), mui, bias.data());
      BlockLogits(g, i, j, qh.data() + int64_t(r0) * D, sq[i], kv, mui ? bias.data() : nullptr,
                  pm.data(), !(opt.int8_products & kSageS), q + int64_t(r0) * D,
                  mu.data() + int64_t(i) * D);
      // P = exp(S - LSE), dP = dO V^T, dS = P o (dP - D_i); masked entries 0.
      const T sdv = sdo[i] * kv.sv[g.GroupOf(j)];
      for (int r = 0; r < nr; ++r) {
        const int gr = r0 + r, nvalid = g.VisibleKeys(gr, j);
        T* pr = pm.data() + int64_t(r) * nc;
        T* dsr = ds.data() + int64_t(r) * nc;
        for (int c = 0; c < nvalid; ++c) {
          const int64_t gc = c0 + c;
          pr[c] = std::exp(pr[c] - lse[gr]);
          const T dp = !opt.int8_dp ? Dot(dob.data() + int64_t(gr) * D, vb.data() + gc * D, D)
                       : (opt.int8_products & kSageDP)
                           ? sdv * T(DotI16(doh.data() + int64_t(gr) * D, kv.vh.data() + gc * D, D))
                           : Dot(do_ + int64_t(gr) * D, v + gc * D, D);
          dsr[c] = pr[c] * (dp - drow[gr]);
        }
        std::fill(pr + nvalid, pr + nc, T(0));
        std::fill(dsr + nvalid, dsr + nc, T(0));
        if (dbg_p) {
          std::copy(pr, pr + nc, dbg_p + int64_t(gr) * N + c0);
          std::copy(dsr, dsr + nc, dbg_ds + int64_t(gr) * N + c0);
        }
      }

      // dV_j += (P^, one scale per key column)^T (dO^_i, one scale per Q tile). P >= 0 and masked
      // entries are 0, so the column max over all rows is the max over the valid ones.
      // (p_col_rows: one scale per key column and group of that many rows.)
      const int pg = opt.p_col_rows > 0 ? std::min(opt.p_col_rows, nr) : nr;
      for (int ra = 0; ra < nr; ra += pg) {
        const int rb = std::min(nr, ra + pg), gi = ra / pg;
        for (int c = 0; c < nc; ++c) {
          T m = 0;
          for (int r = ra; r < rb; ++r) m = std::max(m, pm[int64_t(r) * nc + c]);
          gscale[int64_t(gi) * nc + c] = GroupScale(m);
          for (int r = ra; r < rb; ++r) {
            qblk[int64_t(c) * nr + r] =
                Quantize(pm[int64_t(r) * nc + c], gscale[int64_t(gi) * nc + c]);
          }
        }
      }
      for (int c = 0; c < nc; ++c) {
        const QInt* pc = qblk.data() + int64_t(c) * nr;
        T* dvr = dv + int64_t(c0 + c) * D;
        if (opt.int8_products & kSageDV) {
          for (int ra = 0; ra < nr; ra += pg) {
            const int len = std::min(nr, ra + pg) - ra;
            const T coef = gscale[int64_t(ra / pg) * nc + c] * sdo[i];
            for (int d = 0; d < D; ++d) {
              dvr[d] += coef * T(DotI16(pc + ra, doht.data() + int64_t(d) * N + r0 + ra, len));
            }
          }
        } else {  // exact: P^T dO in T
          for (int r = 0; r < nr; ++r) {
            const T pr = pm[int64_t(r) * nc + c];
            const T* dor = do_ + int64_t(r0 + r) * D;
            for (int d = 0; d < D; ++d) dvr[d] += pr * dor[d];
          }
        }
      }

      // dQ_i += tau * (dS^, one scale per query row) K^_j sK_j.
      for (int r = 0; r < nr; ++r) {
        const T* dsr = ds.data() + int64_t(r) * nc;
        T rowsum = 0;
        for (int c = 0; c < nc; ++c) rowsum += dsr[c];
        ds_rowsum[r0 + r] += rowsum;
        // One scale per group of ds_row_keys keys (default: the block's nc).
        const int kg = opt.ds_row_keys > 0 ? std::min(opt.ds_row_keys, nc) : nc;
        QInt* dsq = qblk.data();
        for (int ca = 0; ca < nc; ca += kg) {
          const int cb = std::min(nc, ca + kg);
          T max_abs = 0;
          for (int c = ca; c < cb; ++c) max_abs = std::max(max_abs, std::fabs(dsr[c]));
          gscale[ca / kg] = GroupScale(max_abs);
          for (int c = ca; c < cb; ++c) dsq[c] = Quantize(dsr[c], gscale[ca / kg]);
        }
        T* dqr = dq + int64_t(r0 + r) * D;
        if ((opt.int8_products & kSageDQ) && !opt.ds_bf16) {
          for (int ca = 0; ca < nc; ca += kg) {
            const int len = std::min(nc, ca + kg) - ca;
            const T coef = tau * gscale[ca / kg] * kv.sk[g.GroupOf(j)];
            for (int d = 0; d < D; ++d) {
              dqr[d] += coef * T(DotI16(dsq + ca, kv.kht.data() + int64_t(d) * N + c0 + ca, len));
            }
          }
        } else {  // tau dS (K - kbar) in T, or with bf16 operands (the K-smoothing term below
                  // adds kbar back)
          for (int c = 0; c < nc; ++c) {
            const T* kr = k + int64_t(c0 + c) * D;
            const T x = tau * Bf16If(opt.ds_bf16, dsr[c]);
            for (int d = 0; d < D; ++d) dqr[d] += x * Bf16If(opt.ds_bf16, kr[d] - kv.kbar[d]);
          }
        }
      }

      // dK_j += tau * (dS^, one scale per key column)^T Q^_i sQ_i.
      // (ds_col_rows: one scale per key column and group of that many rows.)
      std::fill(colsum.begin(), colsum.begin() + nc, T(0));
      for (int r = 0; r < nr; ++r) {
        for (int c = 0; c < nc; ++c) colsum[c] += ds[int64_t(r) * nc + c];
      }
      const int dg = opt.ds_col_rows > 0 ? std::min(opt.ds_col_rows, nr) : nr;
      for (int ra = 0; ra < nr; ra += dg) {
        const int rb = std::min(nr, ra + dg), gi = ra / dg;
        for (int c = 0; c < nc; ++c) {
          T m = 0;
          for (int r = ra; r < rb; ++r) m = std::max(m, std::fabs(ds[int64_t(r) * nc + c]));
          gscale[int64_t(gi) * nc + c] = GroupScale(m);
          for (int r = ra; r < rb; ++r) {
            qblk[int64_t(c) * nr + r] =
                Quantize(ds[int64_t(r) * nc + c], gscale[int64_t(gi) * nc + c]);
          }
        }
      }
      for (int c = 0; c < nc; ++c) {
        const QInt* dsc = qblk.data() + int64_t(c) * nr;
        T* dkr = dk + int64_t(c0 + c) * D;
        if ((opt.int8_products & kSageDK) && !opt.ds_bf16) {
          for (int ra = 0; ra < nr; ra += dg) {
            const int len = std::min(nr, ra + dg) - ra;
            const T coef = tau * gscale[int64_t(ra / dg) * nc + c] * sq[i];
            for (int d = 0; d < D; ++d) {
              dkr[d] += coef * T(DotI16(dsc + ra, qht.data() + int64_t(d) * N + r0 + ra, len));
            }
          }
        } else {  // tau dS^T (Q - mu) in T, or with bf16 operands (Q-smoothing's term below adds
                  // mu back)
          const T* mq = mu.data() + int64_t(i) * D;
          for (int r = 0; r < nr; ++r) {
            const T x = tau * Bf16If(opt.ds_bf16, ds[int64_t(r) * nc + c]);
            const T* qr = q + int64_t(r0 + r) * D;
            for (int d = 0; d < D; ++d) dkr[d] += x * Bf16If(opt.ds_bf16, qr[d] - mq[d]);
          }
        }
        // Q-smoothing: the quantized product saw Q - mu_Q(i); add back dS^T 1 mu_Q(i).
        if (mui) {
          const T cs = tau * colsum[c];
          for (int d = 0; d < D; ++d) dkr[d] += cs * mui[d];
        }
      }
    }
  }
  // K-smoothing: the quantized product saw K - kbar; add back dS 1 kbar (unquantized dS).
  if (opt.smooth_k && opt.dq_kmean_correction) {
    for (int r = 0; r < N; ++r) {
      const T rs = tau * ds_rowsum[r];
      T* dqr = dq + int64_t(r) * D;
      for (int d = 0; d < D; ++d) dqr[d] += rs * kbar[d];
    }
  }
}

}  // namespace

template <typename T>
void SageForward(const AttnShape& s, const AttnOptions& opt, const T* q, const T* k, const T* v,
                 T* o, SageSaved<T>* saved) {
  CheckOptions(s, opt);
  const Geometry<T> g(s, opt, /*forward=*/true);
  const int BH = s.B * s.H, D = s.D;
  const int64_t nd = int64_t(s.N) * D;
  saved->lse.resize(s.rows());  // every entry is written below
  saved->kmean.assign(int64_t(BH) * D, T(0));

  std::vector<QuantKV<T>> kv(BH);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < BH; ++bh) {
    T* kbar = saved->kmean.data() + int64_t(bh) * D;
    if (opt.smooth_k) RowMean(k + bh * nd, s.N, D, kbar);
    QuantizeKV(g, k + bh * nd, v + bh * nd, kbar, opt.smooth_k, &kv[bh]);
  }
  const int64_t tasks = int64_t(BH) * g.ntq;
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < tasks; ++t) {
    const int bh = static_cast<int>(t / g.ntq), i = static_cast<int>(t % g.ntq);
    ForwardQTile(g, opt, q + bh * nd, k + bh * nd, kv[bh], i, o + bh * nd,
                 saved->lse.data() + int64_t(bh) * s.N);
  }
}

template <typename T>
void SageBackward(const AttnShape& s, const AttnOptions& opt, const T* q, const T* k, const T* v,
                  const T* o, const T* do_, const SageSaved<T>& saved, T* dq, T* dk, T* dv,
                  SageDebug<T>* debug) {
  CheckOptions(s, opt);
  const Geometry<T> g(s, opt, /*forward=*/false);
  const int BH = s.B * s.H;
  const int64_t nd = int64_t(s.N) * s.D, nn = int64_t(s.N) * s.N;
  if (debug) {
    debug->p.assign(BH * nn, T(0));
    debug->ds.assign(BH * nn, T(0));
  }
#pragma omp parallel for schedule(dynamic)
  for (int bh = 0; bh < BH; ++bh) {
    const int64_t off = bh * nd;
    BackwardHead(g, opt, q + off, k + off, v + off, o + off, do_ + off,
                 saved.lse.data() + int64_t(bh) * s.N, saved.kmean.data() + int64_t(bh) * s.D,
                 dq + off, dk + off, dv + off, debug ? debug->p.data() + bh * nn : nullptr,
                 debug ? debug->ds.data() + bh * nn : nullptr);
  }
}

#define ABLATE_INSTANTIATE_SAGE(T)                                                                 \
  template void SageForward<T>(const AttnShape&, const AttnOptions&, const T*, const T*, const T*, \
                               T*, SageSaved<T>*);                                                 \
  template void SageBackward<T>(const AttnShape&, const AttnOptions&, const T*, const T*,          \
                                const T*, const T*, const T*, const SageSaved<T>&, T*, T*, T*,     \
                                SageDebug<T>*);
ABLATE_INSTANTIATE_SAGE(float)
ABLATE_INSTANTIATE_SAGE(double)
#undef ABLATE_INSTANTIATE_SAGE

}  // namespace ablate::kernels
