#include "sweep/sweep.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <unordered_map>

#include "ablate/hash.h"

namespace ablate::server {
namespace {

using config::TrialConfig;

// Enumerating points is cheap (index arithmetic and a few comparisons), so we may walk far more
// points than we keep; this bounds the walk when exclude drops most of an enormous grid.
constexpr int64_t kMaxEnumeratedPoints = 10'000'000;

const std::vector<std::string>& SpecKeys() {
  static const std::vector<std::string> keys = {"name",         "base",    "grid",  "zip",
                                                "exclude",      "seeds",   "order", "resources",
                                                "max_attempts", "priority", "early_stop"};
  return keys;
}

std::string Loc(const std::string& file, const YAML::Mark& m) {
  if (m.is_null()) return file;
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

Status Error(const std::string& loc, const std::string& key_path, const std::string& message) {
  return InvalidArgument(loc + ": " + key_path + ": " + message);
}

std::string Describe(const YAML::Node& n) {
  if (!n || n.IsNull()) return "nothing";
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

std::string Quoted(const std::vector<std::string>& names, const std::string& conj) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? " " + conj + " " : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

std::string Hint(const std::vector<std::string>& suggestions) {
  if (suggestions.empty()) return "";
  return " (did you mean " + Quoted(suggestions, "or") + "?)";
}

bool IsConfigKey(const std::string& path) {
  static const std::vector<std::string> keys = config::KnownKeys();
  return std::find(keys.begin(), keys.end(), path) != keys.end();
}

bool IsConfigSection(const std::string& path) {
  for (const auto& k : config::KnownKeys()) {
    if (k.size() > path.size() && k.compare(0, path.size(), path) == 0 && k[path.size()] == '.') {
      return true;
    }
  }
  return false;
}

std::string LastSegment(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// Edit distance counting an adjacent transposition as one edit ("gird" -> "grid" is 1), the most
// common typo; config::SuggestKey's plain Levenshtein counts it as 2.
size_t TypoDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// A misspelled key ("gird", "atention.kind") is within a few edits of a known key (at most a third
// of its length, at least one); a bare field name ("p", "kind") is not, but matches the last
// segment of one or more known keys.
std::vector<std::string> SuggestKeys(const std::string& key,
                                     const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = TypoDistance(key, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (!best.empty() && best_d <= std::max<size_t>(1, key.size() / 3)) return {best};
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    if (c != key && LastSegment(c) == LastSegment(key)) out.push_back(c);
  }
  return out;
}

std::vector<std::string> SplitList(const std::string& text, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) return out;
    start = end + sep.size();
  }
}

// The trial-config parser suggests by plain edit distance, which misses transpositions ("hedas",
// "fap"). Where its message has no suggestion, add ours, for the two messages it emits for typos:
// "<key>: unknown key; known keys here: a, b, c" and "expected one of a | b, got 'x'".
std::string AddTypoHint(const std::string& message) {
  if (message.find("(did you mean") != std::string::npos) return message;
  const std::string unknown = ": unknown key; known keys here: ";
  if (size_t at = message.find(unknown); at != std::string::npos) {
    size_t key_start = message.rfind(": ", at - 1);
    key_start = key_start == std::string::npos ? 0 : key_start + 2;
    std::string key = message.substr(key_start, at - key_start);
    std::vector<std::string> known = SplitList(message.substr(at + unknown.size()), ", ");
    std::string hint = Hint(SuggestKeys(LastSegment(key), known));
    return message.substr(0, at) + ": unknown key" + hint + message.substr(at + 13);
  }
  const std::string one_of = "expected one of ";
  const std::string got = ", got '";
  size_t a = message.find(one_of);
  size_t b = message.find(got, a == std::string::npos ? 0 : a);
  if (a != std::string::npos && b != std::string::npos && message.back() == '\'') {
    std::vector<std::string> allowed =
        SplitList(message.substr(a + one_of.size(), b - a - one_of.size()), " | ");
    std::string value = message.substr(b + got.size(), message.size() - b - got.size() - 1);
    return message + Hint(SuggestKeys(value, allowed));
  }
  return message;
}

// Shortest text that reads back as the same double: 0.50 -> "0.5", 1e-2 -> "0.01", 2.0 -> "2".
std::string FormatNumber(double v) {
  if (v == 0) return "0";  // also folds -0
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string JsonText(const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) return FormatNumber(v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// The canonical text of config key `path` ("optimizer.p") as the typed field holds it.
std::string FieldText(const nlohmann::json& config_json, const std::string& path) {
  const nlohmann::json* node = &config_json;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    node = &node->at(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return JsonText(*node);
}

// SetField reports "<where>: <config path>: <what>"; sweep errors name the spec's key path instead
// ("grid.optimizer.p[2]").
Status Rekey(const Status& st, const std::string& where, const std::string& config_path,
             const std::string& key_path) {
  const std::string old_prefix = where + ": " + config_path + ": ";
  const std::string& m = st.message();
  if (m.compare(0, old_prefix.size(), old_prefix) == 0) {
    return Error(where, key_path, m.substr(old_prefix.size()));
  }
  return st;
}

// Parses one value of config key `path` with the key's type and range; returns its canonical text.
StatusOr<std::string> ParseValue(const std::string& path, const YAML::Node& value,
                                 const std::string& key_path, const std::string& file) {
  std::string where = Loc(file, value.Mark());
  TrialConfig scratch;
  Status st = config::SetField(&scratch, path, value, where);
  if (!st.ok()) return InvalidArgument(AddTypoHint(Rekey(st, where, path, key_path).message()));
  return FieldText(config::ToJson(scratch), path);
}

// Splits a "<loc>: <path>: <message>" error (the trial-config convention) into its three parts.
bool SplitError(const std::string& m, std::string* loc, std::string* path, std::string* rest) {
  size_t a = m.find(": ");
  if (a == std::string::npos) return false;
  size_t b = m.find(": ", a + 2);
  if (b == std::string::npos) return false;
  std::string p = m.substr(a + 2, b - a - 2);
  if (p.empty() || p.find(' ') != std::string::npos) return false;
  *loc = m.substr(0, a);
  *path = p;
  *rest = m.substr(b + 2);
  return true;
}

struct Axis {
  std::string key;      // config path ("optimizer.p"), or "seed" for the seeds list
  std::string section;  // "grid", "zip" or "seeds"
  std::string list_loc;
  std::vector<YAML::Node> values;
  std::vector<std::string> texts;  // canonical
  std::vector<std::string> locs;

  std::string KeyPath() const { return section == "seeds" ? "seeds" : section + "." + key; }
  std::string KeyPath(size_t i) const { return KeyPath() + "[" + std::to_string(i) + "]"; }
};

// Reads the values of one axis list (grid, zip or seeds), checking each against the field's type.
Status ReadAxisValues(const YAML::Node& list, const std::string& file, Axis* axis) {
  std::string where = Loc(file, list.Mark());
  axis->list_loc = where;
  if (!list.IsSequence()) {
    std::string example = list.IsScalar() ? " ([" + list.Scalar() + "] for a single value)" : "";
    return Error(where, axis->KeyPath(),
                 "expected a list of values" + example + ", got " + Describe(list));
  }
  if (list.size() == 0) {
    return Error(where, axis->KeyPath(),
                 "an axis needs at least one value; an empty list makes no trial");
  }
  if (int64_t(list.size()) > kMaxEnumeratedPoints) {
    return Error(where, axis->KeyPath(),
                 "has " + std::to_string(list.size()) + " values; a sweep has at most " +
                     std::to_string(kMaxSweepTrials) + " trials");
  }
  std::unordered_map<std::string, size_t> seen;  // text -> index (linear in the list's length)
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node v = list[i];
    ABLATE_ASSIGN_OR_RETURN(std::string text, ParseValue(axis->key, v, axis->KeyPath(i), file));
    // A zip list may repeat a value in different rows; zip checks whole rows instead.
    if (axis->section != "zip") {
      auto [it, inserted] = seen.emplace(text, i);
      if (!inserted) {
        return Error(Loc(file, v.Mark()), axis->KeyPath(i),
                     "duplicate value " + text + " (already at " + axis->KeyPath(it->second) + ")");
      }
    }
    axis->values.push_back(v);
    axis->texts.push_back(std::move(text));
    axis->locs.push_back(Loc(file, v.Mark()));
  }
  return Status::Ok();
}

Status ReadAxes(const YAML::Node& map, const std::string& prefix, const std::string& section,
                const std::string& file, std::vector<Axis>* axes) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node k = it->first;  // copies: the iterator yields a temporary proxy
    const YAML::Node v = it->second;
    std::string where = Loc(file, k.Mark());
    if (!k.IsScalar()) return Error(where, section, "a key must be a plain name");
    std::string path = prefix.empty() ? k.Scalar() : prefix + "." + k.Scalar();
    std::string key_path = section + "." + path;
    if (path == "seed") {
      return Error(where, key_path, "the seed axis is the top-level list seeds: [0, 1, ...]");
    }
    if (path == "name") return Error(where, key_path, "name is a label, not an axis");
    if (path == "gpus") {
      return Error(where, key_path,
                   "GPUs per trial are set once per sweep, with resources: {gpus: N}");
    }
    if (IsConfigSection(path)) {
      if (v.IsMap()) {
        ABLATE_RETURN_IF_ERROR(ReadAxes(v, path, section, file, axes));
        continue;
      }
      return Error(where, key_path,
                   "expected a mapping of " + path + ".* axes, or a dotted key such as '" +
                       config::KnownKeys()[0] + "', got " + Describe(v));
    }
    if (!IsConfigKey(path)) {
      return Error(where, key_path,
                   "unknown trial-config key" + Hint(SuggestKeys(path, config::KnownKeys())));
    }
    for (const auto& a : *axes) {
      if (a.key == path) {
        return Error(where, key_path,
                     "this axis is already given as " + a.KeyPath() + " at " + a.list_loc +
                         "; an axis appears once");
      }
    }
    Axis axis;
    axis.key = path;
    axis.section = section;
    ABLATE_RETURN_IF_ERROR(ReadAxisValues(v, file, &axis));
    axes->push_back(std::move(axis));
  }
  return Status::Ok();
}

// One key of an exclude entry, and which values of it match.
struct ExcludeTerm {
  std::string key;
  int axis = -1;                 // index into the sweep's axes, or -1 for a key that is not an axis
  std::vector<bool> axis_match;  // per axis value: does it match
  bool base_match = false;       // for a non-axis key: does the base value match
  std::vector<std::string> texts;
};

struct ExcludeEntry {
  std::string loc;
  std::vector<ExcludeTerm> terms;
  int64_t matched = 0;
};

Status ReadExcludeTerms(const YAML::Node& map, const std::string& prefix,
                        const std::string& entry_path, const std::string& file,
                        const std::vector<Axis>& axes, const nlohmann::json& base_json,
                        ExcludeEntry* entry) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node k = it->first;  // copies: the iterator yields a temporary proxy
    const YAML::Node v = it->second;
    std::string where = Loc(file, k.Mark());
    if (!k.IsScalar()) return Error(where, entry_path, "a key must be a plain name");
    std::string key = prefix.empty() ? k.Scalar() : prefix + "." + k.Scalar();
    std::string key_path = entry_path + "." + key;
    if (IsConfigSection(key) && v.IsMap()) {
      ABLATE_RETURN_IF_ERROR(ReadExcludeTerms(v, key, entry_path, file, axes, base_json, entry));
      continue;
    }
    if (!IsConfigKey(key)) {
      std::vector<std::string> candidates;
      for (const auto& a : axes) candidates.push_back(a.key);
      for (const auto& c : config::KnownKeys()) {
        if (std::find(candidates.begin(), candidates.end(), c) == candidates.end()) {
          candidates.push_back(c);
        }
      }
      return Error(where, key_path,
                   "neither an axis nor a trial-config key" + Hint(SuggestKeys(key, candidates)));
    }
    for (const auto& t : entry->terms) {
      if (t.key == key) return Error(where, key_path, "key given twice in one exclude entry");
    }
    ExcludeTerm term;
    term.key = key;
    if (v.IsSequence()) {
      if (v.size() == 0) {
        return Error(Loc(file, v.Mark()), key_path, "an empty list matches nothing");
      }
      for (size_t i = 0; i < v.size(); ++i) {
        ABLATE_ASSIGN_OR_RETURN(
            std::string text,
            ParseValue(key, v[i], key_path + "[" + std::to_string(i) + "]", file));
        term.texts.push_back(std::move(text));
      }
    } else {
      ABLATE_ASSIGN_OR_RETURN(std::string text, ParseValue(key, v, key_path, file));
      term.texts.push_back(std::move(text));
    }
    auto matches = [&](const std::string& text) {
      return std::find(term.texts.begin(), term.texts.end(), text) != term.texts.end();
    };
    for (size_t a = 0; a < axes.size(); ++a) {
      if (axes[a].key != key) continue;
      term.axis = static_cast<int>(a);
      for (const auto& text : axes[a].texts) term.axis_match.push_back(matches(text));
    }
    if (term.axis < 0) term.base_match = matches(FieldText(base_json, key));
    entry->terms.push_back(std::move(term));
  }
  return Status::Ok();
}

// Why an entry that matched nothing can never match, for the warning.
std::string NoMatchReason(const ExcludeEntry& e, const std::vector<Axis>& axes,
                          const nlohmann::json& base_json) {
  for (const auto& t : e.terms) {
    if (t.axis < 0 && !t.base_match) {
      return t.key + " is never " + Quoted(t.texts, "or") + ": its base value is " +
             FieldText(base_json, t.key) + " and it is not an axis";
    }
    if (t.axis >= 0 &&
        std::find(t.axis_match.begin(), t.axis_match.end(), true) == t.axis_match.end()) {
      return "the axis " + axes[t.axis].KeyPath() + " never takes the value " +
             Quoted(t.texts, "or");
    }
  }
  return "no point has this combination of values";
}

Status ReadInt(const YAML::Node& n, const std::string& file, const std::string& key_path,
               int64_t lo, int64_t hi, int64_t* out) {
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
    return Error(Loc(file, n.Mark()), key_path, "expected an integer, got " + Describe(n));
  }
  if (v < lo || v > hi) {
    return Error(Loc(file, n.Mark()), key_path,
                 "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "], got " + std::to_string(v));
  }
  *out = v;
  return Status::Ok();
}

