// What the CPU kernels declare about their arithmetic (contract/arithmetic.h), read off tiled_*.hpp
// and naive.hpp: every sum's chain in the order the loops run it. The error model charges exactly
// this, so a change to a loop order or a rounding point there must change it here.
#include "contract/arithmetic.h"
#include "kernels/cpu/cpu_kernels.hpp"

namespace fc::cpu {
namespace {

// The accumulation type A (fp64 for fp64 storage, else Config::accum), the softmax type L, and the
// type the products' operands are held in (A when it is narrower than storage: with_types rounds
// q, k, v, d_o, o and P into it).
struct Types {
  DType acc, soft, operand;
  bool exact_products;  // a product of two operands is exact where mac computes it (float for A = fp16)
};
Types types_of(const Problem& p, const Config& cfg) {
  Types t;
  t.acc = p.dtype == DType::F64 ? DType::F64 : cfg.accum;
  t.soft = t.acc == DType::F64 ? DType::F64 : DType::F32;
  t.operand = significand_bits(t.acc) < significand_bits(p.dtype) ? t.acc : p.dtype;
  const DType product = t.acc == DType::F16 ? DType::F32 : t.acc;
  t.exact_products = 2 * significand_bits(t.operand) <= significand_bits(product);
  return t;
}

}  // namespace

Arithmetic tiled_arithmetic(const Problem& p, const Config& cfg) {
  const Types t = types_of(p, cfg);
  const Tiling tl = tiling_of(cfg);
  // An fp16 accumulator: L results rounded again to A.
  const bool narrow = significand_bits(t.acc) < significand_bits(t.soft);
  Arithmetic a;
  a.soft = t.soft, a.operand = t.operand;
  declare_glibc_libm(a);
  a.s = a.d_o_o = a.dp = serial_chain(t.acc, t.exact_products);
  // d_q: one accumulator per element across every key tile, keys ascending; d_k, d_v: one per
  // element of a key tile across the group's heads and their rows.
  a.dq = a.dkv = serial_chain(t.acc, t.exact_products);
  a.pv = serial_chain(t.acc, t.exact_products);
  a.l = serial_chain(t.soft, true);
  a.pv.block = a.l.block = tl.block_n;
  a.block_m = tl.block_m;
  if (tl.order == LoopOrder::FA2) {
    // One running <l, o> per row: both multiplied by alpha at each key tile, keys added one by one.
    a.pv.merge = a.l.merge = Merge::Rescale;
    a.pv.merge_old = narrow ? 2 : 1;
    a.o_normalise = 1;
  } else {
    // FA1: per tile P V and l_tile from zero; o = (l a_old o + a_new P V) / l_new kept normalised.
    // The old o takes the previous step's 1/l and product, l a_old, the product with o and the add
    // (5; 6 with an fp16 accumulator's store); the tile's P V takes a_new and the add.
    a.pv.merge = a.l.merge = Merge::Serial;
    a.pv.merge_old = narrow ? 6 : 5, a.pv.merge_new = 2;
    a.l.merge_old = 2, a.l.merge_new = 2;
    a.o_normalise = narrow ? 2 : 1;
  }
  if (tl.splits > 1) {
    // Split-KV: each split's key walk as above from empty, the splits merged in order (two products and
    // an add per merge): charged as sums in any order (properties/differential.cpp's chain covers it).
    a.pv.adder = a.l.adder = Adder::AnyOrder;
  }
  return a;
}

Arithmetic naive_arithmetic(const Problem& p, const Config& cfg) {
  const Types t = types_of(p, cfg);
  Arithmetic a;
  a.soft = t.soft, a.operand = t.operand;
  declare_glibc_libm(a);
  // Eigen's products (S = q k^T, o = P V, D, dP, d_q = dS K) sum in an order Eigen does not fix.
  Chain eigen;
  eigen.adder = Adder::AnyOrder, eigen.acc = t.acc, eigen.exact_products = t.exact_products;
  a.s = a.pv = a.d_o_o = a.dp = a.dq = eigen;
  a.l = serial_chain(t.acc, true);                // l = l + P_j over the stored P
  a.dkv = serial_chain(t.acc, t.exact_products);  // rank-1 updates: one add per query row
  a.stores_s = a.l_sums_stored_p = a.ds_from_stored_p = true;
  a.o_normalise = 1;
  return a;
}

}  // namespace fc::cpu
