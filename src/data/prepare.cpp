#include "data/prepare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "core/atomic_dir.h"
#include "core/error.h"
#include "core/file.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace mt {

namespace fs = std::filesystem;

namespace {

bool skipped_name(const std::string& name) {
  return name.ends_with(".dat") || name.ends_with(".u8") || name.starts_with(".");
}

bool is_whitespace(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

}  // namespace

std::vector<std::string> expand_text_paths(const std::vector<std::string>& text_paths) {
  std::vector<std::string> files;
  for (const auto& p : text_paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    MT_REQUIRE(fs::exists(st), DataError, "corpus path ", p, " does not exist");
    if (fs::is_regular_file(st)) {
      files.push_back(p);
      continue;
    }
    MT_REQUIRE(fs::is_directory(st), DataError, "corpus path ", p, " is neither a file nor a folder");
    std::vector<std::string> in_dir;
    for (const auto& entry : fs::directory_iterator(p, ec)) {
      if (entry.is_regular_file(ec) && !skipped_name(entry.path().filename().string())) {
        in_dir.push_back(entry.path().string());
      }
    }
    MT_REQUIRE(!ec, IoError, "cannot list corpus folder ", p, ": ", ec.message());
    std::sort(in_dir.begin(), in_dir.end());
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  return files;
}

std::vector<std::string> split_documents(std::string_view text) {
  std::vector<std::string> docs;
  std::string doc;
  const auto flush = [&] {
    while (!doc.empty() && (doc.back() == '\n' || doc.back() == '\r'))
      doc.pop_back();
    if (!is_whitespace(doc)) docs.push_back(doc);
    doc.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const size_t next = end == std::string_view::npos ? text.size() : end + 1;
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line == "%") {
      flush();
    } else {
      doc.append(text.substr(pos, next - pos));
    }
    pos = next;
  }
  flush();
  return docs;
}

PrepareResult prepare_dataset(const PrepareOptions& options) {
  MT_REQUIRE(options.val_fraction > 0.0 && options.val_fraction <= 0.5, ConfigError, "val_fraction (",
             options.val_fraction, ") must be in (0, 0.5]");
  MT_REQUIRE(!options.out_dir.empty(), ConfigError, "the output folder must be given");
  MT_REQUIRE(!options.text_paths.empty(), ConfigError, "no corpus paths given");
  MT_REQUIRE(options.vocab_size >= kMinVocabSize, ConfigError, "vocab_size (", options.vocab_size,
             ") must be >= ", kMinVocabSize,
             ": byte fallback needs 256 byte pieces plus <unk>, <s> and </s>");
  const auto k = static_cast<int64_t>(std::llround(1.0 / options.val_fraction));

  std::vector<std::string> docs;
  const std::vector<std::string> files = expand_text_paths(options.text_paths);
  for (const auto& f : files) {
    for (auto& d : split_documents(read_file(f, kMaxTextFile, "text file")))
      docs.push_back(std::move(d));
  }
  std::string joined_paths;
  for (const auto& p : options.text_paths)
    joined_paths += (joined_paths.empty() ? "" : ", ") + p;
  MT_REQUIRE(!docs.empty(), DataError, "the corpus (", joined_paths, ": ", files.size(),
             " files) holds no text: it is empty");
  MT_REQUIRE(std::ssize(docs) >= k, DataError, "the corpus (", joined_paths, ") has ", docs.size(),
             " documents, but val_fraction ", options.val_fraction, " puts every ", k,
             "-th document in val, so it needs at least ", k);

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  MT_REQUIRE(!ec, IoError, "cannot create output folder ", options.out_dir, ": ", ec.message());
  const fs::path dir(options.out_dir);
  check_file_writable((dir / "train.bin").string(), "output file");  // before the tokenizer's training
  PrepareResult r;
  r.tokenizer_path = (dir / "tokenizer.model").string();
  r.train_path = (dir / "train.bin").string();
  r.val_path = (dir / "val.bin").string();

  BpeTrainOptions bpe;
  bpe.vocab_size = options.vocab_size;
  train_bpe(docs, r.tokenizer_path, bpe);
  const Tokenizer tok = Tokenizer::load(r.tokenizer_path);
  r.vocab_size = tok.vocab_size();

  std::vector<int32_t> train, val;
  for (size_t d = 0; d < docs.size(); ++d) {
    const bool to_val = (static_cast<int64_t>(d) + 1) % k == 0;
    std::vector<int32_t>& out = to_val ? val : train;
    const std::vector<int32_t> ids = tok.encode(docs[d]);
    out.insert(out.end(), ids.begin(), ids.end());
    out.push_back(tok.eos_id());
    (to_val ? r.val_documents : r.train_documents) += 1;
  }
  r.documents = std::ssize(docs);
  r.train_tokens = std::ssize(train);
  r.val_tokens = std::ssize(val);
  write_token_file(r.train_path, train, r.vocab_size);
  write_token_file(r.val_path, val, r.vocab_size);
  return r;
}

std::vector<std::string> default_corpus_paths() {
  return {"/usr/share/games/fortunes"};
}

void require_default_corpus() {
  for (const auto& p : default_corpus_paths()) {
    std::error_code ec;
    MT_REQUIRE(fs::is_directory(p, ec), DataError, "the default corpus ", p,
               " is missing: install the Debian package 'fortunes' (scripts/install-deps.sh)");
  }
}

}  // namespace mt
