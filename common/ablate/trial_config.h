// The trial config: one YAML document that fully describes one training run (docs/design.md, "Sweep spec
// and trial config"). Every key has a default; unknown keys and bad values are errors that name the
// file, line, column and key path, and suggest the nearest known key for a misspelling.
//
// The same field table serves three users: ablate-train (parse a file), the coordinator (apply sweep
// axes such as "attention.kind" to a base config) and the trial identity (the canonical JSON of the
// resolved config, hashed).
//
// Thread safety: all functions are pure; the field table is immutable after first use.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ablate/status.h"

namespace YAML {
class Node;
}

namespace ablate::config {

struct DataSection {
  std::string corpus = "brown";  // brown | nlp | path to a text file | glob of llm.c .bin shards
  double val_fraction = 0.05;    // the last val_fraction of the token stream is held out; 0: the
                                 // _val_ shards of a _train_ shard pattern
  int eval_batches = 8;          // micro-batches of the validation split per evaluation
  int vocab_size = 0;            // 0: 256 for text, inferred from the token ids for shards
};

struct ModelSection {
  int seq_len = 256;
  int layers = 4;
  int d_model = 256;
  int heads = 4;
  std::string mlp = "gelu";  // gelu | relu2
  bool tie_embeddings = true;
  double init_std = 0.02;
};

struct AttentionSection {
  std::string kind = "sagebwd";  // fpa | sagebwd
  bool qk_norm = true;
  bool smooth_k = true;
  bool smooth_q = false;
  bool int8_dp = false;  // quantize dP too (measures the paper's claim that dS/dP precision dominates)
  // The dS products (dQ = dS K, dK = dS^T Q) in bf16 instead of INT8, to isolate the paper's
  // claim (ii); both devices (device cuda: not with smooth_q or dq_correction).
  bool ds_bf16 = false;
  // K-smoothing's dQ += rowsum(dS) kbar term (kernels/attention/attention.h): off by default
  // since numerics 3, which found it only adds error.
  bool dq_correction = false;
  // A stress for the INT8 kernels: one fixed vector added to every key of each head (after QK-norm
  // and RoPE), each channel drawn from N(0, k_offset^2) with a fixed seed per layer. Exact
  // attention ignores it (q . (k + b) shifts a row's logits by one constant); INT8 K does not, and
  // K-smoothing removes it (docs/probes.md, "smoothing"). 0 = off.
  double k_offset = 0;
  // GPU: dQ summed over key blocks in a fixed order, so that reruns are bit-identical (both kinds;
  // costs scratch memory and some backward time, docs/bench/attention.md). The CPU always is.
  bool deterministic = true;
};

struct OptimizerSection {
  std::string kind = "spectral";  // spectral | adamw
  std::string family = "rms";     // rms (Adam family) | momentum (mSGD family; p = 0 is Muon)
  double p = 0.5;                 // spectral power, in [-1, 1]
  double p_end = 0.5;             // with p_schedule linear|cosine: p moves from p to p_end
  std::string p_schedule = "constant";  // constant | linear | cosine
  std::string psi_method = "auto";      // auto | newton_schulz | coupled_newton | eigh
  double lr = 1.0e-2;          // matrices (spectral group, or every matrix for adamw)
  double lr_vector = 3.0e-4;   // the AdamW group: vectors (gains), and embeddings/head unless spectral
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1.0e-8;
  double weight_decay = 0.0;   // decoupled, on matrices only
  double momentum = 0.9;       // momentum family
  std::string momentum_kind = "sum";  // sum (B = mu B + g) | ema (B = mu B + (1 - mu) g, Muon's)
  bool nesterov = false;
  int newton_iters = 15;       // coupled Newton iterations per root
  int ns_steps = 5;            // Newton–Schulz steps for p = 0 (5: Muon, 15: BeyondMuon)
  bool spectral_embeddings = false;  // put the embedding and head under Psi_p too
  int state_bits = 32;         // 32 | 8 (blockwise 8-bit optimizer state)
  std::string state_quant = "dynamic";  // linear | dynamic (for state_bits 8): m and momentum
  // The code of the second moment v (state_bits 8): dynamic (the default), or linear, the unstable
  // baseline of 8-bit AdamW (entries below absmax / 510 of a block decode to 0, so only the fresh
  // (1 - beta2) g^2 is left of such a coordinate's v and its update is inflated).
  std::string state_quant_v = "dynamic";
  // device: cuda only: the spectral GEMMs (Newton-Schulz, coupled Newton, Gram) use TF32 tensor
  // cores (10-bit mantissa, fp32 accumulation); reported in psi_route as "+tf32". The CPU ignores it.
  bool tf32 = false;
};

inline constexpr int kDefaultWarmup = 50;

struct TrainSection {
  int steps = 500;
  int64_t tokens_per_step = 16384;
  int micro_batch = 16;
  // Not given: min(kDefaultWarmup, steps / 10), set by Normalize, so a short run is not all
  // warm-up (and steps < 50 is no error); given, it is kept as is (Validate: at most steps).
  int warmup = kDefaultWarmup;
  bool warmup_given = false;        // train.warmup was set (ApplyYaml / SetField); not a config key
  std::string schedule = "cosine";  // cosine | linear | wsd | constant
  double min_lr_ratio = 0.0;        // the schedule's floor, as a fraction of the peak
  double decay_fraction = 0.2;      // wsd: the share of steps spent decaying
  double grad_clip = 1.0;           // global norm; 0 disables
  int eval_every = 50;
  int diagnostics_every = 50;       // 0 disables
  int checkpoint_every = 100;       // 0 disables (a final checkpoint is still written)
  double max_loss = 20.0;           // a train loss above this (or NaN/Inf) ends the run: diverged
  int threads = 0;                  // CPU threads; 0 = all cores
  double peak_tflops = 0.0;         // for MFU; 0 = the device's nominal peak (see README)
  // > 0: profile that many steps (after up to 5 warm-up steps) and emit a "profile" line of where
  // their time went by kind of work (worker/trainer/model/step_profile.h; ablate-train --profile
  // sets it). How a trial runs, not what it computes: not part of the trial's identity.
  int profile_steps = 0;
};

// Micro-batches per optimizer step at most (train.tokens_per_step / (micro_batch x seq_len x
// gpus)): far past any useful run, and it keeps the count an int (2^40 tokens of 512-token
// micro-batches wrapped around to a negative count, and the run "succeeded" on nonsense).
inline constexpr int64_t kMaxAccumulationSteps = 1 << 20;

struct TrialConfig {
  std::string name;  // optional label
  uint64_t seed = 0;
  DataSection data;
  ModelSection model;
  AttentionSection attention;
  OptimizerSection optimizer;
  TrainSection train;
  std::string device = "auto";  // auto | cpu | cuda
  int gpus = 1;                 // data-parallel ranks for this trial (from the sweep's resources)

