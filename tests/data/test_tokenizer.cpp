#include <vector>

#include "core/error.h"
#include "data/test_util.h"
#include "data/tokenizer.h"

namespace mt {
namespace {

std::string small_text() {
  std::string s;
  for (int i = 0; i < 40; ++i) {
    s += "The quick brown fox jumps over the lazy dog number " + std::to_string(i) + ".\n";
    s += "A stitch in time saves nine; the early bird catches the worm.\n";
  }
  return s;
}

TEST(Tokenizer, TrainEncodeDecodeRoundTrip) {
  const auto model = (testing_data::fresh_dir() / "tok.model").string();
  const std::vector<std::string> texts{small_text()};
  BpeTrainOptions opt;
  opt.vocab_size = 400;
  train_bpe(texts, model, opt);
  const Tokenizer tok = Tokenizer::load(model);
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  for (const std::string& s :
       {std::string("The quick brown fox."), std::string("  two  spaces\nand a newline\t"),
        std::string("unseen: Zürich, 東京, emoji 🙂"), std::string("")}) {
    const std::vector<int32_t> ids = tok.encode(s);
    for (const int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 400);
    }
    EXPECT_EQ(tok.decode(ids), s);
  }
  // Merges were learned: a frequent word is fewer tokens than bytes.
  EXPECT_LT(tok.encode("the quick brown fox").size(), 19u);
}

TEST(Tokenizer, TrainFromFiles) {
  const auto dir = testing_data::fresh_dir();
  testing_data::write_text(dir / "a.txt", small_text());
  const std::vector<std::string> paths{(dir / "a.txt").string()};
  BpeTrainOptions opt;
  opt.vocab_size = 350;
  train_bpe_files(paths, (dir / "tok.model").string(), opt);
  EXPECT_EQ(Tokenizer::load((dir / "tok.model").string()).vocab_size(), 350);
}

TEST(Tokenizer, VocabTooSmallIsConfigError) {
  const std::vector<std::string> texts{small_text()};
  BpeTrainOptions opt;
  opt.vocab_size = 100;
  EXPECT_THROW_WITH(train_bpe(texts, (testing_data::fresh_dir() / "t.model").string(), opt), ConfigError,
                    "100", "256 byte pieces");
}

TEST(Tokenizer, VocabTooLargeForTextIsDataErrorWithSentencepieceMessage) {
  const auto model = (testing_data::fresh_dir() / "t.model").string();
  const std::vector<std::string> texts{"tiny text\n"};
  BpeTrainOptions opt;
  opt.vocab_size = 5000;
  EXPECT_THROW_WITH(train_bpe(texts, model, opt), DataError, model, "5000");
  EXPECT_FALSE(std::filesystem::exists(model));
}

TEST(Tokenizer, MissingModelIsIoError) {
  const auto path = (testing_data::fresh_dir() / "missing.model").string();
  EXPECT_THROW_WITH(Tokenizer::load(path), IoError, path);
}

TEST(Tokenizer, GarbageModelIsIoError) {
  const auto path = (testing_data::fresh_dir() / "garbage.model").string();
  testing_data::write_text(path, "this is not a sentencepiece model");
  EXPECT_THROW_WITH(Tokenizer::load(path), IoError, path);
}

TEST(Tokenizer, DecodeRejectsOutOfRangeId) {
  const auto model = (testing_data::fresh_dir() / "tok.model").string();
  const std::vector<std::string> texts{small_text()};
  BpeTrainOptions opt;
  opt.vocab_size = 350;
  train_bpe(texts, model, opt);
  const Tokenizer tok = Tokenizer::load(model);
  EXPECT_THROW_WITH(tok.decode(std::vector<int32_t>{5, 350}), DataError, "350");
}

}  // namespace
}  // namespace mt
