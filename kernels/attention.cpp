#include "attention.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>

namespace fc {

double default_scale(int32_t d) { return 1.0 / std::sqrt(double(d)); }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

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
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    if (std::strcmp(s, dtype_name(t)) == 0) return *out = t, true;
  return false;
}

bool parse_mask(const char* s, Mask* out) {
  for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight})
    if (std::strcmp(s, mask_name(m)) == 0) return *out = m, true;
  return false;
}

double max_finite(DType t) {
  switch (t) {
    case DType::F16: return 65504.0;
    case DType::BF16: return 0x1.fep127;
    case DType::F32: return double(std::numeric_limits<float>::max());
    case DType::F64: return std::numeric_limits<double>::max();
    case DType::I32: return double(std::numeric_limits<int32_t>::max());
    case DType::BOOL: return 1;
  }
  return 0;
}

int dtype_size(DType t) {
  switch (t) {
    case DType::F16:
    case DType::BF16: return 2;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F64: return 8;
    case DType::BOOL: return 1;
  }
  return 0;
}

}  // namespace fc
