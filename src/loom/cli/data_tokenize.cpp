// `loom data tokenize CORPUS... --out DIR`: the text of a language model as token shards. Trains a
// SentencePiece BPE tokenizer on the corpus (or takes --tokenizer FILE, or a model folder's
// tokenizer.model or tokenizer.json), then encodes it paragraph by paragraph, each ended by the
// end-of-text id, into DIR/train-NNNNN.tokens and, for the last --val-fraction of the
// paragraphs, DIR/val-NNNNN.tokens (data/token_shard.h), beside a copy of the tokenizer
// (DIR/tokenizer.model or DIR/tokenizer.json). A corpus of JSON Lines
// files is fine-tuning pairs instead (data/prompt_pairs.h): its shards carry a loss mask that
// leaves the prompts out of the loss. A progress bar shows the encoding (plain lines when not on
// a terminal).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/cli/progress.h"
#include "loom/core/error.h"
#include "loom/data/prompt_pairs.h"
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

// Tokens of one split, written out a shard at a time: documents (paragraphs), or fine-tuning
// pairs with a loss mask (`masked`).
class ShardSink {
 public:
  ShardSink(std::string dir, std::string split, int64_t shard_tokens, const data::Tokenizer& t,
            bool masked)
      : dir_(std::move(dir)),
        split_(std::move(split)),
        shard_tokens_(shard_tokens),
        t_(t),
        masked_(masked) {}
  void add(const std::vector<int32_t>& tokens) { add_pair({}, tokens); }
  // The prompt's tokens (no target), the response's and the end-of-text (targets).
  void add_pair(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) {
    pending_.insert(pending_.end(), prompt.begin(), prompt.end());
    pending_.insert(pending_.end(), response.begin(), response.end());
    pending_.push_back(t_.eos_id());
    if (masked_) {
      counted_.insert(counted_.end(), prompt.size(), 0);
      counted_.insert(counted_.end(), response.size() + 1, 1);
      counted_tokens_ += static_cast<int64_t>(response.size()) + 1;
    }
    if (static_cast<int64_t>(pending_.size()) >= shard_tokens_) flush();
  }
  void flush() {
    if (pending_.empty()) return;
    char name[32];
    std::snprintf(name, sizeof(name), "-%05d.tokens", static_cast<int>(shards_.size()));
    const std::string path = dir_ + "/" + split_ + name;
    data::write_token_shard(path, pending_, t_.vocab_size(), t_.fingerprint(),
                            masked_ ? &counted_ : nullptr);
    shards_.push_back(path);
    tokens_ += static_cast<int64_t>(pending_.size());
    pending_.clear();
    counted_.clear();
  }
  int64_t tokens() const { return tokens_ + static_cast<int64_t>(pending_.size()); }
  // Tokens that count as targets: all of them, or the responses' with a loss mask.
  int64_t counted_tokens() const { return masked_ ? counted_tokens_ : tokens(); }
  const std::vector<std::string>& shards() const { return shards_; }

 private:
  std::string dir_, split_;
  int64_t shard_tokens_;
  const data::Tokenizer& t_;
  bool masked_;
  std::vector<int32_t> pending_;
  std::vector<uint8_t> counted_;  // with `masked_`: pending_'s loss mask
  int64_t counted_tokens_ = 0;
  std::vector<std::string> shards_;
  int64_t tokens_ = 0;
};

// The corpus's documents in order: its paragraphs (as responses without a prompt), or its
// fine-tuning pairs when its files are JSON Lines (data/prompt_pairs.h).
class Documents {
 public:
  Documents(const std::vector<std::string>& paths, bool pairs, bool quiet) {
    if (pairs) {
      pairs_.emplace(paths, quiet);
    } else {
      text_.emplace(paths);
    }
  }
  std::optional<data::PromptPair> next() {
    if (pairs_) return pairs_->next();
    std::optional<std::string> paragraph = text_->next_paragraph();
    if (!paragraph) return std::nullopt;
    return data::PromptPair{{}, std::move(*paragraph)};
  }
  // The text a tokenizer trains on: every line, or every prompt and response.
  std::optional<std::string> next_line() {
    if (text_) return text_->next_line();
    if (held_response_) return std::exchange(held_response_, std::nullopt);
    std::optional<data::PromptPair> pair = pairs_->next();
    if (!pair) return std::nullopt;
    held_response_ = std::move(pair->response);
    return std::move(pair->prompt);
  }
  int64_t bytes_read() const { return text_ ? text_->bytes_read() : pairs_->bytes_read(); }
  int64_t skipped() const { return pairs_ ? pairs_->skipped() : 0; }

 private:
  std::optional<data::TextCorpus> text_;
  std::optional<data::PromptPairs> pairs_;
  std::optional<std::string> held_response_;
};

// Whether the corpus is fine-tuning pairs (every file .jsonl) or text (none); a mix is refused.
bool corpus_is_pairs(const std::vector<std::string>& corpus) {
  int64_t pairs = 0;
  for (const std::string& path : corpus) pairs += data::is_prompt_pairs_file(path) ? 1 : 0;
  if (pairs != 0 && pairs != static_cast<int64_t>(corpus.size())) {
    throw ConfigError(
        "corpus: JSON Lines files of prompt/response pairs and text files cannot be mixed "
        "(one has a loss mask, the other not); tokenize them into separate folders",
        {{"key", "corpus"}, {"problem", "mixed_formats"}});
  }
  return pairs > 0;
}

// --tokenizer's file: as given, or a model folder's tokenizer.model (SentencePiece: the Llama 2
// family) or else its tokenizer.json (Hugging Face's byte-level BPE: GPT-2, Llama 3).
std::string tokenizer_file(const std::string& given) {
  if (!std::filesystem::is_directory(given)) return given;
  if (std::string path = data::tokenizer_file_in(given); !path.empty()) return path;
  throw ConfigError("--tokenizer: no tokenizer.model or tokenizer.json in '" + given + "'",
                    {{"key", "--tokenizer"}, {"path", given}, {"problem", "no_tokenizer"}});
}

