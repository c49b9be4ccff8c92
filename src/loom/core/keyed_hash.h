// Shared-secret authentication without sending the secret: the server sends a fresh random
// challenge, the client answers HMAC-SHA256(secret, challenge), the server computes the same and
// compares in constant time. A listener on the wire learns neither the secret nor an answer it
// could replay (every challenge is used once). OpenSSL's libcrypto does the hashing.
#pragma once

#include <string>

namespace loom {

// HMAC-SHA256 of `message` under `key`: 32 raw bytes.
std::string hmac_sha256(const std::string& key, const std::string& message);

// `size` bytes from the operating system's random source (for challenges and session ids).
std::string random_bytes(size_t size);
// `size` random bytes as lower-case hex text (ids, tokens that travel in environment variables).
std::string random_hex(size_t size);

// a == b, taking the same time wherever they differ.
bool equal_in_constant_time(const std::string& a, const std::string& b);

// The secret in a token file: its contents without trailing whitespace. Throws ConfigError
// naming `key` when the file cannot be read or is empty.
std::string read_token_file(const std::string& path, const std::string& key);

}  // namespace loom
