// Corpus preparation: text files -> DIR/tokenizer.model, DIR/train.bin,
// DIR/val.bin. How documents are cut and which go to val is specified in
// docs/FORMATS.md ("Prepared dataset").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

struct PrepareOptions {
  // Files or folders; a folder contributes every regular file in it, sorted by
  // name, except names ending in .dat or .u8 (the fortunes index and links).
  std::vector<std::string> text_paths;
  std::string out_dir;
  int vocab_size = 8192;
  // Every k-th document goes to val, k = round(1 / val_fraction).
  double val_fraction = 0.05;
};

struct PrepareResult {
  std::string tokenizer_path;
  std::string train_path;
  std::string val_path;
  int vocab_size = 0;
  int64_t documents = 0;
  int64_t train_documents = 0;
  int64_t val_documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};

// Throws DataError naming the path for a missing input, an empty corpus or a
// vocabulary the corpus cannot support, ConfigError for bad options and
// IoError when the output cannot be written.
PrepareResult prepare_dataset(const PrepareOptions& options);

// The files `text_paths` expands to, in the order they are read.
std::vector<std::string> expand_text_paths(const std::vector<std::string>& text_paths);

// Cuts a text into documents: at lines holding only "%" (the fortune format);
// a text without such lines is one document. Trailing newlines of a document
// are dropped, and documents holding only whitespace are skipped.
std::vector<std::string> split_documents(std::string_view text);

// {"/usr/share/games/fortunes"}: Debian's fortunes package.
std::vector<std::string> default_corpus_paths();

// Throws DataError telling how to install the default corpus when it is missing.
void require_default_corpus();

}  // namespace mt