Status CheckName(const YAML::Node& n, const std::string& file, std::string* name) {
  std::string where = Loc(file, n.Mark());
  const std::string rule =
      "1-100 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit, not all digits";
  if (!n.IsScalar() || n.Scalar().empty()) {
    return Error(where, "name", "expected a sweep name (" + rule + "), got " + Describe(n));
  }
  const std::string& s = n.Scalar();
  if (s.size() > 100) {
    return Error(where, "name", "too long (" + std::to_string(s.size()) + " characters); " + rule);
  }
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && c != '.' && c != '_' && c != '-') {
      return Error(where, "name",
                   "'" + s + "' has the character '" + std::string(1, c) + "' at position " +
                       std::to_string(i + 1) + "; " + rule);
    }
    if (i == 0 && !alnum) {
      return Error(where, "name", "'" + s + "' must start with a letter or digit; " + rule);
    }
  }
  if (std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Error(where, "name",
                 "'" + s + "' is all digits, which reads as a sweep id; add a letter");
  }
  *name = s;
  return Status::Ok();
}

// The resolution ablate-train and the sweep apply after all keys are set.
void Resolve(int gpus, TrialConfig* c) {
  config::Normalize(c);
  c->gpus = std::max(1, gpus);
  if (gpus == 0 && c->device == "auto") c->device = "cpu";
}

