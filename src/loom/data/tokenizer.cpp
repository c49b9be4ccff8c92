#include "loom/data/tokenizer.h"

#include <dlfcn.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/data/byte_level_bpe.h"
#include "loom/data/sentencepiece_module.h"

namespace loom::data {
namespace {

constexpr size_t kErrorBytes = 512;

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The functions of libloom_sentencepiece.so.
struct Module {
  decltype(&loom_spm_load) load;
  decltype(&loom_spm_free) free;
  decltype(&loom_spm_piece_size) piece_size;
  decltype(&loom_spm_eos_id) eos_id;
  decltype(&loom_spm_encode) encode;
  decltype(&loom_spm_decode) decode;
  decltype(&loom_spm_train) train;
  decltype(&loom_spm_release) release;
};

// Beside libloom (the build's src/ folder, or the installed library folder).
std::string module_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&fnv1a64), &info) == 0 || !info.dli_fname) {
    return "libloom_sentencepiece.so";
  }
  return (std::filesystem::path(info.dli_fname).parent_path() / "libloom_sentencepiece.so")
      .string();
}

template <typename F>
void bind(void* handle, const char* name, F& out, const std::string& path) {
  out = reinterpret_cast<F>(::dlsym(handle, name));
  if (!out) throw Error("tokenizer: " + path + " has no " + name);
}

// Loaded once per process and never unloaded: a shared library is process-wide by nature, and
// the models made with it may live until exit.
const Module& module() {
  static std::once_flag once;
  static Module m;
  static std::string failure;
  std::call_once(once, [] {
    const std::string path = module_path();
    // DEEPBIND: SentencePiece's calls into its own protobuf-lite stay inside it.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      const char* why = ::dlerror();
      failure = "tokenizer: cannot load " + path + ": " + (why ? why : "unknown error") +
                " (under AddressSanitizer, RTLD_DEEPBIND is refused: tokenizers need a plain "
                "build)";
      return;
    }
    bind(handle, "loom_spm_load", m.load, path);
    bind(handle, "loom_spm_free", m.free, path);
    bind(handle, "loom_spm_piece_size", m.piece_size, path);
    bind(handle, "loom_spm_eos_id", m.eos_id, path);
    bind(handle, "loom_spm_encode", m.encode, path);
    bind(handle, "loom_spm_decode", m.decode, path);
    bind(handle, "loom_spm_train", m.train, path);
    bind(handle, "loom_spm_release", m.release, path);
  });
  if (!failure.empty()) throw Error(failure);
  return m;
}

// Hands the corpus's lines to the module's trainer. An exception from the corpus (a damaged
// file) does not unwind through SentencePiece: it ends the text there and is thrown again once
// the trainer has returned.
struct LineFeed {
  const std::function<std::optional<std::string>()>* next_line;
  std::string line;
  std::exception_ptr failure;
  int64_t text_lines = 0;  // lines with more than white space: none, and there is nothing to learn

  static const char* next(void* context, size_t* size) {
    auto* feed = static_cast<LineFeed*>(context);
    try {
      do {
        std::optional<std::string> line = (*feed->next_line)();
        if (!line) return nullptr;
        feed->line = std::move(*line);
      } while (feed->line.empty());
    } catch (...) {
      feed->failure = std::current_exception();
      return nullptr;
    }
    feed->text_lines += feed->line.find_first_not_of(" \t\r\n\v\f") != std::string::npos;
    *size = feed->line.size();
    return feed->line.data();
  }
};

// The end-of-text token the tokenizer_config.json beside a tokenizer.json names ("" where none
// does): a string, or an added token's object with its "content".
std::string configured_eos_token(const std::string& tokenizer_json) {
  const std::filesystem::path config =
      std::filesystem::path(tokenizer_json).parent_path() / "tokenizer_config.json";
  std::ifstream in(config);
  if (!in) return "";
  const nlohmann::json settings = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!settings.is_object() || !settings.contains("eos_token")) return "";
  const nlohmann::json& eos = settings["eos_token"];
  if (eos.is_string()) return eos.get<std::string>();
  if (eos.is_object() && eos.contains("content")) return eos["content"].get<std::string>();
  return "";
}

}  // namespace

struct Tokenizer::Model {
  const Module& module;
  loom_spm* spm = nullptr;
  ~Model() {
    if (spm) module.free(spm);
  }
};

std::string fingerprint_hex(uint64_t fingerprint) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(fingerprint));
  return text;
}

Tokenizer::Tokenizer(std::string serialized, const std::string& origin)
    : model_(std::make_shared<Model>(Model{module()})),
      serialized_(std::move(serialized)),
      fingerprint_(fnv1a64(serialized_)) {
  char error[kErrorBytes] = "";
  if (model_->module.load(serialized_.data(), serialized_.size(), &model_->spm, error,
                          sizeof(error)) != 0) {
    throw DataError("tokenizer '" + origin + "': not a SentencePiece model (" + error + ")");
  }
}