int run_tokenize(const TokenizeArgs& a) {
  if (a.val_fraction < 0 || a.val_fraction >= 1) {
    throw ConfigError("--val-fraction: " + std::to_string(a.val_fraction) + " is not in [0, 1)");
  }
  const auto started = std::chrono::steady_clock::now();
  const bool pairs = corpus_is_pairs(a.corpus);
  // Documents (paragraphs or pairs) are counted first: so that the last --val-fraction of them
  // can be held out, and so that a corpus without text is refused naming its files before
  // anything is written or a tokenizer trained on it (SentencePiece would fail with an internal
  // check that names none). Malformed pairs are named here, once.
  int64_t paragraphs = 0, skipped = 0;
  {
    Documents count(a.corpus, pairs, a.json);
    while (count.next()) ++paragraphs;
    skipped = count.skipped();
  }
  if (paragraphs == 0) {
    std::string files;
    for (const std::string& path : a.corpus) files += (files.empty() ? "'" : ", '") + path + "'";
    throw DataError(
        "corpus " + files +
            (pairs ? ": no prompt/response pair (" + std::to_string(skipped) + " malformed lines)"
                   : ": no text (empty, or only blank lines)"),
        {{"path", a.corpus.size() == 1 ? a.corpus.front() : files},
         {"problem", pairs ? "no_pairs" : "no_text"}});
  }
  std::filesystem::create_directories(a.out);
  const auto training_started = std::chrono::steady_clock::now();
  // The tokenizer: given, or trained on the corpus's lines.
  data::Tokenizer tokenizer = [&] {
    if (!a.tokenizer.empty()) return data::Tokenizer::load(tokenizer_file(a.tokenizer));
    if (!a.json) {
      std::fprintf(stderr, "training a BPE tokenizer of %d pieces on %zu file(s)\n", a.vocab_size,
                   a.corpus.size());
    }
    Documents lines(a.corpus, pairs, /*quiet=*/true);
    data::TokenizerTraining training;
    training.vocab_size = a.vocab_size;
    training.threads = a.threads;
    return data::Tokenizer::train([&] { return lines.next_line(); }, training);
  }();
  if (tokenizer.eos_id() < 0) {
    throw ConfigError("--tokenizer: '" + a.tokenizer +
                      "' has no end-of-text piece to end the paragraphs with");
  }
  const std::string model_path = tokenizer.save_in(a.out);
  const double train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - training_started).count();

  const auto held_out = static_cast<int64_t>(std::ceil(a.val_fraction * paragraphs));
  ShardSink train(a.out, "train", a.shard_tokens, tokenizer, pairs);
  ShardSink val(a.out, "val", a.shard_tokens, tokenizer, pairs);
  Documents text(a.corpus, pairs, /*quiet=*/true);
  EncodeProgress progress(a.json);
  int64_t index = 0;
  while (auto document = text.next()) {
    ShardSink& sink = index < paragraphs - held_out ? train : val;
    if (pairs) {
      sink.add_pair(tokenizer.encode(document->prompt), tokenizer.encode(document->response));
    } else {
      sink.add(tokenizer.encode(document->response));
    }
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
    nlohmann::ordered_json out = {{"tokenizer", model_path},
                                  {"vocab_size", tokenizer.vocab_size()},
                                  {"fingerprint", fingerprint},
                                  {"trained", a.tokenizer.empty()},
                                  {"paragraphs", paragraphs},
                                  {"val_paragraphs", held_out},
                                  {"pairs", pairs},
                                  {"skipped_lines", skipped},
                                  {"train_tokens", train.tokens()},
                                  {"val_tokens", val.tokens()},
                                  {"train_counted_tokens", train.counted_tokens()},
                                  {"train_shards", train.shards()},
                                  {"val_shards", val.shards()},
                                  {"text_bytes", text.bytes_read()},
                                  {"seconds", seconds}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf(
      "tokenizer %s: %d pieces, fingerprint %s%s\n", model_path.c_str(), tokenizer.vocab_size(),
      fingerprint.c_str(),
      a.tokenizer.empty() ? (" (trained in " + format_duration(train_seconds) + ")").c_str() : "");
  if (pairs) {
    std::printf(
        "%lld prompt/response pairs (%lld malformed lines skipped): %lld of %lld train "
        "tokens count as targets (responses and their end-of-text)\n",
        static_cast<long long>(paragraphs), static_cast<long long>(skipped),
        static_cast<long long>(train.counted_tokens()), static_cast<long long>(train.tokens()));
  }
  std::printf(
      "%lld %s, %.1f MB of text: %lld train tokens in %zu shard(s), %lld "
      "validation tokens (%lld of them) in %zu; %.2f bytes of text a token; %s\n",
      static_cast<long long>(paragraphs), pairs ? "pairs" : "paragraphs", text.bytes_read() / 1e6,
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
  sub->add_option("corpus", args->corpus,
                  "Text files, plain or gzip-compressed; or JSON Lines files (.jsonl) of "
                  "{\"prompt\", \"response\"} pairs, whose prompts count in no loss")
      ->required();
  sub->add_option("--out", args->out, "Folder for the tokenizer and the shards")->required();
  sub->add_option("--tokenizer", args->tokenizer,
                  "A SentencePiece .model or a Hugging Face tokenizer.json to use instead of "
                  "training one, or a model folder holding one (tokenizer.model: the Llama 2 "
                  "family; tokenizer.json: GPT-2, Llama 3)");
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
