// libloom_sentencepiece.so: SentencePiece behind a C interface (sentencepiece_module.h).
#include "loom/data/sentencepiece_module.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

struct loom_spm {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

int fail(const std::string& why, char* error, size_t error_size) {
  if (error && error_size > 0) {
    std::strncpy(error, why.c_str(), error_size - 1);
    error[error_size - 1] = '\0';
  }
  return 1;
}

template <typename T>
T* copy_out(const T* data, size_t count) {
  auto* out = static_cast<T*>(std::malloc(count * sizeof(T) + 1));
  if (out && count > 0) std::memcpy(out, data, count * sizeof(T));
  return out;
}

class CallbackLines : public sentencepiece::SentenceIterator {
 public:
  CallbackLines(const char* (*next)(void*, size_t*), void* context)
      : next_(next), context_(context) {
    Next();
  }
  bool done() const override { return done_; }
  void Next() override {
    size_t size = 0;
    const char* line = next_(context_, &size);
    done_ = line == nullptr;
    if (!done_) value_.assign(line, size);
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const char* (*next_)(void*, size_t*);
  void* context_;
  std::string value_;
  bool done_ = false;
};

}  // namespace

extern "C" {

int loom_spm_load(const char* model, size_t size, loom_spm** out, char* error, size_t error_size) {
  try {
    auto spm = std::make_unique<loom_spm>();
    const auto status = spm->processor.LoadFromSerializedProto(std::string_view(model, size));
    if (!status.ok()) return fail(status.ToString(), error, error_size);
    *out = spm.release();
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what(), error, error_size);
  }
}

void loom_spm_free(loom_spm* spm) { delete spm; }

int loom_spm_piece_size(const loom_spm* spm) { return spm->processor.GetPieceSize(); }

int loom_spm_eos_id(const loom_spm* spm) { return spm->processor.eos_id(); }

int loom_spm_encode(const loom_spm* spm, const char* text, size_t size, int** ids, size_t* count,
                    char* error, size_t error_size) {
  try {
    std::vector<int> encoded;
    const auto status = spm->processor.Encode(std::string_view(text, size), &encoded);
    if (!status.ok()) return fail(status.ToString(), error, error_size);
    *ids = copy_out(encoded.data(), encoded.size());
    *count = encoded.size();
    return *ids ? 0 : fail("out of memory", error, error_size);
  } catch (const std::exception& e) {
    return fail(e.what(), error, error_size);
  }
}

int loom_spm_decode(const loom_spm* spm, const int* ids, size_t count, char** text, size_t* size,
                    char* error, size_t error_size) {
  try {
    std::string decoded;
    const auto status = spm->processor.Decode(std::vector<int>(ids, ids + count), &decoded);
    if (!status.ok()) return fail(status.ToString(), error, error_size);
    *text = copy_out(decoded.data(), decoded.size());
    *size = decoded.size();
    return *text ? 0 : fail("out of memory", error, error_size);
  } catch (const std::exception& e) {
    return fail(e.what(), error, error_size);
  }
}

int loom_spm_train(const char* options, const char* (*next_line)(void*, size_t*), void* context,
                   char** model, size_t* model_size, char* error, size_t error_size) {
  try {
    std::unordered_map<std::string, std::string> spec;
    std::istringstream lines(options);
    for (std::string line; std::getline(lines, line);) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) spec[line.substr(0, eq)] = line.substr(eq + 1);
    }
    CallbackLines text(next_line, context);
    std::string serialized;
    const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &text, &serialized);
    if (!status.ok()) return fail(status.ToString(), error, error_size);
    *model = copy_out(serialized.data(), serialized.size());
    *model_size = serialized.size();
    return *model ? 0 : fail("out of memory", error, error_size);
  } catch (const std::exception& e) {
    return fail(e.what(), error, error_size);
  }
}

void loom_spm_release(void* buffer) { std::free(buffer); }

}  // extern "C"
