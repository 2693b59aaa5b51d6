// Whole numbers from JSON, checked against a range before they are narrowed:
// nlohmann's get<int>() turns 2^32 + 2 into 2 without a word.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

namespace kvscope {

// True when v is a JSON integer in [lo, hi]. A fraction, a string, or an unsigned
// number past INT64_MAX (which get<int64_t>() would wrap) is not.
inline bool json_int_in(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) return false;
  const int64_t x = v.get<int64_t>();
  return x >= lo && x <= hi;
}

}  // namespace kvscope
