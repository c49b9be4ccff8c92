#include "loom/data/byte_level_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom::data {
namespace {

// GPT-2's pre-tokenizer expression: what a ByteLevel pre-tokenizer with use_regex splits by.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

// GPT-2's table of bytes as printable characters: the printable bytes are themselves, the
// others (controls, space, 0x7F-0xA0, the soft hyphen) the code points from 256 on, in order.
struct ByteTable {
  std::array<std::string, 256> character;  // UTF-8 of each byte's character
  std::unordered_map<uint32_t, uint8_t> byte_of;
  ByteTable() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t code = printable ? b : next++;
      append_utf8(character[b], code);
      byte_of[code] = static_cast<uint8_t>(b);
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

// The UTF-8 characters of `text` (valid UTF-8, as the table's and the vocabulary's are).
std::vector<std::string> characters(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    out.push_back(text.substr(i, length));
    i += length;
  }
  return out;
}

uint32_t code_point(const std::string& character) {
  const auto* c = reinterpret_cast<const unsigned char*>(character.data());
  switch (character.size()) {
    case 1:
      return c[0];
    case 2:
      return ((c[0] & 0x1Fu) << 6) | (c[1] & 0x3Fu);
    case 3:
      return ((c[0] & 0x0Fu) << 12) | ((c[1] & 0x3Fu) << 6) | (c[2] & 0x3Fu);
    default:
      return ((c[0] & 0x07u) << 18) | ((c[1] & 0x3Fu) << 12) | ((c[2] & 0x3Fu) << 6) |
             (c[3] & 0x3Fu);
  }
}

[[noreturn]] void refuse(const std::string& origin, const std::string& key,
                         const std::string& what) {
  throw ConfigError("tokenizer '" + origin + "': " + key + ": " + what +
                        " (Loom reads the byte-level BPE tokenizers of GPT-2 and Llama 3)",
                    {{"key", key}, {"path", origin}, {"problem", "unsupported"}});
}

// An optional string field that must be absent, null or empty.
void expect_empty(const nlohmann::json& object, const char* field, const std::string& origin,
                  const std::string& key) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()))
    return;
  refuse(origin, key + "." + field, "set to " + it->dump() + "; not supported");
}

}  // namespace

struct ByteLevelBpe::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

ByteLevelBpe::~ByteLevelBpe() = default;

