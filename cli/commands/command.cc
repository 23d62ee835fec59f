#include "commands/command.h"

#include <CLI/CLI.hpp>
#include <charconv>

namespace ablate::cli {
namespace {

std::optional<int64_t> ParsePositiveInt(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

void AddFormatOption(CLI::App* sub, std::string* format) {
  sub->add_option("--format", *format, "Output format: table, json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->default_str("table");
}

StatusOr<Target> ParseTarget(std::string_view arg) {
  Target t;
  if (arg.empty()) return InvalidArgument("empty sweep or trial reference");
  if (StartsWith(arg, "trial:")) {
    auto id = ParsePositiveInt(arg.substr(6));
    if (!id)
      return InvalidArgument("'" + std::string(arg) + "': expected trial:ID with a positive ID");
    t.is_trial = true;
    t.trial_id = *id;
    return t;
  }
  if (auto id = ParsePositiveInt(arg)) {
    t.is_trial = true;
    t.trial_id = *id;
    return t;
  }
  ABLATE_ASSIGN_OR_RETURN(t.sweep, ParseSweepRef(arg));
  return t;
}

StatusOr<std::string> ParseSweepRef(std::string_view arg) {
  if (StartsWith(arg, "sweep:")) {
    auto id = ParsePositiveInt(arg.substr(6));
    if (!id)
      return InvalidArgument("'" + std::string(arg) + "': expected sweep:ID with a positive ID");
    return std::to_string(*id);
  }
  if (arg.empty()) return InvalidArgument("empty sweep name");
  if (arg.find(':') != std::string_view::npos) {
    return InvalidArgument("'" + std::string(arg) +
                           "': expected a sweep name or sweep:ID (sweep names have no ':')");
  }
  return std::string(arg);
}

StatusOr<int64_t> ParseTrialRef(std::string_view arg) {
  std::string_view id = StartsWith(arg, "trial:") ? arg.substr(6) : arg;
  if (auto v = ParsePositiveInt(id)) return *v;
  return InvalidArgument("'" + std::string(arg) +
                         "': expected a trial id (a positive integer or trial:ID)");
}

int StateCount(const v1::SweepInfo& sweep, const std::string& state) {
  auto it = sweep.counts().find(state);
  return it == sweep.counts().end() ? 0 : it->second;
}

int FinishedCount(const v1::SweepInfo& sweep) {
  return StateCount(sweep, "succeeded") + StateCount(sweep, "failed") +
         StateCount(sweep, "diverged") + StateCount(sweep, "canceled") +
         StateCount(sweep, "stopped");
}

}  // namespace ablate::cli
