// GPT-2's BPE tokenizer (trainer/data/bpe.h) against known encodings, its pre-tokenizer against
// GPT-2's pattern case by case, and Encode against the npm package's own JavaScript encoder
// (gpt-3-encoder, run with node) on the built-in corpora's text; and the shards prepared from
// documents with it (trainer/data/prepare.h).
#include "trainer/data/bpe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "temp_dir.h"
#include "trainer/data/corpora.h"
#include "trainer/data/prepare.h"
#include "trainer/data/shards.h"

namespace ablate::trainer {
namespace {

using Pieces = std::vector<std::string>;

Pieces Pre(std::string_view s) {
  Pieces out;
  for (auto p : Gpt2Tokenizer::PreTokenize(s)) out.emplace_back(p);
  return out;
}

TEST(Gpt2PreTokenize, FollowsGpt2sPattern) {
  EXPECT_EQ(Pre("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Pre("it's we'll they've I'd"),
            (Pieces{"it", "'s", " we", "'ll", " they", "'ve", " I", "'d"}));
  EXPECT_EQ(Pre("a  b"), (Pieces{"a", " ", " b"}));             // \s+(?!\S) leaves one space
  EXPECT_EQ(Pre("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));      // ... and a lone \n is \s+
  EXPECT_EQ(Pre("x   "), (Pieces{"x", "   "}));                   // trailing spaces: one piece
  EXPECT_EQ(Pre("3.14 and 42!?"), (Pieces{"3", ".", "14", " and", " 42", "!?"}));
  EXPECT_EQ(Pre("!'s"), (Pieces{"!'", "s"}));                    // ' inside a punctuation run
  EXPECT_EQ(Pre("naïve café"), (Pieces{"naïve", " café"}));      // Unicode letters
  EXPECT_EQ(Pre("Ⅻ ٣"), (Pieces{"Ⅻ", " ٣"}));                    // Unicode numbers
  EXPECT_EQ(Pre("a\xff" "b"), (Pieces{"a", "\xff", "b"}));       // an invalid byte: its own piece
  std::string joined;
  for (const auto& p : Pre("Mixed: 12 cats, 'quoted'\n\n  end  ")) joined += p;
  EXPECT_EQ(joined, "Mixed: 12 cats, 'quoted'\n\n  end  ");
}

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto dir = Gpt2Tokenizer::DefaultDir();
    if (!dir.ok()) return;
    auto t = Gpt2Tokenizer::Load(*dir);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    dir_ = new std::string(*dir);
    tok_ = new Gpt2Tokenizer(std::move(*t));
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "the GPT-2 vocabulary is not installed (scripts/fetch_corpora.sh)";
  }
  static std::string* dir_;
  static Gpt2Tokenizer* tok_;
};
std::string* Gpt2TokenizerTest::dir_ = nullptr;
Gpt2Tokenizer* Gpt2TokenizerTest::tok_ = nullptr;

TEST_F(Gpt2TokenizerTest, KnownEncodingsAndRoundTrips) {
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->end_of_text(), 50256);
  // GPT-2's published ids.
  EXPECT_EQ(tok_->Encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok_->Encode(" the"), (std::vector<int32_t>{262}));
  for (const std::string& s : std::vector<std::string>{"", "naïve café, 3.14!\n\n  x",
                                                       std::string("\xff\xfe a \x80", 6),
                                                       "tabs\tand\r\nCRLF"}) {
    EXPECT_EQ(tok_->Decode(tok_->Encode(s)), s);
  }
}

TEST_F(Gpt2TokenizerTest, EqualsTheReferenceEncoderOnTheCorpora) {
  // The npm package's JavaScript encoder on the same text (node is installed with the corpora).
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  auto brown = LoadBuiltinCorpus("brown");
  ASSERT_TRUE(brown.ok()) << brown.status().ToString();
  // 80 KB from the middle and the nlp corpus's first 40 KB: prose, numbers, quotes, punctuation
  // (the reference encoder needs ~5 s for them).
  std::string text = brown->substr(brown->size() / 2, 80000);
  auto nlp = LoadBuiltinCorpus("nlp");
  if (nlp.ok()) text += "\n\n" + nlp->substr(0, 40000);
  const ::ablate::testing::TempDir scratch("ablate_bpe");
  const std::string tmp = scratch.path();
  std::ofstream(tmp + "/in.txt", std::ios::binary) << text;
  const std::string cmd = "node -e \"const e=require('" + *dir_ +
                          "');const fs=require('fs');fs.writeFileSync('" + tmp +
                          "/out.json',JSON.stringify(e.encode(fs.readFileSync('" + tmp +
                          "/in.txt','utf8'))))\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(tmp + "/out.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<int32_t> want = ref.get<std::vector<int32_t>>();
  const std::vector<int32_t> got = tok_->Encode(text);
  ASSERT_GT(want.size(), 20000u);
  size_t first = 0;
  while (first < std::min(got.size(), want.size()) && got[first] == want[first]) ++first;
  EXPECT_EQ(got.size(), want.size());
  EXPECT_EQ(first, want.size()) << "first difference at token " << first << ": "
                                << tok_->Decode({got.begin() + first, got.begin() + std::min(got.size(), first + 8)})
                                << " vs "
                                << tok_->Decode({want.begin() + first, want.begin() + std::min(want.size(), first + 8)});
  std::remove((tmp + "/in.txt").c_str());
  std::remove((tmp + "/out.json").c_str());
}


TEST_F(Gpt2TokenizerTest, PrepareShardsHoldsOutDocumentsByHashAndDropsDuplicates) {
  const ::ablate::testing::TempDir scratch("ablate_prep");
  const std::string tmp = scratch.path();
  std::vector<std::string> docs;
  for (int i = 0; i < 400; ++i) docs.push_back("Document number " + std::to_string(i) + " says hello.");
  docs.push_back(docs[7]);  // an exact duplicate
  PrepareOptions opt;
  opt.prefix = tmp + "/mix";
  opt.val_fraction = 0.1;
  opt.shard_tokens = 2048;
  auto st = PrepareShards(docs, *tok_, opt);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->documents, 400);
  EXPECT_EQ(st->duplicates, 1);
  EXPECT_GT(st->val_documents, 20);  // about 10% of 400, by hash
  EXPECT_LT(st->val_documents, 70);
  // Files: the validation shard, then training shards of at most 2048 tokens.
  ASSERT_GE(st->files.size(), 3u);
  EXPECT_EQ(st->files[0], tmp + "/mix_val_000000.bin");
  EXPECT_EQ(st->files[1], tmp + "/mix_train_000000.bin");
  auto train = ReadShards(tmp + "/mix_train_*.bin");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(int64_t(train->tokens.size()), st->train_tokens);
  auto val = ReadShards(tmp + "/mix_val_*.bin");
  ASSERT_TRUE(val.ok());
  EXPECT_EQ(int64_t(val->tokens.size()), st->val_tokens);
  // Every document starts with <|endoftext|> and decodes back to itself; none is in both splits.
  auto split_docs = [&](const std::vector<int32_t>& t) {
    std::vector<std::string> out;
    std::vector<int32_t> cur;
    for (int32_t id : t) {
      if (id == tok_->end_of_text()) {
        if (!cur.empty()) out.push_back(tok_->Decode(cur));
        cur.clear();
      } else {
        cur.push_back(id);
      }
    }
    if (!cur.empty()) out.push_back(tok_->Decode(cur));
    return out;
  };
  EXPECT_EQ(train->tokens.front(), tok_->end_of_text());
  const auto t_docs = split_docs(train->tokens), v_docs = split_docs(val->tokens);
  EXPECT_EQ(int64_t(t_docs.size() + v_docs.size()), 400);
  std::set<std::string> v_set(v_docs.begin(), v_docs.end());
  for (const auto& d : t_docs) EXPECT_FALSE(v_set.count(d)) << d;
  for (const auto& d : v_docs) EXPECT_NE(std::find(docs.begin(), docs.end(), d), docs.end()) << d;
  // The split depends on the documents alone: the same documents in another order, the same split.
  std::vector<std::string> reversed(docs.rbegin(), docs.rend());
  opt.prefix = tmp + "/rev";
  auto again = PrepareShards(reversed, *tok_, opt);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->val_documents, st->val_documents);
  EXPECT_EQ(again->val_tokens, st->val_tokens);
  opt.val_fraction = 0.9;
  EXPECT_EQ(PrepareShards(docs, *tok_, opt).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ablate::trainer
