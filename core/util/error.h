// kvscope::Error: the one exception type of the library (PoolExhausted, below, is
// an Error too, for callers that want to tell a full pool from bad input).
//
// Every message names what was being read and what is wrong with it, on one
// line, e.g. "x/model.safetensors: header length 9000 exceeds the file size 512
// (truncated or not a safetensors file)".
// The command-line program prints it after "kvscope: error: " and exits with 1.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace kvscope {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The block pool has no room for a step. The step was refused before anything
// changed, so a caller that can free blocks may retry it; kvscope generate
// catches it to say which flag would have made room.
struct PoolExhausted : Error {
  using Error::Error;
};

// Error("FILE: what") in one call.
inline Error file_error(const std::string& file, const std::string& what) {
  return Error(file + ": " + what);
}

// A number as a message quotes it: "-1", "0.875", "nan", "1e+30" (printf's %g),
// and a whole number in full: "1000000000", not %g's "1e+09".
inline std::string number_text(double x) {
  char text[32];
  const bool whole = x > -1e15 && x < 1e15 && x == double(int64_t(x));  // range first: NaN and 1e300 are not cast
  std::snprintf(text, sizeof text, whole ? "%.0f" : "%g", x);
  return text;
}

}  // namespace kvscope
