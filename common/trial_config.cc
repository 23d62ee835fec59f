#include "ablate/trial_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "ablate/files.h"
#include "ablate/hash.h"

namespace ablate::config {
namespace {

// One configurable key: how to read it from YAML, how to write it to JSON.
struct Field {
  std::string path;
  std::function<Status(TrialConfig&, const YAML::Node&)> set;  // errors without location prefix
  std::function<nlohmann::json(const TrialConfig&)> get;
};

std::string Describe(const YAML::Node& n) {
  if (n.IsNull()) return "null";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

template <typename Get>
Field IntField(std::string path, Get ref, int64_t lo, int64_t hi) {
  Field f;
  f.path = path;
  f.set = [ref, lo, hi](TrialConfig& c, const YAML::Node& n) -> Status {
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
      return InvalidArgument("expected an integer, got " + Describe(n));
    }
    if (v < lo || v > hi) {
      return InvalidArgument("expected an integer in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "], got " + std::to_string(v));
    }
    ref(c) = static_cast<std::remove_reference_t<decltype(ref(c))>>(v);
    return Status::Ok();
  };
  f.get = [ref](const TrialConfig& c) { return nlohmann::json(ref(const_cast<TrialConfig&>(c))); };
  return f;
}

std::string FormatDouble(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

template <typename Get>
Field DoubleField(std::string path, Get ref, double lo, double hi) {
  Field f;
  f.path = path;
  f.set = [ref, lo, hi](TrialConfig& c, const YAML::Node& n) -> Status {
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
      return InvalidArgument("expected a number, got " + Describe(n));
    }
    if (v < lo || v > hi) {
      return InvalidArgument("expected a number in [" + FormatDouble(lo) + ", " + FormatDouble(hi) +
                             "], got " + FormatDouble(v));
    }
    ref(c) = v;
    return Status::Ok();
  };
  f.get = [ref](const TrialConfig& c) { return nlohmann::json(ref(const_cast<TrialConfig&>(c))); };
  return f;
}

template <typename Get>
Field BoolField(std::string path, Get ref) {
  Field f;
  f.path = path;
  f.set = [ref](TrialConfig& c, const YAML::Node& n) -> Status {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      return InvalidArgument("expected true or false, got " + Describe(n));
    }
    ref(c) = v;
    return Status::Ok();
  };
  f.get = [ref](const TrialConfig& c) { return nlohmann::json(ref(const_cast<TrialConfig&>(c))); };
  return f;
}

// True when `s` is UTF-8 that JSON accepts (configs become JSON; nlohmann's own check is the one
// that matters, so ask it).
bool IsUtf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

template <typename Get>
Field StringField(std::string path, Get ref) {
  Field f;
  f.path = path;
  f.set = [ref](TrialConfig& c, const YAML::Node& n) -> Status {
    if (!n.IsScalar()) return InvalidArgument("expected a string, got " + Describe(n));
    if (!IsUtf8(n.Scalar())) return InvalidArgument("expected UTF-8 text, got invalid bytes");
    ref(c) = n.Scalar();
    return Status::Ok();
  };
  f.get = [ref](const TrialConfig& c) { return nlohmann::json(ref(const_cast<TrialConfig&>(c))); };
  return f;
}

template <typename Get>
Field EnumField(std::string path, Get ref, std::vector<std::string> allowed) {
  Field f;
  f.path = path;
  f.set = [ref, allowed](TrialConfig& c, const YAML::Node& n) -> Status {
    std::string joined;
    for (const auto& a : allowed) joined += (joined.empty() ? "" : " | ") + a;
    if (!n.IsScalar()) return InvalidArgument("expected one of " + joined + ", got " + Describe(n));
    if (std::find(allowed.begin(), allowed.end(), n.Scalar()) == allowed.end()) {
      std::string hint = SuggestKey(n.Scalar(), allowed);
      return InvalidArgument("expected one of " + joined + ", got '" + n.Scalar() + "'" +
                             (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
    }
    ref(c) = n.Scalar();
    return Status::Ok();
  };
  f.get = [ref](const TrialConfig& c) { return nlohmann::json(ref(const_cast<TrialConfig&>(c))); };
  return f;
}

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = [] {
    using C = TrialConfig;
    std::vector<Field> f;
    f.push_back(StringField("name", [](C& c) -> std::string& { return c.name; }));
    f.push_back(IntField("seed", [](C& c) -> uint64_t& { return c.seed; }, 0,
                         std::numeric_limits<int64_t>::max()));
    f.push_back(StringField("data.corpus", [](C& c) -> std::string& { return c.data.corpus; }));
    // 0: the held-out _val_ shards of a _train_ shard pattern (worker/trainer/data/dataset.h).
    f.push_back(DoubleField("data.val_fraction", [](C& c) -> double& { return c.data.val_fraction; },
                            0, 0.5));
    f.push_back(IntField("data.eval_batches", [](C& c) -> int& { return c.data.eval_batches; }, 1,
                         100000));
    f.push_back(IntField("data.vocab_size", [](C& c) -> int& { return c.data.vocab_size; }, 0,
                         1 << 24));
    f.push_back(IntField("model.seq_len", [](C& c) -> int& { return c.model.seq_len; }, 2, 65536));
    f.push_back(IntField("model.layers", [](C& c) -> int& { return c.model.layers; }, 1, 256));
    f.push_back(IntField("model.d_model", [](C& c) -> int& { return c.model.d_model; }, 2, 65536));
    f.push_back(IntField("model.heads", [](C& c) -> int& { return c.model.heads; }, 1, 1024));
    f.push_back(EnumField("model.mlp", [](C& c) -> std::string& { return c.model.mlp; },
                          {"gelu", "relu2"}));
    f.push_back(BoolField("model.tie_embeddings",
                          [](C& c) -> bool& { return c.model.tie_embeddings; }));
    f.push_back(DoubleField("model.init_std", [](C& c) -> double& { return c.model.init_std; },
                            1e-6, 1.0));
    f.push_back(EnumField("attention.kind", [](C& c) -> std::string& { return c.attention.kind; },
                          {"fpa", "sagebwd"}));
    f.push_back(BoolField("attention.qk_norm", [](C& c) -> bool& { return c.attention.qk_norm; }));
    f.push_back(BoolField("attention.smooth_k", [](C& c) -> bool& { return c.attention.smooth_k; }));
    f.push_back(BoolField("attention.smooth_q", [](C& c) -> bool& { return c.attention.smooth_q; }));
    f.push_back(BoolField("attention.int8_dp", [](C& c) -> bool& { return c.attention.int8_dp; }));
    f.push_back(BoolField("attention.ds_bf16", [](C& c) -> bool& { return c.attention.ds_bf16; }));
    f.push_back(DoubleField(
        "attention.k_offset", [](C& c) -> double& { return c.attention.k_offset; }, 0.0, 1000.0));
    f.push_back(BoolField("attention.dq_correction",
                          [](C& c) -> bool& { return c.attention.dq_correction; }));
    f.push_back(BoolField("attention.deterministic",
                          [](C& c) -> bool& { return c.attention.deterministic; }));
    f.push_back(EnumField("optimizer.kind", [](C& c) -> std::string& { return c.optimizer.kind; },
                          {"spectral", "adamw"}));
    f.push_back(EnumField("optimizer.family",
                          [](C& c) -> std::string& { return c.optimizer.family; },
                          {"rms", "momentum"}));
    f.push_back(DoubleField("optimizer.p", [](C& c) -> double& { return c.optimizer.p; }, -1, 1));
    f.push_back(DoubleField("optimizer.p_end", [](C& c) -> double& { return c.optimizer.p_end; },
                            -1, 1));
    f.push_back(EnumField("optimizer.p_schedule",
                          [](C& c) -> std::string& { return c.optimizer.p_schedule; },
                          {"constant", "linear", "cosine"}));
    f.push_back(EnumField("optimizer.psi_method",
                          [](C& c) -> std::string& { return c.optimizer.psi_method; },
                          {"auto", "newton_schulz", "coupled_newton", "eigh"}));
    f.push_back(DoubleField("optimizer.lr", [](C& c) -> double& { return c.optimizer.lr; }, 0, 100));
    f.push_back(DoubleField("optimizer.lr_vector",
                            [](C& c) -> double& { return c.optimizer.lr_vector; }, 0, 100));
    f.push_back(DoubleField("optimizer.beta1", [](C& c) -> double& { return c.optimizer.beta1; }, 0,
                            0.999999));
    f.push_back(DoubleField("optimizer.beta2", [](C& c) -> double& { return c.optimizer.beta2; }, 0,
                            0.999999));
    f.push_back(DoubleField("optimizer.eps", [](C& c) -> double& { return c.optimizer.eps; }, 0, 1));
    f.push_back(DoubleField("optimizer.weight_decay",
                            [](C& c) -> double& { return c.optimizer.weight_decay; }, 0, 10));
    f.push_back(DoubleField("optimizer.momentum",
                            [](C& c) -> double& { return c.optimizer.momentum; }, 0, 0.999999));
    f.push_back(EnumField("optimizer.momentum_kind",
                          [](C& c) -> std::string& { return c.optimizer.momentum_kind; },
                          {"sum", "ema"}));
    f.push_back(BoolField("optimizer.nesterov", [](C& c) -> bool& { return c.optimizer.nesterov; }));
    f.push_back(IntField("optimizer.newton_iters",
                         [](C& c) -> int& { return c.optimizer.newton_iters; }, 1, 100));
    f.push_back(IntField("optimizer.ns_steps", [](C& c) -> int& { return c.optimizer.ns_steps; },
                         1, 100));
    f.push_back(BoolField("optimizer.spectral_embeddings",
                          [](C& c) -> bool& { return c.optimizer.spectral_embeddings; }));
    f.push_back(IntField("optimizer.state_bits", [](C& c) -> int& { return c.optimizer.state_bits; },
                         8, 32));
    f.push_back(EnumField("optimizer.state_quant",
                          [](C& c) -> std::string& { return c.optimizer.state_quant; },
                          {"linear", "dynamic"}));
    f.push_back(EnumField("optimizer.state_quant_v",
                          [](C& c) -> std::string& { return c.optimizer.state_quant_v; },
                          {"linear", "dynamic"}));
    f.push_back(BoolField("optimizer.tf32", [](C& c) -> bool& { return c.optimizer.tf32; }));
    f.push_back(IntField("train.steps", [](C& c) -> int& { return c.train.steps; }, 1, kIntMax));
    f.push_back(IntField("train.tokens_per_step",
                         [](C& c) -> int64_t& { return c.train.tokens_per_step; }, 1,
                         int64_t(1) << 40));
    f.push_back(IntField("train.micro_batch", [](C& c) -> int& { return c.train.micro_batch; }, 1,
                         1 << 20));
    f.push_back(IntField("train.warmup", [](C& c) -> int& { return c.train.warmup; }, 0, kIntMax));
    f.push_back(EnumField("train.schedule", [](C& c) -> std::string& { return c.train.schedule; },
                          {"cosine", "linear", "wsd", "constant"}));
    f.push_back(DoubleField("train.min_lr_ratio",
                            [](C& c) -> double& { return c.train.min_lr_ratio; }, 0, 1));
    f.push_back(DoubleField("train.decay_fraction",
                            [](C& c) -> double& { return c.train.decay_fraction; }, 0, 1));
    f.push_back(DoubleField("train.grad_clip", [](C& c) -> double& { return c.train.grad_clip; }, 0,
                            1e9));
    f.push_back(IntField("train.eval_every", [](C& c) -> int& { return c.train.eval_every; }, 0,
                         kIntMax));
    f.push_back(IntField("train.diagnostics_every",
                         [](C& c) -> int& { return c.train.diagnostics_every; }, 0, kIntMax));
    f.push_back(IntField("train.checkpoint_every",
                         [](C& c) -> int& { return c.train.checkpoint_every; }, 0, kIntMax));
    f.push_back(DoubleField("train.max_loss", [](C& c) -> double& { return c.train.max_loss; }, 0,
                            1e30));
    f.push_back(IntField("train.threads", [](C& c) -> int& { return c.train.threads; }, 0, 1024));
    f.push_back(DoubleField("train.peak_tflops",
                            [](C& c) -> double& { return c.train.peak_tflops; }, 0, 1e6));
    f.push_back(IntField(
        "train.profile_steps", [](C& c) -> int& { return c.train.profile_steps; }, 0, 1000000));
    f.push_back(EnumField("device", [](C& c) -> std::string& { return c.device; },
                          {"auto", "cpu", "cuda"}));
    f.push_back(IntField("gpus", [](C& c) -> int& { return c.gpus; }, 1, 1024));
    return f;
  }();
  return fields;
}

const Field* FindField(const std::string& path) {
  for (const auto& f : Fields()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

std::string MarkString(const std::string& file, const YAML::Mark& m) {
  if (m.is_null()) return file;
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// Edit distance counting a swap of two adjacent letters as one edit ("hedas" -> "heads"), the most
// common typo (optimal string alignment distance).
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// Keys under `prefix` ("model.") without the prefix, or the top-level names ("" prefix).
std::vector<std::string> ChildKeys(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& f : Fields()) {
    if (f.path.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = f.path.substr(prefix.size());
    std::string head = rest.substr(0, rest.find('.'));
    if (std::find(out.begin(), out.end(), head) == out.end()) out.push_back(head);
  }
  return out;
}

bool IsSection(const std::string& path) { return !ChildKeys(path + ".").empty(); }

// `seen`: the key paths set so far in this document, with where (a key given twice is an error).
// A key that no longer exists: nullopt for any other key; Ok at its last default (configs stored
// by an earlier release still load: that default is what the key meant on the GPU); else
// InvalidArgument saying why it went (the caller adds where).
std::optional<Status> RemovedKey(const std::string& path, const YAML::Node& value) {
  const bool q = path == "attention.block_q", kv = path == "attention.block_kv";
  if (!q && !kv) return std::nullopt;
  if (value.IsScalar() && value.Scalar() == (q ? "128" : "64")) return Status::Ok();
  return InvalidArgument("removed in numerics version 2: SageBwd always runs the GPU kernels' "
                         "tiles (64 query rows, 64 or 128 keys), on the CPU too; delete the key");
}

Status ApplyMap(const YAML::Node& map, const std::string& prefix, const std::string& file,
                TrialConfig* config, SourceMap* sources, std::map<std::string, std::string>* seen) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key_node = it->first;  // a copy: it->first is a temporary proxy
    const YAML::Node value = it->second;
    std::string where = MarkString(file, key_node.Mark());
    if (!key_node.IsScalar()) return InvalidArgument(where + ": a key must be a plain name");
    std::string key = key_node.Scalar();
    std::string path = prefix.empty() ? key : prefix + "." + key;
    if (IsSection(path)) {
      if (!value.IsMap()) {
        return InvalidArgument(where + ": " + path + ": expected a mapping of " + path +
                               ".* keys, got " + Describe(value));
      }
      ABLATE_RETURN_IF_ERROR(ApplyMap(value, path, file, config, sources, seen));
      continue;
    }
    if (auto [at, inserted] = seen->emplace(path, where); !inserted) {
      return InvalidArgument(where + ": " + path + ": key given twice (first at " + at->second +
                             ")");
    }
    const Field* field = FindField(path);
    if (const auto removed = field ? std::nullopt : RemovedKey(path, value)) {
      if (removed->ok()) continue;
      return InvalidArgument(where + ": " + path + ": " + removed->message());
    }
    if (field == nullptr) {
      std::vector<std::string> siblings = ChildKeys(prefix.empty() ? "" : prefix + ".");
      std::string hint = SuggestKey(key, siblings);
      std::string known;
      for (const auto& s : siblings) known += (known.empty() ? "" : ", ") + s;
      return InvalidArgument(where + ": " + path + ": unknown key" +
                             (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                             "; known keys here: " + known);
    }
    Status st = field->set(*config, value);
    if (!st.ok()) {
      return InvalidArgument(MarkString(file, value.Mark()) + ": " + path + ": " + st.message());
    }
    if (path == "train.warmup") config->train.warmup_given = true;
    if (sources) sources->locations.emplace_back(path, MarkString(file, value.Mark()));
  }
  return Status::Ok();
}

Status Check(bool ok, const SourceMap& src, const std::string& path, const std::string& message) {
  if (ok) return Status::Ok();
  return InvalidArgument(src.Locate(path) + ": " + path + ": " + message);
}

}  // namespace

void Normalize(TrialConfig* c) {
  if (c->optimizer.p_schedule == "constant") c->optimizer.p_end = c->optimizer.p;
  if (!c->train.warmup_given) c->train.warmup = std::min(kDefaultWarmup, c->train.steps / 10);
}

int TrialConfig::accumulation_steps() const {
  int64_t per_micro = int64_t(train.micro_batch) * model.seq_len * gpus;
  // Validate bounds the quotient by kMaxAccumulationSteps, so it fits an int.
  return per_micro > 0 ? static_cast<int>(train.tokens_per_step / per_micro) : 0;
}

std::string SourceMap::Locate(const std::string& path) const {
  for (auto it = locations.rbegin(); it != locations.rend(); ++it) {
    if (it->first == path) return it->second;
  }
  return file.empty() ? "<config>" : file;
}

std::string SuggestKey(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = EditDistance(key, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough to be a typo: at most a third of the word, and at least one edit allowed.
  if (best.empty() || best_d > std::max<size_t>(1, key.size() / 3)) return "";
  return best;
}

std::vector<std::string> KnownKeys() {
  std::vector<std::string> out;
  for (const auto& f : Fields()) out.push_back(f.path);
  return out;
}

Status SetField(TrialConfig* config, const std::string& path, const YAML::Node& value,
                const std::string& where) {
  const Field* field = FindField(path);
  if (const auto removed = field ? std::nullopt : RemovedKey(path, value)) {
    if (removed->ok()) return Status::Ok();
    return InvalidArgument(where + ": " + path + ": " + removed->message());
  }
  if (field == nullptr) {
    std::string hint = SuggestKey(path, KnownKeys());
    return InvalidArgument(where + ": " + path + ": unknown key" +
                           (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
  }
  Status st = field->set(*config, value);
  if (!st.ok()) return InvalidArgument(where + ": " + path + ": " + st.message());
  if (path == "train.warmup") config->train.warmup_given = true;
  return Status::Ok();
}

Status ApplyYaml(const YAML::Node& root, const std::string& file, TrialConfig* config,
                 SourceMap* sources) {
  if (sources) sources->file = file;
  if (!root || root.IsNull()) return Status::Ok();  // an empty document: all defaults
  if (!root.IsMap()) {
    return InvalidArgument(MarkString(file, root.Mark()) +
                           ": expected a mapping of config keys at the top level, got " +
                           Describe(root));
  }
  std::map<std::string, std::string> seen;
  return ApplyMap(root, "", file, config, sources, &seen);
}

StatusOr<YAML::Node> LoadYamlDocument(const std::string& yaml_text, const std::string& file,
                                      const std::string& what) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);  // the first document only
  } catch (const YAML::Exception& e) {
    return InvalidArgument(MarkString(file, e.mark) + ": " + what + "invalid YAML: " + e.msg);
  }
  // A second document: content after a document marker at column 0 ("---" once the first
  // document has content, or "..."). Found by lines, not by YAML::LoadAll, which yaml-cpp 0.7
  // can loop in for good on malformed input (fuzz_trial_config found one).
  bool content = false, ended = false;
  size_t line_no = 0;
  for (size_t pos = 0; pos < yaml_text.size();) {
    size_t nl = yaml_text.find('\n', pos);
    if (nl == std::string::npos) nl = yaml_text.size();
    std::string line = yaml_text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool start = line.rfind("---", 0) == 0 &&
                       (line.size() == 3 || line[3] == ' ' || line[3] == '\t');
    const bool end = line.rfind("...", 0) == 0 &&
                     (line.size() == 3 || line[3] == ' ' || line[3] == '\t');
    std::string rest = start || end ? line.substr(3) : line;
    const size_t first = rest.find_first_not_of(" \t");
    const bool has_content = first != std::string::npos && rest[first] != '#' &&
                             !(!start && !end && rest[first] == '%');  // directives
    if ((start && content) || end) ended = true;
    if (has_content && ended) {
      return InvalidArgument(file + ":" + std::to_string(line_no) + ":1: " + what +
                             "a second YAML document (after '---'); a file holds one");
    }
    if (has_content) content = true;
  }
  return root;
}

Status Validate(const TrialConfig& c, const SourceMap& src) {
  const auto& m = c.model;
  ABLATE_RETURN_IF_ERROR(Check(m.d_model % m.heads == 0, src, "model.heads",
                               "heads (" + std::to_string(m.heads) + ") must divide d_model (" +
                                   std::to_string(m.d_model) + ")"));
  ABLATE_RETURN_IF_ERROR(Check((m.d_model / m.heads) % 2 == 0, src, "model.heads",
                               "the head dimension d_model/heads = " +
                                   std::to_string(m.d_model / m.heads) +
                                   " must be even (RoPE rotates pairs)"));
  const auto& t = c.train;
  int64_t per_micro = int64_t(t.micro_batch) * m.seq_len * c.gpus;
  ABLATE_RETURN_IF_ERROR(Check(
      t.tokens_per_step % per_micro == 0, src, "train.tokens_per_step",
      "tokens_per_step (" + std::to_string(t.tokens_per_step) +
          ") must be divisible by micro_batch x seq_len x gpus = " + std::to_string(t.micro_batch) +
          " x " + std::to_string(m.seq_len) + " x " + std::to_string(c.gpus) + " = " +
          std::to_string(per_micro)));
  ABLATE_RETURN_IF_ERROR(
      Check(t.tokens_per_step / per_micro <= kMaxAccumulationSteps, src, "train.tokens_per_step",
            "tokens_per_step (" + std::to_string(t.tokens_per_step) + ") is " +
                std::to_string(t.tokens_per_step / per_micro) +
                " micro-batches of micro_batch x seq_len x gpus = " + std::to_string(per_micro) +
                " tokens; at most " + std::to_string(kMaxAccumulationSteps) +
                " per step (raise micro_batch)"));
  ABLATE_RETURN_IF_ERROR(Check(t.warmup <= t.steps, src, "train.warmup",
                               "warmup (" + std::to_string(t.warmup) +
                                   ") cannot exceed steps (" + std::to_string(t.steps) + ")"));
  const auto& o = c.optimizer;
  ABLATE_RETURN_IF_ERROR(Check(o.state_bits == 8 || o.state_bits == 32, src,
                               "optimizer.state_bits",
                               "expected 8 or 32, got " + std::to_string(o.state_bits)));
  if (o.kind == "spectral") {
    ABLATE_RETURN_IF_ERROR(Check(!(o.psi_method == "newton_schulz" && o.p != 0), src,
                                 "optimizer.psi_method",
                                 "newton_schulz computes only p = 0; use auto, coupled_newton or "
                                 "eigh for p = " +
                                     FormatDouble(o.p)));
    ABLATE_RETURN_IF_ERROR(Check(
        !(o.psi_method == "newton_schulz" && o.p_schedule != "constant"), src,
        "optimizer.psi_method", "newton_schulz computes only p = 0; a p schedule needs auto or eigh"));
  }
  return Status::Ok();
}

StatusOr<TrialConfig> ParseTrialConfig(const std::string& yaml_text, const std::string& file) {
  ABLATE_ASSIGN_OR_RETURN(YAML::Node root, LoadYamlDocument(yaml_text, file, ""));
  TrialConfig config;
  SourceMap sources;
  ABLATE_RETURN_IF_ERROR(ApplyYaml(root, file, &config, &sources));
  Normalize(&config);
  ABLATE_RETURN_IF_ERROR(Validate(config, sources));
  return config;
}

StatusOr<TrialConfig> LoadTrialConfig(const std::string& path) {
  // A folder opens as a stream that reads nothing, which would parse as the empty config (all
  // defaults) and start the default run.
  if (const std::string why = NotATextFile(path); !why.empty()) {
    return InvalidArgument("cannot read config " + path + ": " + why);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoToStatus(errno, "cannot read config " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return ErrnoToStatus(errno, "cannot read config " + path);
  return ParseTrialConfig(ss.str(), path);
}

nlohmann::json ToJson(const TrialConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : Fields()) {
    nlohmann::json* node = &j;
    std::string path = f.path;
    size_t pos;
    while ((pos = path.find('.')) != std::string::npos) {
      node = &(*node)[path.substr(0, pos)];
      path = path.substr(pos + 1);
    }
    (*node)[path] = f.get(config);
  }
  return j;  // nlohmann::json objects keep keys sorted: the text is canonical
}

std::string ConfigHash(const TrialConfig& config) {
  nlohmann::json j = ToJson(config);
  j.erase("name");  // a label, not part of what is computed
  // Where and how fast it runs, not what it computes.
  j["train"].erase("threads");
  j["train"].erase("peak_tflops");
  j["train"].erase("profile_steps");
  // Identities hold across releases: a key added later is hashed only away from its default (the
  // behaviour of the releases before it, or a change of numerics the numerics version records),
  // and a removed key is hashed at its last default.
  if (config.attention.deterministic) j["attention"].erase("deterministic");
  if (!config.attention.ds_bf16) j["attention"].erase("ds_bf16");
  if (config.attention.k_offset == 0) j["attention"].erase("k_offset");
  if (config.optimizer.state_quant_v == "dynamic") j["optimizer"].erase("state_quant_v");
  // dq_correction's default changed (on until numerics 2, off since 3). Where it cannot change a
  // number (FPA, or SageBwd without K-smoothing) it is hashed at its old default, so those trials
  // keep their identities; where it does, the identity follows the value.
  if (config.attention.kind == "fpa" || !config.attention.smooth_k) {
    j["attention"]["dq_correction"] = true;
  }
  j["attention"]["block_q"] = 128;
  j["attention"]["block_kv"] = 64;
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const uint64_t h = Fnv1a64(text);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace ablate::config