std::string DescribePoint(const std::vector<std::pair<std::string, std::string>>& axes) {
  std::string out;
  for (const auto& [k, v] : axes) out += (out.empty() ? "" : ", ") + k + "=" + v;
  return out;
}

struct Spec {
  std::string file;
  std::string name;
  YAML::Mark root_mark;
  TrialConfig base;
  config::SourceMap base_sources;  // where base set each key
  config::SourceMap full_sources;  // every key: base's location, or the `base` mapping's
  nlohmann::json base_json;         // the resolved base, for exclude and messages
  std::vector<Axis> axes;           // grid, zip, seeds, in that order
  size_t num_grid = 0, num_zip = 0;
  bool has_seeds = false;
  std::vector<ExcludeEntry> exclude;
  bool random_order = true;
  int64_t gpus = 1, cpu_slots = 0, max_attempts = 3, priority = 0;
  int64_t gpu_share = 1;  // k: 1/k of one GPU per trial
  bool has_early_stop = false;
  EarlyStopRule early_stop;
};

// resources.gpus: a whole number 0..1024, or a share 1/k of one GPU (k = 2..64) written as a
// decimal (0.5, 0.25, 0.333) or as "1/k".
Status ReadGpus(const YAML::Node& n, const std::string& file, int64_t* gpus, int64_t* share) {
  const std::string where = Loc(file, n.Mark());
  const std::string expected =
      "expected a whole number of GPUs (0 to 1024) or a share 1/k of one GPU (0.5, 0.25, 0.125, "
      "\"1/3\", ...; k from 2 to 64)";
  if (!n.IsScalar()) return Error(where, "resources.gpus", expected + ", got " + Describe(n));
  const std::string text = n.Scalar();
  double v = 0;
  int64_t k = 0;
  if (const size_t slash = text.find('/'); slash != std::string::npos) {
    int64_t num = 0;
    YAML::Node a(text.substr(0, slash)), b(text.substr(slash + 1));
    if (!YAML::convert<int64_t>::decode(a, num) || !YAML::convert<int64_t>::decode(b, k) ||
        num != 1 || k < 2 || k > 64) {
      return Error(where, "resources.gpus", expected + ", got '" + text + "'");
    }
    *gpus = 1;
    *share = k;
    return Status::Ok();
  }
  if (!YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
    return Error(where, "resources.gpus", expected + ", got " + Describe(n));
  }
  if (v < 0 || v > 1024) return Error(where, "resources.gpus", expected + ", got " + text);
  if (v >= 1 || v == 0) {
    if (v != std::floor(v)) {
      return Error(where, "resources.gpus",
                   "a fraction above 1 (" + text +
                       ") is not allowed: a trial takes whole GPUs or a share 1/k of one");
    }
    *gpus = static_cast<int64_t>(v);
    *share = 1;
    return Status::Ok();
  }
  k = std::llround(1 / v);
  if (k < 2 || k > 64 || std::fabs(v * double(k) - 1) > 1e-3) {
    return Error(where, "resources.gpus",
                 expected + ", got " + text + " (not 1/k for a whole k)");
  }
  *gpus = 1;
  *share = k;
  return Status::Ok();
}

