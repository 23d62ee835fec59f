#include "trainer/probe/probe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "ablate/bf16.h"
#include "attention/attention_cpu.h"
#include "trainer/data/dataset.h"
#include "trainer/data/sampler.h"
#include "trainer/loop/checkpoint.h"
#include "trainer/loop/train_loop.h"
#include "trainer/model/gpt.h"

namespace ablate::trainer::probe {
namespace {

namespace k = ablate::kernels;
using nlohmann::json;

// One attention call's inputs in double (bf16 values for synthetic ones).
struct Inputs {
  k::AttnShape s;
  std::vector<double> q, kk, v, dout;
};

Inputs Synthetic(const k::AttnShape& s, double sigma, uint64_t seed) {
  Inputs in{s, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  auto fill = [&](std::vector<double>* x, double sd) {
    std::normal_distribution<double> nd(0.0, sd);
    x->resize(size_t(s.numel()));
    for (double& e : *x) e = RoundToBf16(nd(rng));
  };
  fill(&in.q, sigma);
  fill(&in.kk, sigma);
  fill(&in.v, 1.0);
  fill(&in.dout, 1.0);
  return in;
}

struct Outputs {
  std::vector<double> o, dq, dk, dv,
      ds;  // ds: (B, H, N, N) before its quantization (sage) or exact
};

Outputs Exact(const Inputs& in) {
  const int64_t n = in.s.numel();
  Outputs e;
  e.o.resize(n);
  e.dq.resize(n);
  e.dk.resize(n);
  e.dv.resize(n);
  std::vector<double> lse(in.s.rows()), p;
  k::FpaForward(in.s, in.q.data(), in.kk.data(), in.v.data(), e.o.data(), lse.data());
  k::FpaBackward(in.s, in.q.data(), in.kk.data(), in.v.data(), e.o.data(), lse.data(),
                 in.dout.data(), e.dq.data(), e.dk.data(), e.dv.data());
  k::FpaIntermediates(in.s, in.q.data(), in.kk.data(), in.v.data(), e.o.data(), lse.data(),
                      in.dout.data(), &p, &e.ds);
  return e;
}

Outputs Sage(const Inputs& in, const k::AttnOptions& opt) {
  const int64_t n = in.s.numel();
  Outputs r;
  r.o.resize(n);
  r.dq.resize(n);
  r.dk.resize(n);
  r.dv.resize(n);
  k::SageSaved<double> saved;
  k::SageDebug<double> dbg;
  k::SageForward(in.s, opt, in.q.data(), in.kk.data(), in.v.data(), r.o.data(), &saved);
  k::SageBackward(in.s, opt, in.q.data(), in.kk.data(), in.v.data(), r.o.data(), in.dout.data(),
                  saved, r.dq.data(), r.dk.data(), r.dv.data(), &dbg);
  r.ds = std::move(dbg.ds);
  return r;
}

double RelL2(const std::vector<double>& x, const std::vector<double>& y) {
  return k::CompareTensors(x.data(), y.data(), int64_t(x.size())).rel_l2;
}

// The four outputs' errors against exact attention (a row's "o", "dq", "dk", "dv").
json OutputErrors(const Outputs& r, const Outputs& e) {
  return {{"o", RelL2(r.o, e.o)},
          {"dq", RelL2(r.dq, e.dq)},
          {"dk", RelL2(r.dk, e.dk)},
          {"dv", RelL2(r.dv, e.dv)}};
}
// Those four as the last cells of a markdown row: " o | dq | dk | dv |".
std::string OutputCells(const json& row) {
  char buf[128];
  std::snprintf(buf, sizeof buf, " %.4f | %.4f | %.4f | %.4f |", row["o"].get<double>(),
                row["dq"].get<double>(), row["dk"].get<double>(), row["dv"].get<double>());
  return buf;
}

// The relative L2 error of dS after its own INT8 rounding in the kernels' two groupings: one scale
// per query row over each `bkv`-key block (the dQ product's operand) and one per key column over
// each `bq`-row block (dK's); scale = max|x| / 127 (1 for an all-zero group), round half to even.
std::pair<double, double> DsRounding(const std::vector<double>& ds, const k::AttnShape& s, int bq,
                                     int bkv) {
  const int N = s.N;
  double err_r = 0, err_c = 0, ref = 0;
  // The squared rounding error of one group of n values x(0..n-1), one scale for all of them.
  const auto group_err = [](int n, const auto& x) {
    double mx = 0, e = 0;
    for (int k = 0; k < n; ++k) mx = std::max(mx, std::fabs(x(k)));
    const double sc = mx > 0 ? mx / 127 : 1;
    for (int k = 0; k < n; ++k) {
      const double d = std::nearbyint(x(k) / sc) * sc - x(k);
      e += d * d;
    }
    return e;
  };
  for (int64_t bh = 0; bh < int64_t(s.B) * s.H; ++bh) {
    const double* m = ds.data() + bh * N * N;
    for (int i0 = 0; i0 < N; i0 += bq) {
      for (int j0 = 0; j0 < N; j0 += bkv) {
        const int i1 = std::min(N, i0 + bq), j1 = std::min(N, j0 + bkv);
        for (int i = i0; i < i1; ++i) {  // row scales (dQ's operand)
          const double* row = m + int64_t(i) * N + j0;
          err_r += group_err(j1 - j0, [&](int k) { return row[k]; });
          for (int j = j0; j < j1; ++j) ref += row[j - j0] * row[j - j0];
        }
        for (int j = j0; j < j1; ++j) {  // column scales (dK's operand)
          err_c += group_err(i1 - i0, [&](int k) { return m[int64_t(i0 + k) * N + j]; });
        }
      }
    }
  }
  if (ref == 0) return {0, 0};
  return {std::sqrt(err_r / ref), std::sqrt(err_c / ref)};
}

double Sd(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) s += v, s2 += v * v;
  const double m = s / double(x.size());
  return std::sqrt(std::max(0.0, s2 / double(x.size()) - m * m));
}

// One row of the sigma table: the emulator against exact attention.
json ErrorRow(const Inputs& in, const k::AttnOptions& opt) {
  const Outputs e = Exact(in), r = Sage(in, opt);
  const auto [ds_r, ds_c] = DsRounding(r.ds, in.s, opt.bq, opt.bkv);
  return {{"sigma_q", Sd(in.q)},
          {"sigma_k", Sd(in.kk)},
          {"o", RelL2(r.o, e.o)},
          {"dq", RelL2(r.dq, e.dq)},
          {"dk", RelL2(r.dk, e.dk)},
          {"dv", RelL2(r.dv, e.dv)},
          {"dq_cos", k::CompareTensors(r.dq.data(), e.dq.data(), int64_t(e.dq.size())).cosine},
          {"ds", RelL2(r.ds, e.ds)},
          {"ds_int8_rows", ds_r},
          {"ds_int8_cols", ds_c}};
}

const char* kSigmaHeader =
    "| %s | sigma_q | sigma_k | O | dQ | dK | dV | dQ cosine | dS (upstream) | dS INT8 rows (dQ) "
    "| dS INT8 cols (dK) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

void PrintSigmaRow(std::ostream& out, const std::string& label, const json& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "| %s | %.2f | %.2f | %.4f | %.4f | %.4f | %.4f | %.6f | %.4f | %.4f | %.4f |\n",
                label.c_str(), r["sigma_q"].get<double>(), r["sigma_k"].get<double>(),
                r["o"].get<double>(), r["dq"].get<double>(), r["dk"].get<double>(),
                r["dv"].get<double>(), r["dq_cos"].get<double>(), r["ds"].get<double>(),
                r["ds_int8_rows"].get<double>(), r["ds_int8_cols"].get<double>());
  out << buf;
}

// The products of the decomposition: one INT8 product at a time, the others exact.
struct Product {
  const char* name;
  uint32_t mask;
  bool int8_dp;
  bool ds_bf16 = false;
};
constexpr Product kProducts[] = {
    {"all INT8 (production)", k::kSageAllProducts, false},
    {"S = Q K^T only", k::kSageS, false},
    {"O = P~ V only", k::kSagePV, false},
    {"dV = P^T dO only", k::kSageDV, false},
    {"dQ = dS K only", k::kSageDQ, false},
    {"dK = dS^T Q only", k::kSageDK, false},
    {"dP = dO V^T only (int8_dp)", k::kSageDP, true},
    {"none (dP in bf16 only)", 0, false},
    {"all, the dS products in bf16 (ds_bf16)", k::kSageAllProducts, false, true},
};

json Decompose(const Inputs& in, const k::AttnOptions& base, const std::string& label,
               std::ostream& out) {
  const Outputs e = Exact(in);
  json rows = json::array();
  out << "\n"
      << label << " (sigma_q " << Sd(in.q) << ", sigma_k " << Sd(in.kk)
      << "): relative L2 error against exact attention\n\n"
      << "| INT8 products | O | dQ | dK | dV |\n|---|---:|---:|---:|---:|\n";
  std::string top_dq, top_dk;
  double max_dq = -1, max_dk = -1;
  for (const Product& p : kProducts) {
    k::AttnOptions opt = base;
    opt.int8_products = p.mask;
    opt.int8_dp = p.int8_dp;
    opt.ds_bf16 = p.ds_bf16;
    const Outputs r = Sage(in, opt);
    json row = OutputErrors(r, e);
    row["products"] = p.name;
    out << "| " << p.name << " |" << OutputCells(row) << "\n";
    // Dominance among the products the configuration quantizes (dP only with int8_dp).
    const bool single =
        p.mask != k::kSageAllProducts && p.mask != 0 && p.int8_dp == base.int8_dp && !p.ds_bf16;
    if (single && row["dq"].get<double>() > max_dq) {
      max_dq = row["dq"].get<double>();
      top_dq = p.name;
    }
    if (single && row["dk"].get<double>() > max_dk) {
      max_dk = row["dk"].get<double>();
      top_dk = p.name;
    }
    rows.push_back(row);
  }
  out << "\nLargest single-product error among the configuration's INT8 products: dQ from \""
      << top_dq << "\", dK from \"" << top_dk << "\".\n";
  return {{"label", label}, {"sigma_q", Sd(in.q)},   {"sigma_k", Sd(in.kk)},
          {"rows", rows},   {"dominant_dq", top_dq}, {"dominant_dk", top_dk}};
}

// granularity: the backward's scale groups made finer, one knob at a time and all together
// (AttnOptions::ds_row_keys, ds_col_rows, p_col_rows), against the kernels' groups.
json Granularity(const k::AttnShape& shape, const k::AttnOptions& base, uint64_t seed,
                 std::ostream& out) {
  struct Variant {
    const char* name;
    int row_keys, col_rows, p_rows;
  };
  const Variant variants[] = {{"the kernels' groups", 0, 0, 0},
                              {"dS row scales per 32 keys (dQ)", 32, 0, 0},
                              {"dS row scales per 16 keys (dQ)", 16, 0, 0},
                              {"dS column scales per 32 rows (dK)", 0, 32, 0},
                              {"dS column scales per 16 rows (dK)", 0, 16, 0},
                              {"P column scales per 16 rows (dV)", 0, 0, 16},
                              {"all three per 16", 16, 16, 16}};
  json rows = json::array();
  char buf[256];
  out << "\n| scale groups | sigma | dQ | dK | dV |\n|---|---:|---:|---:|---:|\n";
  for (double sigma : {1.0, 3.0, 8.0}) {
    const Inputs in = Synthetic(shape, sigma, seed);
    const Outputs e = Exact(in);
    for (const Variant& v : variants) {
      k::AttnOptions opt = base;
      opt.ds_row_keys = v.row_keys;
      opt.ds_col_rows = v.col_rows;
      opt.p_col_rows = v.p_rows;
      const Outputs r = Sage(in, opt);
      json row = {{"groups", v.name},
                  {"sigma", sigma},
                  {"dq", RelL2(r.dq, e.dq)},
                  {"dk", RelL2(r.dk, e.dk)},
                  {"dv", RelL2(r.dv, e.dv)}};
      std::snprintf(buf, sizeof buf, "| %s | %g | %.4f | %.4f | %.4f |\n", v.name, sigma,
                    row["dq"].get<double>(), row["dk"].get<double>(), row["dv"].get<double>());
      out << buf;
      rows.push_back(row);
    }
  }
  return rows;
}

// smoothing: keys that carry a shared offset (one vector added to every key of a head, offset_sd
// x sigma per channel, channel values fixed by the seed), under no smoothing, K-smoothing (without
// and with its dQ correction) and Q+K-smoothing. Exact attention does not see the offset (q . (k
// + b) shifts a row's logits by the same q . b, and dS's rows sum to 0, so dQ = dS (K + b) = dS K),
// but INT8 K does: the offset fills K's scales and crowds out the part that varies between keys,
// which K-smoothing subtracts.
json Smoothing(const k::AttnShape& shape, const k::AttnOptions& base, uint64_t seed,
               std::ostream& out) {
  struct Variant {
    const char* name;
    bool k, q, dq_correction;
  };
  const Variant variants[] = {{"none", false, false, false},
                              {"K", true, false, false},
                              {"K with dQ correction", true, false, true},
                              {"Q+K", true, true, false}};
  json rows = json::array();
  char buf[256];
  out << "\n| key offset (x sigma) | sigma | smoothing | O | dQ | dK | dV |\n"
         "|---:|---:|---|---:|---:|---:|---:|\n";
  for (double sigma : {1.0, 3.0}) {
    for (double offset_sd : {0.0, 1.0, 3.0, 10.0}) {
      Inputs in = Synthetic(shape, sigma, seed);
      std::mt19937_64 rng(seed ^ 0x5eedULL);
      std::normal_distribution<double> nd(0.0, offset_sd * sigma);
      const int64_t rows_per_head = shape.N, d = shape.D;
      for (int64_t bh = 0; bh < int64_t(shape.B) * shape.H; ++bh) {
        std::vector<double> b(static_cast<size_t>(d));
        for (double& x : b) x = nd(rng);
        for (int64_t n = 0; n < rows_per_head; ++n) {
          double* key = in.kk.data() + (bh * rows_per_head + n) * d;
          for (int64_t c = 0; c < d; ++c) key[c] = RoundToBf16(key[c] + b[size_t(c)]);
        }
      }
      const Outputs e = Exact(in);
      for (const Variant& v : variants) {
        k::AttnOptions opt = base;
        opt.smooth_k = v.k;
        opt.smooth_q = v.q;
        opt.dq_kmean_correction = v.dq_correction;
        const Outputs r = Sage(in, opt);
        json row = OutputErrors(r, e);
        row["offset_sd"] = offset_sd;
        row["sigma"] = sigma;
        row["smoothing"] = v.name;
        std::snprintf(buf, sizeof buf, "| %g | %g | %s |", offset_sd, sigma, v.name);
        out << buf << OutputCells(row) << "\n";
        rows.push_back(row);
      }
    }
  }
  return rows;
}

// The probes' model: the checkpoint's weights in a CPU Gpt<float> with `kind` attention.
struct Loaded {
  Dataset data;
  std::vector<float> weights;
};

StatusOr<Loaded> LoadCheckpointAndData(const config::TrialConfig& config, const std::string& path) {
  ABLATE_ASSIGN_OR_RETURN(Checkpoint ck, ReadCheckpoint(path));
  if (ck.sections.empty()) return InvalidArgument(path + ": a checkpoint without weights");
  Loaded l;
  DataConfig dc;
  dc.corpus = config.data.corpus;
  dc.val_fraction = config.data.val_fraction;
  dc.vocab_size = config.data.vocab_size;
  ABLATE_ASSIGN_OR_RETURN(l.data, LoadDataset(dc));
  const std::string& w = ck.sections[0];
  if (w.size() % sizeof(float) != 0) return InvalidArgument(path + ": weights section is torn");
  l.weights.resize(w.size() / sizeof(float));
  std::memcpy(l.weights.data(), w.data(), w.size());
  return l;
}

StatusOr<Gpt<float>> ModelWith(const config::TrialConfig& config, const Loaded& l,
                               const std::string& kind) {
  config::TrialConfig c = config;
  c.attention.kind = kind;
  ABLATE_ASSIGN_OR_RETURN(Gpt<float> m, Gpt<float>::Create(ToModelConfig(c, l.data.vocab_size)));
  if (m.num_params() != l.weights.size()) {
    return InvalidArgument("the checkpoint holds " + std::to_string(l.weights.size()) +
                           " weights, the config's model " + std::to_string(m.num_params()));
  }
  std::copy(l.weights.begin(), l.weights.end(), m.weights());
  return m;
}

Inputs LiveInputs(const Gpt<float>::AttentionInputs& a, int batch) {
  Inputs in;
  in.s = a.shape;
  in.s.B = std::min(a.shape.B, batch);
  const int64_t n = in.s.numel();  // the first sequences lead the (B, H, T, D) tensors
  in.q.assign(a.q, a.q + n);
  in.kk.assign(a.k, a.k + n);
  in.v.assign(a.v, a.v + n);
  in.dout.assign(a.dout, a.dout + n);
  return in;
}

// bias-noise (probe.h).
StatusOr<json> BiasNoise(const config::TrialConfig& config, const Loaded& l,
                         const ProbeOptions& opt, std::ostream& out) {
  if (opt.batches < 4) return InvalidArgument("--probe bias-noise needs at least 4 batches");
  ABLATE_ASSIGN_OR_RETURN(Gpt<float> fpa, ModelWith(config, l, "fpa"));
  ABLATE_ASSIGN_OR_RETURN(Gpt<float> sage, ModelWith(config, l, "sagebwd"));
  ABLATE_ASSIGN_OR_RETURN(BatchSampler sampler,
                          BatchSampler::Create(&l.data.train, config.model.seq_len, opt.seed));
  const int b = config.train.micro_batch, T = config.model.seq_len;
  const size_t P = fpa.num_params();
  std::vector<int32_t> in(size_t(b) * T), tg(size_t(b) * T);
  std::vector<double> sum_g(P, 0.0), sum_d(P, 0.0);
  double sum_g2 = 0, sum_d2 = 0;
  const int M = opt.batches;
  for (int m = 0; m < M; ++m) {
    sampler.Next(b, in.data(), tg.data());
    for (Gpt<float>* model : {&fpa, &sage}) {
      model->ZeroGrad();
      model->Forward(in.data(), tg.data(), b);
      model->Backward(1.0f);
    }
    const float* gf = fpa.grads();
    const float* gs = sage.grads();
    for (size_t i = 0; i < P; ++i) {
      const double g = gf[i], d = double(gs[i]) - double(gf[i]);
      sum_g[i] += g;
      sum_d[i] += d;
      sum_g2 += g * g;
      sum_d2 += d * d;
    }
  }
  // Per micro-batch: tr Var(g) and tr Var(d) (unbiased), |mean g|^2, |mean d|^2.
  double mg2 = 0, md2 = 0;
  for (size_t i = 0; i < P; ++i) {
    mg2 += (sum_g[i] / M) * (sum_g[i] / M);
    md2 += (sum_d[i] / M) * (sum_d[i] / M);
  }
  const double var_g = (sum_g2 - M * mg2) / (M - 1), var_d = (sum_d2 - M * md2) / (M - 1);
  // E|mean d|^2 = |bias|^2 + tr Var(d) / M: the estimate of |bias|^2 without its sampling noise.
  const double bias2 = md2 - var_d / M, bias2_se = 2 * std::sqrt(var_d / M) * std::sqrt(md2) +
                                                   var_d / M;  // rough: the terms' spread
  const double tokens_mb = double(b) * T;
  const bool detectable = bias2 > 2 * bias2_se;
  const double crossover = detectable ? var_g * tokens_mb / bias2 : 0;
  json rows = json::array();
  out << "\nGradient quantization bias against minibatch noise (checkpoint weights, " << M
      << " micro-batches of " << b << " x " << T << " tokens of the training split):\n"
      << "per micro-batch: |mean gradient| " << std::sqrt(mg2) << ", noise sd (tr Var)^1/2 "
      << std::sqrt(var_g) << ", |SageBwd - fpa| per batch " << std::sqrt(sum_d2 / M)
      << ", bias |E[SageBwd - fpa]| "
      << (bias2 > 0 ? std::to_string(std::sqrt(bias2)) : std::string("0 (below its noise)"))
      << "\n\n| tokens per step | noise (sd) | bias | bias / noise |\n|---:|---:|---:|---:|\n";
  std::vector<double> steps;
  for (double t = tokens_mb; t <= 8.5e6; t *= 4) steps.push_back(t);
  steps.push_back(262144);   // the paper's small tokens per step
  steps.push_back(2097152);  // and its large one
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  const double bias = std::sqrt(std::max(0.0, bias2));
  for (double t : steps) {
    const double noise = std::sqrt(var_g * tokens_mb / t);
    rows.push_back({{"tokens_per_step", t}, {"noise", noise}, {"bias", bias}});
    char buf[160];
    std::snprintf(buf, sizeof buf, "| %.0f | %.3g | %.3g | %.3g |\n", t, noise, bias,
                  noise > 0 ? bias / noise : 0.0);
    out << buf;
  }
  if (detectable) {
    out << "\nCrossover: the noise falls to the bias at about " << crossover
        << " tokens per step.\n";
  } else {
    out << "\nThe bias is not separable from its sampling noise with " << M
        << " batches: no crossover below about " << var_g * tokens_mb / std::max(bias2_se, 1e-300)
        << " tokens per step can be claimed.\n";
  }
  return json{{"micro_batches", M},
              {"tokens_per_micro_batch", tokens_mb},
              {"mean_grad_norm", std::sqrt(mg2)},
              {"noise_sd_per_micro_batch", std::sqrt(var_g)},
              {"diff_sd_per_micro_batch", std::sqrt(var_d)},
              {"bias_sq", bias2},
              {"bias_sq_se", bias2_se},
              {"bias_detectable", detectable},
              {"crossover_tokens_per_step", detectable ? json(crossover) : json(nullptr)},
              {"rows", rows}};
}

}  // namespace

