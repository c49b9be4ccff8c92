// `loom data tokenize CORPUS... --out DIR`: the text of a language model as token shards. Trains a
// SentencePiece BPE tokenizer on the corpus (or takes --tokenizer MODEL, or a model folder's
// tokenizer.model), then encodes it
// paragraph by paragraph, each ended by the end-of-text id, into DIR/train-NNNNN.tokens and, for
// the last --val-fraction of the paragraphs, DIR/val-NNNNN.tokens (data/token_shard.h), beside
// DIR/tokenizer.model. A progress bar shows the encoding (plain lines when not on a terminal).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/cli/progress.h"
#include "loom/core/error.h"
#include "loom/data/text_corpus.h"
#include "loom/data/token_shard.h"
#include "loom/data/tokenizer.h"

namespace loom::cli {
namespace {

struct TokenizeArgs {
  std::vector<std::string> corpus;
  std::string out;
  std::string tokenizer;  // an existing .model; empty: train one
  int vocab_size = 8000;
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;
  int threads = 1;
  bool json = false;
};

// The encoding's progress on stderr: a redrawn bar on a terminal, a line every 10% elsewhere.
class EncodeProgress {
 public:
  explicit EncodeProgress(bool quiet) : quiet_(quiet), terminal_(::isatty(2) == 1) {}
  void show(double fraction, int64_t tokens) {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    const int decile = static_cast<int>(fraction * 10);
    if (terminal_) {
      if (now - last_ < std::chrono::milliseconds(100) && fraction < 1) return;
      last_ = now;
      const int filled = static_cast<int>(fraction * 30);
      const double elapsed = std::chrono::duration<double>(now - start_).count();
      const double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0;
      std::fprintf(stderr, "\rencoding [%-30s] %3.0f%%  %lld tokens  ETA %s ",
                   std::string(static_cast<size_t>(filled), '#').c_str(), 100 * fraction,
                   static_cast<long long>(tokens), format_duration(eta).c_str());
      if (fraction >= 1) std::fprintf(stderr, "\n");
    } else if (decile > shown_decile_) {
      shown_decile_ = decile;
      std::fprintf(stderr, "encoding: %d%%, %lld tokens\n", decile * 10,
                   static_cast<long long>(tokens));
    }
  }

 private:
  bool quiet_, terminal_;
  int shown_decile_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

// Tokens of one split, written out a shard at a time.
class ShardSink {
 public:
  ShardSink(std::string dir, std::string split, int64_t shard_tokens, const data::Tokenizer& t)
      : dir_(std::move(dir)), split_(std::move(split)), shard_tokens_(shard_tokens), t_(t) {}
  void add(const std::vector<int32_t>& tokens) {
    pending_.insert(pending_.end(), tokens.begin(), tokens.end());
    pending_.push_back(t_.eos_id());
    if (static_cast<int64_t>(pending_.size()) >= shard_tokens_) flush();
  }
  void flush() {
    if (pending_.empty()) return;
    char name[32];
    std::snprintf(name, sizeof(name), "-%05d.tokens", static_cast<int>(shards_.size()));
    const std::string path = dir_ + "/" + split_ + name;
    data::write_token_shard(path, pending_, t_.vocab_size(), t_.fingerprint());
    shards_.push_back(path);
    tokens_ += static_cast<int64_t>(pending_.size());
    pending_.clear();
  }
  int64_t tokens() const { return tokens_ + static_cast<int64_t>(pending_.size()); }
  const std::vector<std::string>& shards() const { return shards_; }

 private:
  std::string dir_, split_;
  int64_t shard_tokens_;
  const data::Tokenizer& t_;
  std::vector<int32_t> pending_;
  std::vector<std::string> shards_;
  int64_t tokens_ = 0;
};

// --tokenizer's SentencePiece model: the file, or a model folder's tokenizer.model (a Hugging
// Face folder of the Llama 2 family has one).
std::string tokenizer_file(const std::string& given) {
  if (!std::filesystem::is_directory(given)) return given;
  if (std::filesystem::exists(given + "/tokenizer.model")) return given + "/tokenizer.model";
  const bool hugging_face = std::filesystem::exists(given + "/tokenizer.json");
  throw ConfigError(
      "--tokenizer: no tokenizer.model in '" + given + "'" +
          (hugging_face ? " (its tokenizer.json, Hugging Face's format, is not read yet)" : ""),
      {{"key", "--tokenizer"},
       {"path", given},
       {"problem", hugging_face ? "tokenizer_json" : "no_tokenizer"}});
}

int run_tokenize(const TokenizeArgs& a) {
  if (a.val_fraction < 0 || a.val_fraction >= 1) {
    throw ConfigError("--val-fraction: " + std::to_string(a.val_fraction) + " is not in [0, 1)");
  }
  const auto started = std::chrono::steady_clock::now();
  // Paragraphs are counted first: so that the last --val-fraction of them can be held out, and
  // so that a corpus without text is refused naming its files before anything is written or a
  // tokenizer trained on it (SentencePiece would fail with an internal check that names none).
  int64_t paragraphs = 0;
  {
    data::TextCorpus count(a.corpus);
    while (count.next_paragraph()) ++paragraphs;
  }
  if (paragraphs == 0) {
    std::string files;
    for (const std::string& path : a.corpus) files += (files.empty() ? "'" : ", '") + path + "'";
    throw DataError("corpus " + files + ": no text (empty, or only blank lines)",
                    {{"path", a.corpus.size() == 1 ? a.corpus.front() : files}});
  }
  std::filesystem::create_directories(a.out);
  const std::string model_path = a.out + "/tokenizer.model";
  const auto training_started = std::chrono::steady_clock::now();
  // The tokenizer: given, or trained on the corpus's lines.
  data::Tokenizer tokenizer = [&] {
    if (!a.tokenizer.empty()) return data::Tokenizer::load(tokenizer_file(a.tokenizer));
    if (!a.json) {
      std::fprintf(stderr, "training a BPE tokenizer of %d pieces on %zu file(s)\n", a.vocab_size,
                   a.corpus.size());
    }
    data::TextCorpus lines(a.corpus);
    data::TokenizerTraining training;
    training.vocab_size = a.vocab_size;
    training.threads = a.threads;
    return data::Tokenizer::train([&] { return lines.next_line(); }, training);
  }();
  if (tokenizer.eos_id() < 0) {
    throw ConfigError("--tokenizer: '" + a.tokenizer +
                      "' has no end-of-text piece to end the paragraphs with");
  }
  tokenizer.save(model_path);
  const double train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - training_started).count();