// early_stop: {rule, metric, mode, grace_steps, reduction, interval, min_configs, per_trial,
// factors} (sweep.h). Read after the axes and the base (factors name axes; the defaults come
// from base.train).
Status ReadEarlyStop(const YAML::Node& n, Spec* spec) {
  const std::string& file = spec->file;
  if (!n.IsMap()) {
    return Error(Loc(file, n.Mark()), "early_stop",
                 "expected a mapping such as {rule: asha, metric: val_loss, grace_steps: 100}, got " +
                     Describe(n));
  }
  EarlyStopRule& r = spec->early_stop;
  r.max_steps = spec->base.train.steps;
  const std::vector<std::string> known = {"rule",     "metric",      "mode",      "grace_steps",
                                          "reduction", "interval",   "min_configs", "per_trial",
                                          "factors"};
  bool factors_given = false, interval_given = false, grace_given = false;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node k = it->first;
    const YAML::Node v = it->second;
    const std::string where = Loc(file, k.Mark());
    if (!k.IsScalar()) return Error(where, "early_stop", "a key must be a plain name");
    const std::string key = k.Scalar();
    const std::string path = "early_stop." + key;
    auto word = [&](const std::vector<std::string>& allowed, std::string* out) -> Status {
      if (!v.IsScalar() || std::find(allowed.begin(), allowed.end(), v.Scalar()) == allowed.end()) {
        std::vector<std::string> hint;
        if (v.IsScalar()) hint = SuggestKeys(v.Scalar(), allowed);
        return Error(Loc(file, v.Mark()), path,
                     "expected " + Quoted(allowed, "or") + ", got " +
                         (v.IsScalar() ? "'" + v.Scalar() + "'" : Describe(v)) + Hint(hint));
      }
      *out = v.Scalar();
      return Status::Ok();
    };
    if (key == "rule") {
      ABLATE_RETURN_IF_ERROR(word({"asha", "median"}, &r.rule));
    } else if (key == "metric") {
      if (!v.IsScalar() || v.Scalar().empty() || v.Scalar().size() > 200) {
        return Error(Loc(file, v.Mark()), path,
                     "expected a metric name such as val_loss, got " + Describe(v));
      }
      r.metric = v.Scalar();
    } else if (key == "mode") {
      std::string mode;
      ABLATE_RETURN_IF_ERROR(word({"min", "max"}, &mode));
      r.minimize = mode == "min";
    } else if (key == "grace_steps") {
      ABLATE_RETURN_IF_ERROR(ReadInt(v, file, path, 1, 1 << 30, &r.grace_steps));
      grace_given = true;
    } else if (key == "interval") {
      ABLATE_RETURN_IF_ERROR(ReadInt(v, file, path, 1, 1 << 30, &r.interval));
      interval_given = true;
    } else if (key == "min_configs") {
      int64_t m = 0;
      ABLATE_RETURN_IF_ERROR(ReadInt(v, file, path, 1, 1000, &m));
      r.min_configs = static_cast<int>(m);
    } else if (key == "reduction") {
      double d = 0;
      if (!v.IsScalar() || !YAML::convert<double>::decode(v, d) || !std::isfinite(d) || d <= 1 ||
          d > 100) {
        return Error(Loc(file, v.Mark()), path,
                     "expected a number above 1 (at most 100), such as 3, got " +
                         (v.IsScalar() ? v.Scalar() : Describe(v)));
      }
      r.reduction = d;
    } else if (key == "per_trial") {
      bool b = false;
      if (!v.IsScalar() || !YAML::convert<bool>::decode(v, b)) {
        return Error(Loc(file, v.Mark()), path, "expected true or false, got " + Describe(v));
      }
      r.per_trial = b;
    } else if (key == "factors") {
      if (!v.IsSequence()) {
        return Error(Loc(file, v.Mark()), path,
                     "expected a list of axes (e.g. [attention.kind]), got " + Describe(v));
      }
      factors_given = true;
      for (size_t i = 0; i < v.size(); ++i) {
        const YAML::Node f = v[i];
        const std::string fpath = path + "[" + std::to_string(i) + "]";
        std::vector<std::string> axis_names;
        for (const auto& a : spec->axes) {
          if (a.key != "seed") axis_names.push_back(a.key);
        }
        if (!f.IsScalar() ||
            std::find(axis_names.begin(), axis_names.end(), f.Scalar()) == axis_names.end()) {
          std::vector<std::string> hint;
          if (f.IsScalar()) hint = SuggestKeys(f.Scalar(), axis_names);
          return Error(Loc(file, f.Mark()), fpath,
                       (f.IsScalar() ? "'" + f.Scalar() + "'" : Describe(f)) +
                           " is not an axis of this sweep" + Hint(hint) + "; its axes: " +
                           (axis_names.empty() ? std::string("none") : Quoted(axis_names, "and")));
        }
        if (std::find(r.factors.begin(), r.factors.end(), f.Scalar()) != r.factors.end()) {
          return Error(Loc(file, f.Mark()), fpath, "'" + f.Scalar() + "' is listed twice");
        }
        r.factors.push_back(f.Scalar());
      }
    } else {
      return Error(where, path,
                   "unknown early_stop key" + Hint(SuggestKeys(key, known)) + "; known: " +
                       Quoted(known, "and"));
    }
  }
  if (r.rule.empty()) {
    return Error(Loc(file, n.Mark()), "early_stop.rule", "missing; expected asha or median");
  }
  if (!grace_given) r.grace_steps = spec->base.train.eval_every;
  if (!interval_given) r.interval = r.grace_steps;
  if (r.rule != "median" && interval_given) {
    return Error(Loc(file, n.Mark()), "early_stop.interval",
                 "is a key of rule median; asha's rungs are grace_steps x reduction^i");
  }
  if (r.grace_steps >= r.max_steps) {
    return Error(Loc(file, n.Mark()), "early_stop.grace_steps",
                 std::to_string(r.grace_steps) + " is not below base.train.steps (" +
                     std::to_string(r.max_steps) + "): no trial would be judged before its end");
  }
  std::vector<std::string> nuisance;
  for (const auto& a : spec->axes) {
    if (a.key != "seed") nuisance.push_back(a.key);
  }
  if (!factors_given && nuisance.size() > 1) {
    return Error(Loc(file, n.Mark()), "early_stop.factors",
                 "missing: this sweep has the axes " + Quoted(nuisance, "and") +
                     "; name the study's factors (configurations are compared only with those "
                     "of equal factor values, e.g. factors: [" + nuisance[0] +
                     "]), or factors: [] to compare across every axis");
  }
  return Status::Ok();
}