StatusOr<config::TrialConfig> ConfigOfCheckpoint(const std::string& path) {
  ABLATE_ASSIGN_OR_RETURN(Checkpoint ck, ReadCheckpoint(path));
  if (!ck.header.contains("config")) return InvalidArgument(path + ": no config in its header");
  return config::ParseTrialConfig(ck.header["config"].dump(), path + " (its config)");
}

StatusOr<json> RunProbes(const config::TrialConfig& config, const ProbeOptions& opt,
                         std::ostream& out) {
  const std::string& w = opt.what;
  if (w != "sigma" && w != "decompose" && w != "granularity" && w != "smoothing" &&
      w != "bias-noise" && w != "all") {
    return InvalidArgument(
        "--probe " + w +
        ": not a probe (sigma, decompose, granularity, smoothing, bias-noise, all)");
  }
  if (w == "bias-noise" && opt.checkpoint.empty()) {
    return InvalidArgument("--probe bias-noise needs a checkpoint (--resume CKPT)");
  }
  const int heads = config.model.heads, d = config.model.d_model / std::max(1, heads);
  k::AttnOptions base;
  base.kind = k::AttnKind::kSageBwd;
  base.smooth_k = config.attention.smooth_k;
  base.smooth_q = config.attention.smooth_q;
  base.dq_kmean_correction = config.attention.dq_correction;
  base = k::SageGpuTiles(base, d);
  const k::AttnShape syn{1, std::max(1, std::min(heads, 4)), config.model.seq_len, d, true};
  json result = {{"shape", {{"B", syn.B}, {"H", syn.H}, {"N", syn.N}, {"D", syn.D}}},
                 {"options",
                  {{"smooth_k", base.smooth_k},
                   {"smooth_q", base.smooth_q},
                   {"dq_correction", base.dq_kmean_correction},
                   {"bq", base.bq},
                   {"bkv", base.bkv},
                   {"kv_group", base.kv_group}}}};
  out << "SageBwd emulator (double, the GPU kernels' tiles: " << base.bq << " x " << base.bkv
      << ", K/V groups of " << base.kv_group << "; K-smoothing " << (base.smooth_k ? "on" : "off")
      << ", Q-smoothing " << (base.smooth_q ? "on" : "off") << ") against exact attention; "
      << "synthetic shape B " << syn.B << ", H " << syn.H << ", N " << syn.N << ", D " << syn.D
      << ", causal, seed " << opt.seed << ".\n";

  // Live tensors (with a checkpoint): one training batch's forward and backward.
  std::vector<Inputs> live;
  std::optional<Loaded> loaded;
  if (!opt.checkpoint.empty()) {
    ABLATE_ASSIGN_OR_RETURN(loaded, LoadCheckpointAndData(config, opt.checkpoint));
    if (w != "bias-noise") {
      ABLATE_ASSIGN_OR_RETURN(Gpt<float> model, ModelWith(config, *loaded, config.attention.kind));
      ABLATE_ASSIGN_OR_RETURN(
          BatchSampler sampler,
          BatchSampler::Create(&loaded->data.train, config.model.seq_len, opt.seed));
      const int b = std::min(config.train.micro_batch, 2);
      std::vector<int32_t> in(size_t(b) * config.model.seq_len), tg(in.size());
      sampler.Next(b, in.data(), tg.data());
      model.ZeroGrad();
      model.Forward(in.data(), tg.data(), b);
      model.Backward(1.0f);
      for (int l = 0; l < config.model.layers; ++l) {
        ABLATE_ASSIGN_OR_RETURN(auto a, model.LiveAttention(l));
        live.push_back(LiveInputs(a, 1));
      }
    }
  }

  if (w == "sigma" || w == "all") {
    json rows = json::array();
    out << "\n## Error against sigma (the paper's Table 1)\n\n";
    char head[512];
    std::snprintf(head, sizeof head, kSigmaHeader, "inputs");
    out << head;
    for (double sigma : {1.0, 2.0, 3.0, 5.0, 8.0, 10.0}) {
      json r = ErrorRow(Synthetic(syn, sigma, opt.seed), base);
      r["sigma"] = sigma;
      PrintSigmaRow(out, "synthetic sigma " + std::to_string(int(sigma)), r);
      rows.push_back(r);
    }
    result["sigma"] = rows;
    // The GPU test's shape and options (sagebwd_gpu_test SigmaTrend: B 1, H 2, N 1024, D 64, not
    // causal, default options), so that the two trends can be read side by side.
    json grows = json::array();
    const k::AttnShape gs{1, 2, 1024, 64, false};
    const k::AttnOptions gopt = k::SageGpuTiles(k::AttnOptions{}, 64);
    out << "\nAt the GPU test's shape (B 1, H 2, N 1024, D 64, not causal, default options):\n\n"
        << head;
    for (double sigma : {1.0, 3.0, 5.0, 8.0, 10.0}) {
      json r = ErrorRow(Synthetic(gs, sigma, opt.seed), gopt);
      r["sigma"] = sigma;
      PrintSigmaRow(out, "synthetic sigma " + std::to_string(int(sigma)), r);
      grows.push_back(r);
    }
    result["sigma_gpu_test_shape"] = grows;
    if (!live.empty()) {
      out << "\nLive layers (one training sequence of the checkpoint; q and k also scaled by 2 "
             "and 4):\n\n"
          << head;
      json lrows = json::array();
      for (size_t l = 0; l < live.size(); ++l) {
        for (double f : {1.0, 2.0, 4.0}) {
          Inputs in = live[l];
          for (double& x : in.q) x *= f;
          for (double& x : in.kk) x *= f;
          json r = ErrorRow(in, base);
          r["layer"] = int(l);
          r["scale"] = f;
          PrintSigmaRow(out, "live layer " + std::to_string(l) + " x" + std::to_string(int(f)), r);
          lrows.push_back(r);
        }
      }
      result["sigma_live"] = lrows;
    }
  }
  if (w == "decompose" || w == "all") {
    out << "\n## Error by product (the paper's Table 2)\n";
    json dec = json::array();
    for (double sigma : {1.0, 8.0}) {
      dec.push_back(Decompose(Synthetic(syn, sigma, opt.seed), base,
                              "synthetic sigma " + std::to_string(int(sigma)), out));
    }
    for (size_t l = 0; l < live.size(); ++l) {
      dec.push_back(Decompose(live[l], base, "live layer " + std::to_string(l), out));
    }
    result["decompose"] = dec;
  }
  if (w == "granularity" || w == "all") {
    out << "\n## Finer scale groups for the backward's INT8 operands (emulator only)\n";
    result["granularity"] = Granularity(syn, base, opt.seed, out);
  }
  if (w == "smoothing" || w == "all") {
    out << "\n## Smoothing against keys that carry a shared offset\n";
    result["smoothing"] = Smoothing(syn, base, opt.seed, out);
  }
  if ((w == "bias-noise" || w == "all") && loaded) {
    out << "\n## Bias against noise by tokens per step\n";
    ABLATE_ASSIGN_OR_RETURN(result["bias_noise"], BiasNoise(config, *loaded, opt, out));
  }
  return result;
}

}  // namespace ablate::trainer::probe