Tokenizer::Tokenizer(std::shared_ptr<const ByteLevelBpe> bpe, std::string serialized)
    : bpe_(std::move(bpe)),
      serialized_(std::move(serialized)),
      fingerprint_(fnv1a64(serialized_)) {}

std::string tokenizer_file_in(const std::string& dir) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    const std::string path = dir + "/" + name;
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

void copy_tokenizer(const std::string& from_dir, const std::string& to_dir) {
  const std::string file = tokenizer_file_in(from_dir);
  if (file.empty()) {
    throw DataError("token data '" + from_dir + "': no tokenizer.model or tokenizer.json",
                    {{"path", from_dir}, {"problem", "tokenizer"}});
  }
  const std::filesystem::path name = std::filesystem::path(file).filename();
  replace_file_atomically(to_dir + "/" + name.string(), read_file(file));
  const std::string config = from_dir + "/tokenizer_config.json";
  if (name == "tokenizer.json" && std::filesystem::exists(config)) {
    replace_file_atomically(to_dir + "/tokenizer_config.json", read_file(config));
  }
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("tokenizer '" + path + "': cannot be read", {{"path", path}});
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!ends_with(path, ".json")) return Tokenizer(bytes.str(), path);
  return Tokenizer(ByteLevelBpe::parse(bytes.str(), path, configured_eos_token(path)), bytes.str());
}

Tokenizer Tokenizer::train(const std::function<std::optional<std::string>()>& next_line,
                           const TokenizerTraining& options) {
  if (options.vocab_size < 16) {
    throw ConfigError("--vocab-size: " + std::to_string(options.vocab_size) +
                      " pieces; at least 16");
  }
  // Byte-pair encoding; unknown 0, begin 1, end 2 (SentencePiece's defaults), no padding piece;
  // SentencePiece's progress lines stay off the terminal.
  std::ostringstream spec;
  spec << "model_type=bpe\nvocab_size=" << options.vocab_size
       << "\ncharacter_coverage=" << options.character_coverage
       << "\ninput_sentence_size=" << options.max_sentences
       << "\nshuffle_input_sentence=true\nnum_threads=" << std::max(1, options.threads)
       << "\nunk_id=0\nbos_id=1\neos_id=2\npad_id=-1\nminloglevel=2\n";
  const Module& m = module();
  LineFeed feed{&next_line, {}, nullptr, 0};
  char* model = nullptr;
  size_t size = 0;
  char error[kErrorBytes] = "";
  const int status =
      m.train(spec.str().c_str(), &LineFeed::next, &feed, &model, &size, error, sizeof(error));
  if (feed.failure) {
    if (status == 0) m.release(model);
    std::rethrow_exception(feed.failure);
  }
  if (status != 0 && feed.text_lines == 0) {
    throw DataError("tokenizer training: the text holds no lines but blank ones (an empty corpus)");
  }
  if (status != 0) {
    const std::string why = error;
    if (why.find("ocabulary size") != std::string::npos) throw ConfigError("--vocab-size: " + why);
    throw DataError("tokenizer training failed: " + why);
  }
  std::string serialized(model, size);
  m.release(model);
  return Tokenizer(std::move(serialized), "trained");
}

int Tokenizer::vocab_size() const {
  return bpe_ ? bpe_->vocab_size() : model_->module.piece_size(model_->spm);
}
int Tokenizer::eos_id() const { return bpe_ ? bpe_->eos_id() : model_->module.eos_id(model_->spm); }

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (bpe_) return bpe_->encode(text);
  int* ids = nullptr;
  size_t count = 0;
  char error[kErrorBytes] = "";
  if (model_->module.encode(model_->spm, text.data(), text.size(), &ids, &count, error,
                            sizeof(error)) != 0) {
    throw DataError(std::string("tokenizer: cannot encode text: ") + error);
  }
  std::vector<int32_t> out(ids, ids + count);
  model_->module.release(ids);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (bpe_) return bpe_->decode(ids);
  char* text = nullptr;
  size_t size = 0;
  char error[kErrorBytes] = "";
  const std::vector<int> narrow(ids.begin(), ids.end());
  if (model_->module.decode(model_->spm, narrow.data(), narrow.size(), &text, &size, error,
                            sizeof(error)) != 0) {
    throw DataError(std::string("tokenizer: cannot decode ids: ") + error);
  }
  std::string out(text, size);
  model_->module.release(text);
  return out;
}

std::string Tokenizer::save_in(const std::string& dir) const {
  const std::string path = dir + "/" + file_name();
  replace_file_atomically(path, serialized_);
  if (bpe_ && !bpe_->eos_token().empty()) {
    replace_file_atomically(dir + "/tokenizer_config.json",
                            nlohmann::json{{"eos_token", bpe_->eos_token()}}.dump(2) + "\n");
  }
  return path;
}

}  // namespace loom::data