Status ReadSpec(const YAML::Node& root, Spec* spec) {
  const std::string& file = spec->file;
  if (!root || root.IsNull()) {
    return Error(file + ":1:1", "spec",
                 "the sweep spec is empty; expected a mapping with name, base, grid, ...");
  }
  if (!root.IsMap()) {
    return Error(
        Loc(file, root.Mark()), "spec",
        "expected a mapping with name, base, grid, ... at the top level, got " + Describe(root));
  }
  spec->root_mark = root.Mark();
  std::map<std::string, YAML::Node> top;
  std::map<std::string, YAML::Mark> key_marks;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const YAML::Node k = it->first;  // copies: the iterator yields a temporary proxy
    std::string where = Loc(file, k.Mark());
    if (!k.IsScalar()) return Error(where, "spec", "a key must be a plain name");
    const std::string& key = k.Scalar();
    if (std::find(SpecKeys().begin(), SpecKeys().end(), key) == SpecKeys().end()) {
      std::vector<std::string> hint = SuggestKeys(key, SpecKeys());
      std::string base_note;
      if (IsConfigKey(key) || IsConfigSection(key)) {
        base_note = "; trial-config keys go under base: (base." + key + ")";
      }
      return Error(where, key,
                   "unknown sweep key" + Hint(hint) + base_note + "; sweep keys are " +
                       Quoted(SpecKeys(), "and"));
    }
    if (top.count(key)) {
      return Error(where, key, "key given twice (first at " + Loc(file, key_marks[key]) + ")");
    }
    top[key] = it->second;
    key_marks[key] = k.Mark();
  }
  auto get = [&](const std::string& key) -> YAML::Node {
    auto it = top.find(key);
    return it == top.end() ? YAML::Node() : it->second;
  };
  auto present = [&](const YAML::Node& n) { return n.IsDefined() && !n.IsNull(); };

  // name
  YAML::Node name = get("name");
  if (!present(name)) {
    return Error(Loc(file, root.Mark()), "name",
                 "missing; every sweep needs a name (e.g. name: qknorm-vs-tokens-per-step)");
  }
  ABLATE_RETURN_IF_ERROR(CheckName(name, file, &spec->name));

  // resources (before base: the device rule and config.gpus depend on it)
  YAML::Node res = get("resources");
  bool cpu_slots_given = false, gpus_given = false;
  YAML::Node slots_node;
  if (present(res)) {
    if (!res.IsMap()) {
      return Error(Loc(file, res.Mark()), "resources",
                   "expected a mapping such as {gpus: 1}, got " + Describe(res));
    }
    const std::vector<std::string> known = {"gpus", "cpu_slots"};
    for (auto it = res.begin(); it != res.end(); ++it) {
      std::string where = Loc(file, it->first.Mark());
      if (!it->first.IsScalar()) return Error(where, "resources", "a key must be a plain name");
      std::string key = it->first.Scalar();
      if (key == "gpus") {
        ABLATE_RETURN_IF_ERROR(ReadGpus(it->second, file, &spec->gpus, &spec->gpu_share));
        gpus_given = true;
      } else if (key == "cpu_slots") {
        ABLATE_RETURN_IF_ERROR(
            ReadInt(it->second, file, "resources.cpu_slots", 1, 1024, &spec->cpu_slots));
        cpu_slots_given = true;
        slots_node = it->second;
      } else {
        return Error(
            where, "resources." + key,
            "unknown resource" + Hint(SuggestKeys(key, known)) + "; known: gpus, cpu_slots");
      }
    }
  }

  // base
  YAML::Node base = get("base");
  YAML::Mark base_mark = root.Mark();
  spec->base_sources.file = file;
  if (present(base)) {
    if (!base.IsMap()) {
      return Error(Loc(file, base.Mark()), "base",
                   "expected a mapping of trial-config keys, got " + Describe(base));
    }
    base_mark = base.Mark();
    Status st = config::ApplyYaml(base, file, &spec->base, &spec->base_sources);
    if (!st.ok()) {
      std::string loc, path, rest;
      std::string message = AddTypoHint(st.message());
      if (SplitError(message, &loc, &path, &rest)) return Error(loc, "base." + path, rest);
      return InvalidArgument(message);
    }
  }
  for (const auto& [path, loc] : spec->base_sources.locations) {
    if (path == "gpus") {
      return Error(loc, "base.gpus",
                   "set GPUs per trial with resources: {gpus: N} (0 for CPU trials), not in base");
    }
  }
  // A base that asks for the CPU without resources.gpus is a CPU trial (it holds no GPU).
  if (!gpus_given && spec->base.device == "cpu") spec->gpus = 0;
  if (cpu_slots_given && spec->gpus > 0) {
    return Error(Loc(file, slots_node.Mark()), "resources.cpu_slots",
                 "only CPU trials (gpus: 0) take CPU slots; this sweep asks for " +
                     std::to_string(spec->gpus) + " GPU(s) per trial");
  }
  if (spec->gpus == 0 && !cpu_slots_given) spec->cpu_slots = 1;
  if (spec->base.name.empty()) spec->base.name = spec->name;
  spec->full_sources.file = file;
  for (const auto& k : config::KnownKeys()) {
    spec->full_sources.locations.emplace_back(k, Loc(file, base_mark));
  }
  for (const auto& l : spec->base_sources.locations) spec->full_sources.locations.push_back(l);
  TrialConfig resolved_base = spec->base;
  Resolve(static_cast<int>(spec->gpus), &resolved_base);
  spec->base_json = config::ToJson(resolved_base);

  // grid, zip
  for (const char* section : {"grid", "zip"}) {
    YAML::Node n = get(section);
    if (!present(n)) continue;
    if (!n.IsMap()) {
      return Error(Loc(file, n.Mark()), section,
                   std::string("expected a mapping of axis -> list of values (e.g. ") + section +
                       ": {attention.kind: [fpa, sagebwd]}), got " + Describe(n));
    }
    ABLATE_RETURN_IF_ERROR(ReadAxes(n, "", section, file, &spec->axes));
    if (std::string(section) == "grid") spec->num_grid = spec->axes.size();
  }
  spec->num_zip = spec->axes.size() - spec->num_grid;
  for (size_t a = spec->num_grid + 1; a < spec->axes.size(); ++a) {
    const Axis& first = spec->axes[spec->num_grid];
    const Axis& axis = spec->axes[a];
    if (axis.values.size() != first.values.size()) {
      return Error(axis.list_loc, axis.KeyPath(),
                   "has " + std::to_string(axis.values.size()) + " values but " + first.KeyPath() +
                       " has " + std::to_string(first.values.size()) +
                       "; every zip list must have the same length (row i takes the i-th value "
                       "of each)");
    }
  }

  if (spec->num_zip > 0) {
    const size_t rows = spec->axes[spec->num_grid].values.size();
    std::unordered_map<std::string, size_t> seen;  // a row's texts, '\0'-joined -> its index
    for (size_t j = 0; j < rows; ++j) {
      std::string row;
      for (size_t a = spec->num_grid; a < spec->axes.size(); ++a) {
        row += spec->axes[a].texts[j];
        row += '\0';
      }
      auto [it, inserted] = seen.emplace(std::move(row), j);
      if (!inserted) {
        const Axis& first = spec->axes[spec->num_grid];
        return Error(first.locs[j], "zip",
                     "row " + std::to_string(j) + " (" + first.KeyPath(j) + ", ...) repeats row " +
                         std::to_string(it->second) + "; each zip row must differ in some axis");
      }
    }
  }

  // seeds
  YAML::Node seeds = get("seeds");
  if (present(seeds)) {
    Axis axis;
    axis.key = "seed";
    axis.section = "seeds";
    if (seeds.IsSequence() && seeds.size() == 0) {
      return Error(Loc(file, seeds.Mark()), "seeds",
                   "an empty list makes no trial; leave seeds out to use base.seed");
    }
    ABLATE_RETURN_IF_ERROR(ReadAxisValues(seeds, file, &axis));
    spec->axes.push_back(std::move(axis));
    spec->has_seeds = true;
  }

  // exclude
  YAML::Node exclude = get("exclude");
  if (present(exclude)) {
    if (!exclude.IsSequence()) {
      return Error(Loc(file, exclude.Mark()), "exclude",
                   "expected a list of mappings (e.g. [{attention.kind: fpa, "
                   "attention.smooth_k: false}]), got " +
                       Describe(exclude));
    }
    for (size_t i = 0; i < exclude.size(); ++i) {
      const YAML::Node e = exclude[i];
      std::string entry_path = "exclude[" + std::to_string(i) + "]";
      if (!e.IsMap()) {
        return Error(Loc(file, e.Mark()), entry_path,
                     "expected a mapping of key -> value, got " + Describe(e));
      }
      if (e.size() == 0) {
        return Error(Loc(file, e.Mark()), entry_path, "an empty entry would drop every point");
      }
      ExcludeEntry entry;
      entry.loc = Loc(file, e.Mark());
      ABLATE_RETURN_IF_ERROR(
          ReadExcludeTerms(e, "", entry_path, file, spec->axes, spec->base_json, &entry));
      spec->exclude.push_back(std::move(entry));
    }
  }

  // order, max_attempts, priority
  YAML::Node order = get("order");
  if (present(order)) {
    const std::vector<std::string> known = {"random", "grid"};
    if (!order.IsScalar() || std::find(known.begin(), known.end(), order.Scalar()) == known.end()) {
      std::string got = order.IsScalar() ? "'" + order.Scalar() + "'" : Describe(order);
      std::vector<std::string> hint;
      if (order.IsScalar()) hint = SuggestKeys(order.Scalar(), known);
      return Error(Loc(file, order.Mark()), "order",
                   "expected random or grid, got " + got + Hint(hint));
    }
    spec->random_order = order.Scalar() == "random";
  }
  if (YAML::Node n = get("max_attempts"); present(n)) {
    ABLATE_RETURN_IF_ERROR(ReadInt(n, file, "max_attempts", 1, 100, &spec->max_attempts));
  }
  if (YAML::Node n = get("priority"); present(n)) {
    ABLATE_RETURN_IF_ERROR(ReadInt(n, file, "priority", -1000000, 1000000, &spec->priority));
  }
  if (YAML::Node n = get("early_stop"); present(n)) {
    ABLATE_RETURN_IF_ERROR(ReadEarlyStop(n, spec));
    spec->has_early_stop = true;
  }
  return Status::Ok();
}