std::shared_ptr<const ByteLevelBpe> ByteLevelBpe::parse(const std::string& json,
                                                        const std::string& origin,
                                                        const std::string& eos_token) {
  const nlohmann::json file = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (file.is_discarded() || !file.is_object()) {
    throw DataError("tokenizer '" + origin + "': not JSON", {{"path", origin}});
  }
  std::shared_ptr<ByteLevelBpe> t(new ByteLevelBpe);
  if (const auto n = file.find("normalizer"); n != file.end() && !n->is_null()) {
    refuse(origin, "normalizer", "a " + n->value("type", std::string("?")) + " normalizer");
  }

  // The pre-tokenizer: ByteLevel (GPT-2's expression, or none), or Split then ByteLevel.
  std::string pattern;
  const nlohmann::json pre = file.value("pre_tokenizer", nlohmann::json());
  const auto byte_level = [&](const nlohmann::json& b, bool alone) {
    t->add_prefix_space_ = b.value("add_prefix_space", false);
    if (b.value("use_regex", true)) {
      if (!alone) refuse(origin, "pre_tokenizer", "ByteLevel with use_regex after a Split");
      pattern = kGpt2Pattern;
    }
  };
  if (pre.is_object() && pre.value("type", "") == "ByteLevel") {
    byte_level(pre, true);
  } else if (pre.is_object() && pre.value("type", "") == "Sequence" &&
             pre.value("pretokenizers", nlohmann::json::array()).size() == 2) {
    const nlohmann::json& split = pre["pretokenizers"][0];
    const nlohmann::json& last = pre["pretokenizers"][1];
    if (split.value("type", "") != "Split" || last.value("type", "") != "ByteLevel" ||
        split.value("behavior", "") != "Isolated" || split.value("invert", false) ||
        !split.contains("pattern") || !split["pattern"].contains("Regex")) {
      refuse(origin, "pre_tokenizer",
             "a Sequence other than Split (Isolated, a Regex) + ByteLevel");
    }
    pattern = split["pattern"]["Regex"].get<std::string>();
    byte_level(last, false);
  } else {
    refuse(origin, "pre_tokenizer", pre.is_object() ? pre.value("type", "?") : pre.dump());
  }
  if (!pattern.empty()) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    t->pattern_ = std::make_unique<Pattern>();
    t->pattern_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                      PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (!t->pattern_->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      refuse(origin, "pre_tokenizer.pattern",
             "cannot compile at " + std::to_string(offset) + ": " +
                 reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(t->pattern_->code, PCRE2_JIT_COMPLETE);  // the interpreter where it fails
  }

  const nlohmann::json model = file.value("model", nlohmann::json());
  if (!model.is_object() || model.value("type", "") != "BPE") {
    refuse(origin, "model.type", model.is_object() ? model.value("type", "?") : "missing");
  }
  if (model.value("byte_fallback", false)) refuse(origin, "model.byte_fallback", "true");
  expect_empty(model, "continuing_subword_prefix", origin, "model");
  expect_empty(model, "end_of_word_suffix", origin, "model");
  expect_empty(model, "dropout", origin, "model");
  t->ignore_merges_ = model.value("ignore_merges", false);
  int64_t largest = -1;
  const nlohmann::json vocab = model.value("vocab", nlohmann::json::object());
  for (const auto& [token, id] : vocab.items()) {
    t->vocab_[token] = id.get<int32_t>();
    largest = std::max<int64_t>(largest, id.get<int64_t>());
  }
  int32_t rank = 0;
  for (const nlohmann::json& merge : model.value("merges", nlohmann::json::array())) {
    // "left right", or ["left", "right"] (tokenizers 0.20 and later).
    const std::string pair = merge.is_array()
                                 ? merge[0].get<std::string>() + " " + merge[1].get<std::string>()
                                 : merge.get<std::string>();
    t->merge_rank_.emplace(pair, rank++);
  }
  for (const nlohmann::json& added : file.value("added_tokens", nlohmann::json::array())) {
    const auto id = added.at("id").get<int32_t>();
    t->added_tokens_.emplace_back(added.at("content").get<std::string>(), id);
    largest = std::max<int64_t>(largest, id);
  }
  if (largest < 0) throw DataError("tokenizer '" + origin + "': an empty vocabulary");
  // Longest first, so that one added token that begins another does not cut it.
  std::stable_sort(t->added_tokens_.begin(), t->added_tokens_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [content, id] : t->added_tokens_) {
    if (!content.empty()) t->starts_added_[static_cast<uint8_t>(content.front())] = true;
  }
  t->vocab_size_ = static_cast<int>(largest + 1);
  t->token_of_id_.resize(static_cast<size_t>(t->vocab_size_));
  t->added_.assign(static_cast<size_t>(t->vocab_size_), false);
  for (const auto& [token, id] : t->vocab_) t->token_of_id_[static_cast<size_t>(id)] = token;
  for (const auto& [content, id] : t->added_tokens_) {
    t->token_of_id_[static_cast<size_t>(id)] = content;
    t->added_[static_cast<size_t>(id)] = true;
  }

  // The end of a document: the one named, or the first of the usual names the file has.
  const auto id_of = [&](const std::string& token) -> int32_t {
    for (const auto& [content, id] : t->added_tokens_) {
      if (content == token) return id;
    }
    const auto it = t->vocab_.find(token);
    return it == t->vocab_.end() ? -1 : it->second;
  };
  if (!eos_token.empty()) {
    t->eos_id_ = id_of(eos_token);
    if (t->eos_id_ < 0) {
      throw DataError(
          "tokenizer '" + origin + "': its eos_token '" + eos_token + "' is not among its tokens",
          {{"path", origin}, {"problem", "eos_token"}});
    }
    t->eos_token_ = eos_token;
  } else {
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
      if ((t->eos_id_ = id_of(name)) >= 0) {
        t->eos_token_ = name;
        break;
      }
    }
  }
  return t;
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text) const {
  std::vector<int32_t> out;
  // Added tokens first: the text between them is encoded plainly.
  size_t plain_from = 0;
  for (size_t i = 0; i < text.size();) {
    const std::pair<std::string, int32_t>* found = nullptr;
    if (!starts_added_[static_cast<uint8_t>(text[i])]) {  // most bytes begin none (Llama 3: '<')
      ++i;
      continue;
    }
    for (const auto& added : added_tokens_) {
      if (!added.first.empty() && text.compare(i, added.first.size(), added.first) == 0) {
        found = &added;
        break;
      }
    }
    if (!found) {
      ++i;
      continue;
    }
    encode_plain(text.substr(plain_from, i - plain_from), out);
    out.push_back(found->second);
    i += found->first.size();
    plain_from = i;
  }
  encode_plain(text.substr(plain_from), out);
  return out;
}

