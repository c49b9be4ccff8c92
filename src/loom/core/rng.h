// Counter-based randomness: every random decision is a pure function of a key such as
// (seed, epoch, sample index), so results never depend on thread counts or on what ran before.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace loom {

// SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Folds several integers into one well-mixed key.
inline uint64_t hash_key(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6a09e667f3bcc908ULL;
  for (uint64_t p : parts) h = mix64(h ^ mix64(p));
  return h;
}

// A small stream generator started from a key; cheap to create per sample.
class KeyedRng {
 public:
  explicit KeyedRng(uint64_t key) : state_(key) {}
  uint64_t next() { return mix64(state_++); }
  // Uniform in [0, n) (n > 0); the modulo bias is below 2^-32 for the n Loom uses.
  uint64_t below(uint64_t n) { return next() % n; }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace loom