// Walks the points in grid order: seeds outermost, then the grid axes (the last fastest), then the
// zip row. `visit(value_index_per_axis)` returns false to stop.
template <typename Visit>
void ForEachPoint(const Spec& spec, Visit visit) {
  // Dimensions, outermost first; each lists the axes it drives.
  std::vector<std::pair<size_t, std::vector<size_t>>> dims;
  if (spec.has_seeds) dims.push_back({spec.axes.back().values.size(), {spec.axes.size() - 1}});
  for (size_t a = 0; a < spec.num_grid; ++a) dims.push_back({spec.axes[a].values.size(), {a}});
  if (spec.num_zip > 0) {
    std::vector<size_t> zip_axes;
    for (size_t a = spec.num_grid; a < spec.num_grid + spec.num_zip; ++a) zip_axes.push_back(a);
    dims.push_back({spec.axes[spec.num_grid].values.size(), zip_axes});
  }
  std::vector<size_t> counter(dims.size(), 0);
  std::vector<size_t> point(spec.axes.size(), 0);
  while (true) {
    if (!visit(point)) return;
    // Increment the mixed-radix counter, last dimension fastest.
    size_t d = dims.size();
    while (d > 0) {
      --d;
      if (++counter[d] < dims[d].first) break;
      counter[d] = 0;
      if (d == 0) return;
    }
    if (dims.empty()) return;
    for (size_t i = 0; i < dims.size(); ++i) {
      for (size_t a : dims[i].second) point[a] = counter[i];
    }
  }
}

