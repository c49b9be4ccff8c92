// The C interface of libloom_sentencepiece.so, the module through which Loom uses Debian's
// SentencePiece. Why a module: libsentencepiece carries its own copy of protobuf-lite (3.14)
// and exports its symbols, while libloom links the system's protobuf (3.21) for gRPC; in one
// symbol scope one of the two binds to the other's functions and aborts on the version check.
// The module links SentencePiece alone and is loaded with RTLD_LOCAL | RTLD_DEEPBIND
// (data/tokenizer.cpp), so SentencePiece resolves its own protobuf first and libloom never sees
// it. No C++ object or exception crosses this interface: the module catches what SentencePiece
// throws, and `next_line` callbacks must not throw (data/tokenizer.cpp catches and rethrows
// after training).
#pragma once

#include <stddef.h>

extern "C" {

struct loom_spm;  // a loaded SentencePiece model

// Each function returns 0 on success; on failure non-zero, with the reason in `error`.
// Buffers it allocates (*ids, *text, *model) are released with loom_spm_release.
int loom_spm_load(const char* model, size_t size, loom_spm** out, char* error, size_t error_size);
void loom_spm_free(loom_spm* spm);
int loom_spm_piece_size(const loom_spm* spm);
int loom_spm_eos_id(const loom_spm* spm);
int loom_spm_encode(const loom_spm* spm, const char* text, size_t size, int** ids, size_t* count,
                    char* error, size_t error_size);
int loom_spm_decode(const loom_spm* spm, const int* ids, size_t count, char** text, size_t* size,
                    char* error, size_t error_size);
// Trains a model from "key=value" lines of SentencePiece's trainer options, reading the text
// from `next_line` (null at the end; *size is the line's length) with `context`.
int loom_spm_train(const char* options, const char* (*next_line)(void* context, size_t* size),
                   void* context, char** model, size_t* model_size, char* error, size_t error_size);
void loom_spm_release(void* buffer);

}  // extern "C"