  const auto held_out = static_cast<int64_t>(std::ceil(a.val_fraction * paragraphs));
  ShardSink train(a.out, "train", a.shard_tokens, tokenizer);
  ShardSink val(a.out, "val", a.shard_tokens, tokenizer);
  data::TextCorpus text(a.corpus);
  EncodeProgress progress(a.json);
  int64_t index = 0;
  while (auto paragraph = text.next_paragraph()) {
    (index < paragraphs - held_out ? train : val).add(tokenizer.encode(*paragraph));
    ++index;
    progress.show(static_cast<double>(index) / static_cast<double>(paragraphs),
                  train.tokens() + val.tokens());
  }
  train.flush();
  val.flush();
  progress.show(1.0, train.tokens() + val.tokens());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const std::string fingerprint = data::fingerprint_hex(tokenizer.fingerprint());
  if (a.json) {
    nlohmann::ordered_json out = {
        {"tokenizer", model_path},         {"vocab_size", tokenizer.vocab_size()},
        {"fingerprint", fingerprint},      {"trained", a.tokenizer.empty()},
        {"paragraphs", paragraphs},        {"val_paragraphs", held_out},
        {"train_tokens", train.tokens()},  {"val_tokens", val.tokens()},
        {"train_shards", train.shards()},  {"val_shards", val.shards()},
        {"text_bytes", text.bytes_read()}, {"seconds", seconds}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf(
      "tokenizer %s: %d pieces, fingerprint %s%s\n", model_path.c_str(), tokenizer.vocab_size(),
      fingerprint.c_str(),
      a.tokenizer.empty() ? (" (trained in " + format_duration(train_seconds) + ")").c_str() : "");
  std::printf(
      "%lld paragraphs, %.1f MB of text: %lld train tokens in %zu shard(s), %lld "
      "validation tokens (%lld paragraphs) in %zu; %.2f bytes of text a token; %s\n",
      static_cast<long long>(paragraphs), text.bytes_read() / 1e6,
      static_cast<long long>(train.tokens()), train.shards().size(),
      static_cast<long long>(val.tokens()), static_cast<long long>(held_out), val.shards().size(),
      static_cast<double>(text.bytes_read()) /
          static_cast<double>(std::max<int64_t>(1, train.tokens() + val.tokens())),
      format_duration(seconds).c_str());
  return 0;
}

}  // namespace

Command add_data_tokenize_command(CLI::App& data) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = data.add_subcommand(
      "tokenize", "Text files (plain or .gz) as token shards, with a SentencePiece tokenizer");
  sub->add_option("corpus", args->corpus, "Text files, plain or gzip-compressed")->required();
  sub->add_option("--out", args->out, "Folder for tokenizer.model and the shards")->required();
  sub->add_option("--tokenizer", args->tokenizer,
                  "A SentencePiece .model to use instead of training one, or a model folder "
                  "holding one (tokenizer.model: a Hugging Face folder of the Llama 2 family)");
  sub->add_option("--vocab-size", args->vocab_size, "Pieces of the tokenizer to train")
      ->capture_default_str();
  sub->add_option("--val-fraction", args->val_fraction,
                  "Share of the paragraphs (the last ones) held out for validation")
      ->capture_default_str();
  sub->add_option("--shard-tokens", args->shard_tokens, "Tokens a shard holds at most")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--threads", args->threads, "Threads that train the tokenizer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--json", args->json, "Print the result as one JSON object");
  return {sub, [args] { return run_tokenize(*args); }};
}

}  // namespace loom::cli
