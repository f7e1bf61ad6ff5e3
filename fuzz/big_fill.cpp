#include "fuzz/big_fill.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "fuzz/bytes.hpp"
#include "fuzz/threads.hpp"

namespace fc::fuzz {
namespace {

constexpr int64_t kChunk = int64_t(1) << 20;  // elements per seeded stream
constexpr int kGrid = 4096;

double grid_value(double magnitude, uint64_t g) { return magnitude * double(int64_t(g) - 2048) / 2048; }

// Chunk c of t from the table of the grid's bit patterns (T: the dtype's storage word).
template <class T>
void fill_chunks(HostTensor& t, uint64_t seed, const HostTensor& table, int threads) {
  const int64_t n = t.numel();
  T* out = t.data<T>();
  const T* grid = table.data<T>();
  on_threads(threads, (n + kChunk - 1) / kChunk, [&](int64_t c) {
    ByteSource src(ByteSource::mix(seed ^ uint64_t(c)));
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) out[i] = grid[src.bits(2) & 0xfff];
  });
}

}  // namespace

void fill_grid(HostTensor& t, uint64_t seed, double magnitude, int threads) {
  HostTensor table(t.dtype, {kGrid});  // the grid rounded into the dtype once, as set() rounds it
  for (int g = 0; g < kGrid; ++g) table.set(g, grid_value(magnitude, uint64_t(g)));
  switch (dtype_size(t.dtype)) {
    case 2: return fill_chunks<uint16_t>(t, seed, table, threads);
    case 4: return fill_chunks<uint32_t>(t, seed, table, threads);
    case 8: return fill_chunks<uint64_t>(t, seed, table, threads);
  }
  throw std::logic_error("fill_grid: unexpected element size");
}

void fill_grid_per_element(HostTensor& t, uint64_t seed, double magnitude, int threads) {
  const int64_t n = t.numel();
  on_threads(threads, (n + kChunk - 1) / kChunk, [&](int64_t c) {
    ByteSource src(ByteSource::mix(seed ^ uint64_t(c)));
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i)
      t.set(i, grid_value(magnitude, src.bits(2) & 0xfff));
  });
}

}  // namespace fc::fuzz