void ByteLevelBpe::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  const ByteTable& table = byte_table();
  const auto add_part = [&](size_t begin, size_t end) {
    std::string word;
    for (size_t i = begin; i < end; ++i) word += table.character[static_cast<uint8_t>(text[i])];
    bpe(word, out);
  };
  if (!pattern_) {
    add_part(0, text.size());
    return;
  }
  // Isolated split: every match is a part, and so is any text between matches.
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(pattern_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0, done = 0;
  while (at < text.size()) {
    const int found = pcre2_match(pattern_->code, subject, text.size(), at, 0, match, nullptr);
    if (found == PCRE2_ERROR_NOMATCH) break;
    if (found < 0) {
      pcre2_match_data_free(match);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(found, message, sizeof(message));
      throw DataError(std::string("tokenizer: cannot split the text: ") +
                      reinterpret_cast<const char*>(message) + " (the text must be UTF-8)");
    }
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
    if (span[0] > done) add_part(done, span[0]);
    if (span[1] > span[0]) add_part(span[0], span[1]);
    done = span[1];
    // An empty match moves on by one character (UTF-8 continuation bytes skipped).
    at = span[1] > span[0] ? span[1] : span[1] + 1;
    while (span[1] == span[0] && at < text.size() &&
           (static_cast<uint8_t>(text[at]) & 0xC0) == 0x80)
      ++at;
  }
  pcre2_match_data_free(match);
  if (done < text.size()) add_part(done, text.size());
}

void ByteLevelBpe::bpe(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const auto whole = vocab_.find(word); whole != vocab_.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  std::vector<std::string> parts = characters(word);
  while (parts.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto rank = merge_rank_.find(parts[i] + " " + parts[i + 1]);
      if (rank != merge_rank_.end() && rank->second < best) {
        best = rank->second;
        at = i;
      }
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (const std::string& part : parts) {
    // A part outside the vocabulary (a byte its training never saw) is dropped, as the
    // tokenizers library does without an unknown token.
    if (const auto id = vocab_.find(part); id != vocab_.end()) out.push_back(id->second);
  }
}

std::string ByteLevelBpe::decode(const std::vector<int32_t>& ids) const {
  const ByteTable& table = byte_table();
  std::string text;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    const std::string& token = token_of_id_[static_cast<size_t>(id)];
    if (added_[static_cast<size_t>(id)]) {
      text += token;
      continue;
    }
    for (const std::string& character : characters(token)) {
      const auto byte = table.byte_of.find(code_point(character));
      if (byte != table.byte_of.end()) text += static_cast<char>(byte->second);
    }
  }
  return text;
}

}  // namespace loom::data