  // Micro-batches accumulated per optimizer step: tokens_per_step / (micro_batch * seq_len * gpus).
  int accumulation_steps() const;
};

// Where a parsed value came from, for error messages after parsing ("trial.yaml:12:5").
struct SourceMap {
  std::string file;
  std::vector<std::pair<std::string, std::string>> locations;  // key path -> "file:line:col"
  std::string Locate(const std::string& path) const;  // "file:line:col" or "file" if unknown
};

// Parses YAML text into a config on top of the defaults, then validates it.
// `file` is used in messages only. Errors: InvalidArgument with "file:line:col: key.path: message".
StatusOr<TrialConfig> ParseTrialConfig(const std::string& yaml_text, const std::string& file);
StatusOr<TrialConfig> LoadTrialConfig(const std::string& path);

// Parses YAML text that must hold one document: a second one ("---" and more keys) would be
// ignored silently, so it is an error at its start. Errors are InvalidArgument
// "file:line:col: <what>invalid YAML: ..." (`what`: "" or "spec: ").
StatusOr<YAML::Node> LoadYamlDocument(const std::string& yaml_text, const std::string& file,
                                      const std::string& what);

// Applies one YAML mapping (the document root, or a sweep's `base:`) on top of `config`, without
// validating. Used by the sweep expander, which validates once all axes are applied. A key given
// twice in it (literally, or as "data.corpus" beside data: {corpus}) is an error naming both.
Status ApplyYaml(const YAML::Node& root, const std::string& file, TrialConfig* config,
                 SourceMap* sources);
// Sets one dotted key ("attention.kind") from a YAML scalar. `where` prefixes errors.
Status SetField(TrialConfig* config, const std::string& path, const YAML::Node& value,
                const std::string& where);

// Fills derived keys so equal computations have equal configs (and hashes): with a constant p
// schedule, p_end = p; without a given train.warmup, warmup = min(kDefaultWarmup, steps / 10).
// Call after every key is applied and before Validate / ConfigHash.
void Normalize(TrialConfig* config);

// Cross-field and range validation of a complete config; errors name the key and its location.
Status Validate(const TrialConfig& config, const SourceMap& sources);

// Canonical JSON of every key (sorted, all defaults filled in), and the trial identity: 16 hex
// digits of FNV-1a 64 over the canonical JSON text without name, train.threads, train.peak_tflops
// and train.profile_steps (labels and execution settings; stable as long as the keys and defaults
// are unchanged).
nlohmann::json ToJson(const TrialConfig& config);
std::string ConfigHash(const TrialConfig& config);
// Every known dotted key, for help texts and suggestions.
std::vector<std::string> KnownKeys();
// The known key nearest to `key` by edit distance, or "" when nothing is close.
std::string SuggestKey(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace ablate::config
