#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/file.h"

namespace mt {

namespace {

// Feeds the lines of in-memory texts to the trainer without a temporary file.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::span<const std::string> texts) : texts_(texts) { advance(); }
  bool done() const override { return text_ >= texts_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  // Moves to the next non-empty line.
  void advance() {
    while (text_ < texts_.size()) {
      const std::string& t = texts_[text_];
      if (pos_ >= t.size()) {
        ++text_;
        pos_ = 0;
        continue;
      }
      size_t end = t.find('\n', pos_);
      if (end == std::string::npos) end = t.size();
      line_.assign(t, pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty()) return;
    }
  }

  std::span<const std::string> texts_;
  size_t text_ = 0;
  size_t pos_ = 0;
  std::string line_;
};

}  // namespace

void train_bpe(std::span<const std::string> texts, const std::string& model_path,
               const BpeTrainOptions& options) {
  MT_REQUIRE(options.vocab_size >= kMinVocabSize, ConfigError, "vocab_size (", options.vocab_size,
             ") must be >= ", kMinVocabSize,
             ": byte fallback needs 256 byte pieces plus <unk>, <s> and </s>, ",
             "and BPE needs room for at least one more piece");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "false"},
      {"num_threads", std::to_string(options.num_threads)},
      {"minloglevel", "2"},  // warnings and errors only
  };
  LineIterator lines(texts);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  MT_REQUIRE(
      status.ok(), DataError, "training the tokenizer for ", model_path, " failed (vocab_size ",
      options.vocab_size,
      "; it must cover 256 byte pieces, <unk>, <s>, </s> and one piece per distinct character, and the ",
      "text must yield enough merges to fill it): ", status.ToString());
  write_file_atomic(model_path, model.data(), std::ssize(model));
}

void train_bpe_files(std::span<const std::string> text_paths, const std::string& model_path,
                     const BpeTrainOptions& options) {
  std::vector<std::string> texts;
  texts.reserve(text_paths.size());
  for (const auto& p : text_paths)
    texts.push_back(read_file(p, kMaxTextFile, "text file"));
  train_bpe(texts, model_path, options);
}

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::load(const std::string& path) {
  Tokenizer t;
  regular_file_size(path, kMaxTextFile, "tokenizer model");  // sentencepiece would read a device forever
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = t.sp_->Load(path);
  MT_REQUIRE(status.ok(), IoError, "cannot load tokenizer model ", path, ": ", status.ToString());
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  MT_CHECK(sp_ != nullptr, "encode on an empty Tokenizer");
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  MT_REQUIRE(status.ok(), DataError, "tokenizer encode failed: ", status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  MT_CHECK(sp_ != nullptr, "decode on an empty Tokenizer");
  const int n = vocab_size();
  for (const int32_t id : ids) {
    MT_REQUIRE(id >= 0 && id < n, DataError, "cannot decode token id ", id, ": outside [0, vocab_size = ", n,
               ")");
  }
  std::string text;
  const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  MT_REQUIRE(status.ok(), DataError, "tokenizer decode failed: ", status.ToString());
  return text;
}

int Tokenizer::vocab_size() const {
  return sp_ ? sp_->GetPieceSize() : 0;
}
int32_t Tokenizer::bos_id() const {
  return sp_ ? sp_->bos_id() : -1;
}
int32_t Tokenizer::eos_id() const {
  return sp_ ? sp_->eos_id() : -1;
}

}  // namespace mt
