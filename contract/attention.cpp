#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

namespace fc {

double default_scale(int32_t d) { return 1.0 / std::sqrt(double(d)); }

const char* dtype_name(DType t) { return in_dtype_table(t) ? dtype_info(t).name : "?"; }

const char* mask_name(Mask m) {
  switch (m) {
    case Mask::None: return "none";
    case Mask::CausalTopLeft: return "causal_top_left";
    case Mask::CausalBottomRight: return "causal_bottom_right";
  }
  return "?";
}

const char* mask_kind_name(MaskKind k) {
  switch (k) {
    case MaskKind::None: return "none";
    case MaskKind::Bool: return "bool";
    case MaskKind::Additive: return "additive";
  }
  return "?";
}

bool parse_mask_kind(const char* s, MaskKind* out) {
  for (MaskKind k : {MaskKind::None, MaskKind::Bool, MaskKind::Additive})
    if (std::strcmp(s, mask_kind_name(k)) == 0) return *out = k, true;
  return false;
}

bool parse_dtype(const char* s, DType* out) {
  for (const DTypeInfo& x : kDTypeTable)
    if (x.is_float && std::strcmp(s, x.name) == 0) return *out = x.t, true;
  return false;
}

bool parse_mask(const char* s, Mask* out) {
  for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight})
    if (std::strcmp(s, mask_name(m)) == 0) return *out = m, true;
  return false;
}

double max_finite(DType t) { return in_dtype_table(t) ? dtype_info(t).max_finite : 0; }

int dtype_size(DType t) { return in_dtype_table(t) ? dtype_info(t).bytes : 0; }

std::vector<DType> dtypes_in_order(bool (*keep)(DType)) {
  std::vector<DType> out(std::size(kDTypeTable));
  for (const DTypeInfo& x : kDTypeTable) out[size_t(x.t)] = x.t;
  // Swept dtypes by their place in the sweep, before every other; the rest keep the table's order.
  auto rank = [](DType t) { return dtype_info(t).sweep >= 0 ? dtype_info(t).sweep : int(std::size(kDTypeTable)); };
  std::stable_sort(out.begin(), out.end(), [&](DType a, DType b) { return rank(a) < rank(b); });
  out.erase(std::remove_if(out.begin(), out.end(), [&](DType t) { return !keep(t); }), out.end());
  return out;
}

std::string dtype_names(bool (*keep)(DType)) {
  const std::vector<DType> ts = dtypes_in_order(keep);
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == ts.size() ? " or " : ", ") + dtype_name(ts[i]);
  return s;
}

std::vector<DType> sweep_dtypes() { return dtypes_in_order(kernel_float); }

std::vector<DType> kernel_floats() {
  std::vector<DType> out;
  for (const DTypeInfo& x : kDTypeTable)
    if (kernel_float(x.t)) out.push_back(x.t);
  return out;
}

}  // namespace fc
