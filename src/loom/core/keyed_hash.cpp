#include "loom/core/keyed_hash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cctype>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"

namespace loom {

std::string hmac_sha256(const std::string& key, const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &size)) {
    throw Error("hmac_sha256: OpenSSL failed");
  }
  return std::string(reinterpret_cast<const char*>(out), size);
}

std::string random_bytes(size_t size) {
  std::string out(size, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(size)) != 1) {
    throw Error("random_bytes: the system's random source failed");
  }
  return out;
}

std::string random_hex(size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char byte : random_bytes(size)) {
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 15];
  }
  return hex;
}

bool equal_in_constant_time(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string read_token_file(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(key + ": cannot read token file '" + path + "'",
                      {{"key", key}, {"path", path}, {"problem", "unreadable"}});
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) throw ConfigError(key + ": token file '" + path + "' is empty");
  return token;
}

}  // namespace loom
