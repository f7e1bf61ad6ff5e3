// Bytes -> structured choices, for the case decoder that both the libFuzzer harnesses and the
// `flashcheck fuzz` campaign feed (the one from the fuzzer's input, the other from a seeded stream).
// Like libFuzzer's FuzzedDataProvider, which is not available to a GCC build: reading past the end
// yields zeros, so every byte string decodes to some case and short inputs decode to plain ones.
// Hand-written: a dozen lines, and the campaign must not depend on clang's headers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace fc::fuzz {

class ByteSource {
 public:
  // From a fuzzer's input: zeros past its end.
  explicit ByteSource(std::string_view bytes) : bytes_(bytes) {}
  // From a seed: an endless splitmix64 stream (the campaign's cases, reproducible from the seed).
  explicit ByteSource(uint64_t seed) : state_(seed), endless_(true) {}

  // The next n (<= 8) bytes as a little-endian integer.
  uint64_t bits(int n) {
    if (endless_) {
      const uint64_t x = next();
      return n >= 8 ? x : x & ((uint64_t(1) << (8 * n)) - 1);
    }
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= uint64_t(pos_ < bytes_.size() ? uint8_t(bytes_[pos_++]) : 0) << (8 * i);
    return x;
  }
  // An integer in [lo, hi] (hi - lo < 2^32), from as few bytes as the range needs.
  int64_t range(int64_t lo, int64_t hi) {
    const uint64_t span = uint64_t(hi - lo) + 1;
    const int n = span <= 0x100 ? 1 : span <= 0x10000 ? 2 : 4;
    return lo + int64_t(bits(n) % span);
  }
  bool flip() { return bits(1) & 1; }
  template <class T>
  const T& pick(const T* items, size_t count) {
    return items[size_t(range(0, int64_t(count) - 1))];
  }
  bool exhausted() const { return !endless_ && pos_ >= bytes_.size(); }

  // splitmix64 (Steele, Lea, Flood 2014): a seed per case, statistically independent streams.
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t next() { return mix(state_ += 0x9e3779b97f4a7c15ull); }

  std::string_view bytes_;
  size_t pos_ = 0;
  uint64_t state_ = 0;
  bool endless_ = false;
};

}  // namespace fc::fuzz