bool Excluded(std::vector<ExcludeEntry>& entries, const std::vector<size_t>& point) {
  bool excluded = false;
  for (auto& e : entries) {
    bool all = true;
    for (const auto& t : e.terms) {
      if (!(t.axis >= 0 ? t.axis_match[point[t.axis]] : t.base_match)) {
        all = false;
        break;
      }
    }
    if (all) {
      ++e.matched;
      excluded = true;
    }
  }
  return excluded;
}

// Builds the point's config; on failure, the error names the point and the offending value.
Status BuildPoint(const Spec& spec, const std::vector<size_t>& point, ExpandedTrial* trial) {
  TrialConfig c = spec.base;
  trial->axes.clear();
  for (size_t a = 0; a < spec.axes.size(); ++a) {
    const Axis& axis = spec.axes[a];
    ABLATE_RETURN_IF_ERROR(
        Rekey(config::SetField(&c, axis.key, axis.values[point[a]], axis.locs[point[a]]),
              axis.locs[point[a]], axis.key, axis.KeyPath(point[a])));
    trial->axes.emplace_back(axis.key, axis.texts[point[a]]);
  }
  int gpus = static_cast<int>(spec.gpus);
  Resolve(gpus, &c);

  // Locates a config key for this point: its axis value, its base value, or the `base` mapping.
  auto locate = [&](const std::string& path, std::string* loc, std::string* key_path) {
    for (size_t a = 0; a < spec.axes.size(); ++a) {
      if (spec.axes[a].key == path) {
        *loc = spec.axes[a].locs[point[a]];
        *key_path = spec.axes[a].KeyPath(point[a]);
        return;
      }
    }
    *loc = spec.full_sources.Locate(path);
    *key_path = path;
    for (const auto& l : spec.base_sources.locations) {
      if (l.first == path) *key_path = "base." + path;
    }
  };
  auto point_note = [&]() {
    return trial->axes.empty() ? std::string() : " (point: " + DescribePoint(trial->axes) + ")";
  };

  Status st;
  if (gpus == 0 && c.device == "cuda") {
    std::string loc, key_path;
    locate("device", &loc, &key_path);
    st = Error(loc, key_path,
               "device cuda needs GPUs, but resources.gpus is 0 (CPU trials); set resources: "
               "{gpus: 1} or device: cpu");
  } else if (gpus > 0 && c.device == "cpu") {
    std::string loc, key_path;
    locate("device", &loc, &key_path);
    st = Error(loc, key_path,
               "device cpu with resources.gpus " + std::to_string(gpus) +
                   " would hold GPUs it never uses; CPU trials take resources: {gpus: 0}");
  } else {
    st = config::Validate(c, spec.base_sources);
    if (!st.ok()) {
      std::string loc, path, rest;
      if (SplitError(st.message(), &loc, &path, &rest) && IsConfigKey(path)) {
        std::string key_path;
        locate(path, &loc, &key_path);
        st = Error(loc, key_path, rest);
      }
    }
  }
  if (!st.ok()) return InvalidArgument(st.message() + point_note());

  trial->config_hash = config::ConfigHash(c);
  trial->config_json = config::ToJson(c).dump();
  trial->config = std::move(c);
  return Status::Ok();
}

}  // namespace

