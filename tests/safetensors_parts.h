// A safetensors file taken apart into its header JSON and its data section, and
// put back together: how tests make a checkpoint that differs from a tiny model
// in one thing (a broken offset, a missing tensor, a layer fewer).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace kvscope::test {

struct SafetensorsParts {
  nlohmann::json header;  // tensor name -> {"dtype", "shape", "data_offsets": [begin, end)} (+ "__metadata__")
  std::string data;       // the bytes after the header; offsets count from its start
};

// File layout: 8 bytes little-endian header length N, N bytes of JSON, the data.
inline SafetensorsParts split_safetensors(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[i]);
  return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

inline std::string join_safetensors(const nlohmann::json& header, const std::string& data) {
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';  // the data section starts 8-byte aligned, as the format's writers do
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  return out + h + data;
}

}  // namespace kvscope::test
