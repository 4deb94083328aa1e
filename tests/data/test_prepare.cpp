#include <vector>

#include "core/error.h"
#include "data/prepare.h"
#include "data/sampler.h"
#include "data/test_util.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace mt {
namespace {

using testing_data::fresh_dir;
using testing_data::write_text;

// A folder laid out like /usr/share/games/fortunes: fortune files with "%"
// separators, their .dat index and .u8 names, and a plain text file.
std::filesystem::path fortune_dir(const std::filesystem::path& root) {
  const auto dir = root / "corpus";
  std::filesystem::create_directories(dir);
  std::string fortunes;
  for (int i = 0; i < 30; ++i) {
    fortunes += "Fortune number " + std::to_string(i) + " says: the quick brown fox jumps.\n";
    fortunes += "\t\t-- Somebody, line two\n%\n";
  }
  write_text(dir / "b_fortunes", fortunes);
  write_text(dir / "b_fortunes.dat", std::string("\x02\x00\x00\x00BINARYJUNK\xff\xfe", 16));
  write_text(dir / "b_fortunes.u8", "SHOULD NOT BE READ\n%\nNOR THIS\n");
  write_text(dir / "a_plain", "A plain file is one document.\nIt has two lines.\n");
  return dir;
}

TEST(Prepare, SplitDocumentsAtPercentLines) {
  EXPECT_EQ(split_documents("one\ntwo\n%\nthree\n%\n"), (std::vector<std::string>{"one\ntwo", "three"}));
  EXPECT_EQ(split_documents("plain text\n\nwith a gap\n"),
            (std::vector<std::string>{"plain text\n\nwith a gap"}));
  EXPECT_EQ(split_documents("%\n  \n%\nx %\n%"), (std::vector<std::string>{"x %"}));
  EXPECT_EQ(split_documents("a\r\n%\r\nb"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(split_documents("").empty());
}

TEST(Prepare, FolderSkipsDatAndU8AndSortsByName) {
  const auto dir = fortune_dir(fresh_dir());
  const auto files = expand_text_paths({dir.string()});
  EXPECT_EQ(files, (std::vector<std::string>{(dir / "a_plain").string(), (dir / "b_fortunes").string()}));
}

TEST(Prepare, SmallCorpusProducesValidFiles) {
  const auto root = fresh_dir();
  PrepareOptions opt;
  opt.text_paths = {fortune_dir(root).string()};
  opt.out_dir = (root / "out" / "nested").string();
  opt.vocab_size = 400;
  opt.val_fraction = 0.1;  // every 10th document
  const PrepareResult r = prepare_dataset(opt);
  EXPECT_EQ(r.documents, 31);
  EXPECT_EQ(r.val_documents, 3);  // documents 9, 19, 29
  EXPECT_EQ(r.train_documents, 28);
  EXPECT_EQ(r.vocab_size, 400);

  const TokenFile train = TokenFile::open(r.train_path);
  const TokenFile val = TokenFile::open(r.val_path);
  EXPECT_EQ(train.size(), r.train_tokens);
  EXPECT_EQ(val.size(), r.val_tokens);
  EXPECT_EQ(train.vocab_size(), 400);

  // Every document ends with EOS; decoding train up to the first EOS gives the
  // first document (the plain file, sorted first).
  const Tokenizer tok = Tokenizer::load(r.tokenizer_path);
  int64_t eos = 0;
  std::vector<int32_t> first;
  for (int64_t i = 0; i < train.size(); ++i) {
    if (train[i] == tok.eos_id()) {
      ++eos;
    } else if (eos == 0) {
      first.push_back(train[i]);
    }
  }
  EXPECT_EQ(eos, 28);
  EXPECT_EQ(train[train.size() - 1], tok.eos_id());
  EXPECT_EQ(tok.decode(first), "A plain file is one document.\nIt has two lines.");

  // Val holds fortunes 8, 18, 28 (documents 9, 19, 29): the .u8 text never appears.
  std::vector<int32_t> all(static_cast<size_t>(val.size()));
  val.copy(0, val.size(), all.data());
  const std::string text = tok.decode(all);
  EXPECT_NE(text.find("Fortune number 8 says"), std::string::npos) << text;
  EXPECT_NE(text.find("Fortune number 28 says"), std::string::npos) << text;
  EXPECT_EQ(text.find("Fortune number 9 says"), std::string::npos) << text;
  EXPECT_EQ(text.find("SHOULD NOT"), std::string::npos);
  EXPECT_GE(EvalWindows(val, 8).count(), 1);
}

TEST(Prepare, MissingPathIsDataError) {
  const auto root = fresh_dir();
  PrepareOptions opt;
  opt.text_paths = {(root / "no_such_corpus").string()};
  opt.out_dir = (root / "out").string();
  EXPECT_THROW_WITH(prepare_dataset(opt), DataError, opt.text_paths[0], "does not exist");
}

TEST(Prepare, EmptyCorpusIsDataError) {
  const auto root = fresh_dir();
  std::filesystem::create_directories(root / "empty");
  write_text(root / "empty" / "only.dat", "binary");
  write_text(root / "empty" / "blank", "\n  \n%\n%\n");
  PrepareOptions opt;
  opt.text_paths = {(root / "empty").string()};
  opt.out_dir = (root / "out").string();
  EXPECT_THROW_WITH(prepare_dataset(opt), DataError, opt.text_paths[0], "empty");
  EXPECT_FALSE(std::filesystem::exists(root / "out" / "train.bin"));
}

TEST(Prepare, TooFewDocumentsForValIsDataError) {
  const auto root = fresh_dir();
  write_text(root / "one", "just one document\n");
  PrepareOptions opt;
  opt.text_paths = {(root / "one").string()};
  opt.out_dir = (root / "out").string();
  EXPECT_THROW_WITH(prepare_dataset(opt), DataError, "1 documents", "20");
}

TEST(Prepare, VocabTooSmallIsConfigError) {
  const auto root = fresh_dir();
  PrepareOptions opt;
  opt.text_paths = {fortune_dir(root).string()};
  opt.out_dir = (root / "out").string();
  opt.vocab_size = 200;
  EXPECT_THROW_WITH(prepare_dataset(opt), ConfigError, "200", "256 byte pieces");
}

TEST(Prepare, VocabTooLargeForCorpusIsDataError) {
  const auto root = fresh_dir();
  PrepareOptions opt;
  opt.text_paths = {fortune_dir(root).string()};
  opt.out_dir = (root / "out").string();
  opt.vocab_size = 20000;
  opt.val_fraction = 0.1;
  EXPECT_THROW_WITH(prepare_dataset(opt), DataError, "20000", "tokenizer.model");
}

TEST(Prepare, DefaultCorpusIsFortunes) {
  EXPECT_EQ(default_corpus_paths(), std::vector<std::string>{"/usr/share/games/fortunes"});
}

}  // namespace
}  // namespace mt