std::vector<size_t> SeededPermutation(size_t n, const std::string& name) {
  uint64_t state = Fnv1a64(name);
  auto next = [&state]() {  // SplitMix64
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), size_t{0});
  for (size_t i = n; i > 1; --i) {
    // j uniform in [0, i): the high 64 bits of r * i (no modulo bias to speak of, no loop).
    size_t j = static_cast<size_t>((static_cast<unsigned __int128>(next()) * i) >> 64);
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

std::vector<int64_t> EarlyStopRule::RungSteps() const {
  std::vector<int64_t> out;
  if (grace_steps <= 0) return out;
  if (rule == "median") {
    const int64_t every = interval > 0 ? interval : grace_steps;
    for (int64_t s = grace_steps; s < max_steps; s += every) out.push_back(s);
    return out;
  }
  double at = double(grace_steps);
  for (int i = 0; i < 64; ++i, at *= reduction) {
    const int64_t s = std::llround(at);
    if (s >= max_steps) break;
    if (out.empty() || s > out.back()) out.push_back(s);
  }
  return out;
}

std::string EarlyStopRule::ToJson() const {
  nlohmann::json j = {{"rule", rule},
                      {"metric", metric},
                      {"mode", minimize ? "min" : "max"},
                      {"grace_steps", grace_steps},
                      {"per_trial", per_trial},
                      {"factors", factors},
                      {"max_steps", max_steps}};
  if (rule == "asha") j["reduction"] = reduction;
  if (rule == "median") {
    j["interval"] = interval;
    j["min_configs"] = min_configs;
  }
  return j.dump();
}

StatusOr<EarlyStopRule> EarlyStopRuleFromJson(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return InvalidArgument("early_stop: stored rule is not a JSON object");
  try {
    EarlyStopRule r;
    r.rule = j.at("rule").get<std::string>();
    r.metric = j.at("metric").get<std::string>();
    r.minimize = j.value("mode", std::string("min")) == "min";
    r.grace_steps = j.at("grace_steps").get<int64_t>();
    r.reduction = j.value("reduction", 3.0);
    r.interval = j.value("interval", r.grace_steps);
    r.min_configs = j.value("min_configs", 3);
    r.per_trial = j.value("per_trial", false);
    r.factors = j.value("factors", std::vector<std::string>());
    r.max_steps = j.at("max_steps").get<int64_t>();
    if (r.rule != "asha" && r.rule != "median") {
      return InvalidArgument("early_stop: stored rule '" + r.rule + "' is unknown");
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("early_stop: stored rule: ") + e.what());
  }
}

StatusOr<ExpandedSweep> ExpandSweep(const std::string& yaml_text, const std::string& file,
                                    const ExpandOptions& options) {
  Spec spec;
  spec.file = file;
  try {
    ABLATE_ASSIGN_OR_RETURN(YAML::Node root, config::LoadYamlDocument(yaml_text, file, "spec: "));
    ABLATE_RETURN_IF_ERROR(ReadSpec(root, &spec));

    // Count first, so an enormous grid fails fast without building configs.
    int64_t points = 1;
    auto mul = [&points](size_t n) {
      points = (points > kMaxEnumeratedPoints) ? points : points * static_cast<int64_t>(n);
    };
    for (size_t a = 0; a < spec.num_grid; ++a) mul(spec.axes[a].values.size());
    if (spec.num_zip > 0) mul(spec.axes[spec.num_grid].values.size());
    if (spec.has_seeds) mul(spec.axes.back().values.size());
    if (points > kMaxEnumeratedPoints) {
      return Error(Loc(file, spec.root_mark), "grid",
                   "the sweep has more than " + std::to_string(kMaxEnumeratedPoints) +
                       " points (grid x zip x seeds); at most " + std::to_string(kMaxSweepTrials) +
                       " trials are allowed");
    }
    std::vector<std::vector<size_t>> kept;
    ForEachPoint(spec, [&](const std::vector<size_t>& point) {
      if (!Excluded(spec.exclude, point)) kept.push_back(point);
      return true;
    });
    int64_t n = static_cast<int64_t>(kept.size());
    std::string count_text = std::to_string(n) + " trial" + (n == 1 ? "" : "s") + " (" +
                             std::to_string(points) + " points, " + std::to_string(points - n) +
                             " excluded)";
    if (n == 0) {
      return Error(Loc(file, spec.root_mark), "exclude",
                   "the sweep expands to no trial: every one of its " + std::to_string(points) +
                       " points is excluded");
    }
    if (n > kMaxSweepTrials) {
      return Error(Loc(file, spec.root_mark), "grid",
                   "the sweep expands to " + count_text + ", more than the hard limit of " +
                       std::to_string(kMaxSweepTrials) + " even with force");
    }
    if (n > options.max_trials && !options.force) {
      return Error(Loc(file, spec.root_mark), "grid",
                   "the sweep expands to " + count_text + ", more than the limit of " +
                       std::to_string(options.max_trials) +
                       "; check the grid, or submit with force (ablate submit --force)");
    }

    ExpandedSweep out;
    out.name = spec.name;
    out.spec_yaml = yaml_text;
    out.priority = static_cast<int>(spec.priority);
    out.max_attempts = static_cast<int>(spec.max_attempts);
    out.gpus = static_cast<int>(spec.gpus);
    out.cpu_slots = static_cast<int>(spec.cpu_slots);
    out.gpu_share = static_cast<int>(spec.gpu_share);
    out.has_early_stop = spec.has_early_stop;
    out.early_stop = spec.early_stop;
    if (spec.has_early_stop) {
      const EarlyStopRule& r = spec.early_stop;
      if (r.metric == "val_loss" && r.grace_steps % spec.base.train.eval_every != 0) {
        out.warnings.push_back("early_stop.grace_steps " + std::to_string(r.grace_steps) +
                               " is not a multiple of base.train.eval_every (" +
                               std::to_string(spec.base.train.eval_every) +
                               "): each rung takes the first val_loss at or after its step");
      }
      if (!r.per_trial && r.factors.size() + (spec.has_seeds ? 1 : 0) == spec.axes.size()) {
        out.warnings.push_back(
            "early_stop can stop nothing: every axis but seed is a factor, so each "
            "configuration is compared with itself only");
      }
    }
    for (const auto& a : spec.axes) out.axes.push_back(a.key);
    for (size_t i = 0; i < spec.exclude.size(); ++i) {
      if (spec.exclude[i].matched == 0) {
        out.warnings.push_back(
            spec.exclude[i].loc + ": exclude[" + std::to_string(i) +
            "] matches no point: " + NoMatchReason(spec.exclude[i], spec.axes, spec.base_json));
      }
    }

    Status first_error;
    int64_t failures = 0;
    std::unordered_map<std::string, size_t> by_hash;
    int64_t duplicates = 0;
    std::string duplicate_example;
    for (const auto& point : kept) {
      ExpandedTrial trial;
      Status st = BuildPoint(spec, point, &trial);
      if (!st.ok()) {
        if (failures++ == 0) first_error = st;
        continue;
      }
      if (failures > 0) continue;
      auto [it, inserted] = by_hash.emplace(trial.config_hash, out.trials.size());
      if (!inserted) {
        if (duplicates++ == 0) {
          duplicate_example = DescribePoint(trial.axes) + " resolves to the same config as " +
                              DescribePoint(out.trials[it->second].axes);
        }
        continue;
      }
      out.trials.push_back(std::move(trial));
    }
    if (failures > 0) {
      std::string more = failures == 1 ? ""
                                       : "; " + std::to_string(failures - 1) + " more of the " +
                                             std::to_string(n) + " points fail validation";
      return InvalidArgument(first_error.message() + more);
    }
    if (duplicates > 0) {
      out.warnings.push_back(std::to_string(duplicates) + " point" + (duplicates == 1 ? "" : "s") +
                             " dropped as duplicates of another point's config (e.g. " +
                             duplicate_example + ")");
    }
    if (spec.has_early_stop && spec.has_seeds) {
      // Early stopping judges a configuration's seeds together: they are kept adjacent (the seed
      // loop innermost), so they run together; order: random shuffles the configurations.
      std::vector<std::vector<ExpandedTrial>> configs;
      std::unordered_map<std::string, size_t> index;
      for (auto& t : out.trials) {
        std::string key;
        for (const auto& [k, v] : t.axes) {
          if (k != "seed") key += k + "=" + v + '\0';
        }
        auto [it, inserted] = index.emplace(key, configs.size());
        if (inserted) configs.emplace_back();
        configs[it->second].push_back(std::move(t));
      }
      std::vector<size_t> perm(configs.size());
      std::iota(perm.begin(), perm.end(), size_t{0});
      if (spec.random_order) perm = SeededPermutation(configs.size(), spec.name);
      out.trials.clear();
      for (size_t i : perm) {
        for (auto& t : configs[i]) out.trials.push_back(std::move(t));
      }
    } else if (spec.random_order) {
      std::vector<size_t> perm = SeededPermutation(out.trials.size(), spec.name);
      std::vector<ExpandedTrial> shuffled;
      shuffled.reserve(out.trials.size());
      for (size_t i : perm) shuffled.push_back(std::move(out.trials[i]));
      out.trials = std::move(shuffled);
    }
    for (size_t i = 0; i < out.trials.size(); ++i)
      out.trials[i].order_key = static_cast<int64_t>(i);
    return out;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(Loc(file, e.mark) + ": spec: " + e.msg);
  }
}

}  // namespace ablate::server
