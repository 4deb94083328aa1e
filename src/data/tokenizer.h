// Byte-level BPE tokenizer: a thin wrapper over sentencepiece.
//
// Models are trained with byte fallback (every byte has a piece, so any text is
// encodable and decode(encode(s)) == s) and identity normalisation (no Unicode
// or whitespace rewriting). Ids 0, 1, 2 are <unk>, <s> (bos), </s> (eos).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace mt {

// 256 byte pieces + <unk>, <s>, </s>: the smallest vocabulary with byte
// fallback, before any character or merge.
inline constexpr int kMinVocabSize = 259 + 1;

struct BpeTrainOptions {
  int vocab_size = 8192;
  // Sentences (lines) sentencepiece loads at most; they are taken in order
  // (no shuffling), which keeps training deterministic and fast.
  int64_t max_sentences = 2'000'000;
  int num_threads = 2;
};

// Trains a BPE model on `texts` (each split into lines; a line is one training
// sentence) and writes it to `model_path` atomically. Throws ConfigError for a
// vocab_size below kMinVocabSize, DataError with sentencepiece's message when
// training fails (e.g. the text is too small for the vocabulary).
void train_bpe(std::span<const std::string> texts, const std::string& model_path,
               const BpeTrainOptions& options);

// Same, reading the training text from files.
void train_bpe_files(std::span<const std::string> text_paths, const std::string& model_path,
                     const BpeTrainOptions& options);

class Tokenizer {
 public:
  // Throws IoError naming the path when the model cannot be loaded.
  static Tokenizer load(const std::string& path);

  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  int vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace mt
