#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "util/error.h"
#include "util/json_depth.h"

namespace kvscope {

using json = nlohmann::json;

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the format's own limit (safetensors' MAX_HEADER_SIZE)

DType parse_dtype(const std::string& s, const std::string& file, const std::string& name) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  throw file_error(file, "tensor \"" + name + "\" has dtype " + s + "; kvscope reads F32, F16 and BF16");
}

// Parses one header entry into a TensorView (data still relative: set by the caller).
TensorView parse_entry(const std::string& name, const json& e, const std::string& file, uint64_t& begin, uint64_t& end) {
  auto bad = [&](const std::string& what) { return file_error(file, "tensor \"" + name + "\": " + what); };
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    throw bad("header entry needs dtype, shape and data_offsets");
  if (!e["dtype"].is_string()) throw bad("dtype is not a string");
  TensorView t;
  t.name = name;
  t.file = file;
  t.dtype = parse_dtype(e["dtype"].get<std::string>(), file, name);
  const json& shape = e["shape"];
  if (!shape.is_array()) throw bad("shape is not a list");
  uint64_t numel = 1;
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) throw bad("shape has a non-integer or negative dimension");
    uint64_t v = d.get<uint64_t>();
    if (v > (uint64_t(1) << 40) || (v && numel > (uint64_t(1) << 40) / v)) throw bad("shape is absurdly large");
    numel *= v;
    t.shape.push_back(int64_t(v));
  }
  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw bad("data_offsets must be two non-negative integers");
  begin = off[0].get<uint64_t>();
  end = off[1].get<uint64_t>();
  if (end < begin) throw bad("data_offsets end before they begin");
  t.nbytes = size_t(end - begin);
  if (t.nbytes != numel * dtype_size(t.dtype))
    throw bad("data_offsets span " + std::to_string(t.nbytes) + " bytes but shape and dtype need " +
              std::to_string(numel * dtype_size(t.dtype)));
  return t;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  const uint64_t size = map_.size();
  if (size < 8) throw file_error(path, "too short for a safetensors file (" + std::to_string(size) + " bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | map_.data()[i];  // little-endian u64
  if (n > size - 8)
    throw file_error(path, "header length " + std::to_string(n) + " exceeds the file size " + std::to_string(size) +
                               " (truncated or not a safetensors file)");
  if (n > kMaxHeaderBytes) throw file_error(path, "header length " + std::to_string(n) + " is over the format's limit of 100000000 bytes");

  check_json_depth({reinterpret_cast<const char*>(map_.data()) + 8, size_t(n)}, path + " (header)");
  json header = json::parse(map_.data() + 8, map_.data() + 8 + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) throw file_error(path, "header is not valid JSON");
  if (!header.is_object()) throw file_error(path, "header is not a JSON object");

  const unsigned char* data = map_.data() + 8 + n;
  const uint64_t data_size = size - 8 - n;

  // Parse every entry, then check that the byte ranges tile [0, data_size) exactly.
  struct Range { uint64_t begin, end; std::string name; };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    uint64_t begin = 0, end = 0;
    TensorView t = parse_entry(it.key(), it.value(), path, begin, end);
    if (end > data_size)
      throw file_error(path, "tensor \"" + t.name + "\" ends at byte " + std::to_string(end) + " of a " +
                                 std::to_string(data_size) + "-byte data section (truncated file?)");
    t.data = data + begin;
    ranges.push_back({begin, end, t.name});
    tensors_.emplace(t.name, std::move(t));
  }
  // By begin, then end: an empty tensor ([8, 8]) may start where another starts.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t expected = 0;
  for (const Range& r : ranges) {
    if (r.begin < expected)
      throw file_error(path, "tensor \"" + r.name + "\" overlaps the previous tensor (offsets " + std::to_string(r.begin) +
                                 " < " + std::to_string(expected) + ")");
    if (r.begin > expected)
      throw file_error(path, "gap in the data before tensor \"" + r.name + "\" (offsets must be contiguous)");
    expected = r.end;
  }
  if (expected != data_size)
    throw file_error(path, std::to_string(data_size - expected) + " bytes after the last tensor (offsets must cover the data)");
}

Checkpoint::Checkpoint(const std::string& model_dir) : dir_(model_dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(model_dir)) throw file_error(model_dir, "not a directory (expected a Hugging Face model folder)");

  // Which files: the index's weight_map, or the single model.safetensors.
  std::vector<std::string> names;
  std::map<std::string, std::string> weight_map;  // tensor -> file, from the index
  const std::string index = model_dir + "/model.safetensors.index.json";
  const std::string single = model_dir + "/model.safetensors";
  for (const std::string& path : {index, single})  // else "no model.safetensors", which would not say why
    if (path_exists(path) && !file_exists(path)) {
      check_not_a_directory(path);
      throw file_error(path, "not a regular file");
    }
  if (file_exists(index)) {
    const std::string text = read_file(index);
    check_json_depth(text, index);
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw file_error(index, "expected a JSON object with a \"weight_map\"");
    std::set<std::string> files;
    for (auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw file_error(index, "weight_map entry for \"" + tensor + "\" is not a file name");
      std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos) throw file_error(index, "weight_map names a file outside the folder: " + f);
      files.insert(f);
      weight_map[tensor] = f;
    }
    names.assign(files.begin(), files.end());
  } else if (file_exists(single)) {
    names.push_back("model.safetensors");
  } else {
    throw file_error(model_dir, "no model.safetensors or model.safetensors.index.json");
  }

  for (const std::string& name : names) {
    files_.push_back(std::make_unique<SafetensorsFile>(model_dir + "/" + name));
    for (const auto& [tname, view] : files_.back()->tensors()) {
      auto [it, inserted] = tensors_.emplace(tname, view);
      if (!inserted) throw file_error(files_.back()->path(), "tensor \"" + tname + "\" also appears in " + it->second.file);
    }
  }
  // The index must tell the truth about where each tensor is.
  for (const auto& [tensor, file] : weight_map) {
    auto it = tensors_.find(tensor);
    if (it == tensors_.end()) throw file_error(index, "weight_map lists \"" + tensor + "\" but " + file + " does not hold it");
    if (it->second.file != model_dir + "/" + file)
      throw file_error(index, "weight_map puts \"" + tensor + "\" in " + file + " but it is in " + it->second.file);
  }
}

}  // namespace kvscope
