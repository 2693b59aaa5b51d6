// safetensors: the checkpoint format of Hugging Face models, memory-mapped.
//
// Layout of one file:
//   [8 bytes]  N, the header length, unsigned 64-bit little-endian
//   [N bytes]  JSON: {"name": {"dtype": "BF16", "shape": [rows, cols],
//                              "data_offsets": [begin, end)}, ..., "__metadata__": {...}}
//   [rest]     the tensor bytes; offsets are relative to the start of this section
//
// Every number in the header is checked against the file before any tensor is
// touched: a corrupt file gives a one-line kvscope::Error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/file.h"

namespace kvscope {

enum class DType { F32, F16, BF16 };

const char* dtype_name(DType t);      // "F32", "F16", "BF16"
size_t dtype_size(DType t);           // bytes per element

// One tensor inside a mapped file (a view: the file owns the bytes).
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const unsigned char* data = nullptr;  // into the memory map
  size_t nbytes = 0;
  std::string file;                     // for error messages

  int64_t numel() const;
};

// One .safetensors file, mapped and validated.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return map_.path(); }

 private:
  MappedFile map_;
  std::map<std::string, TensorView> tensors_;
};

// All tensors of a Hugging Face model folder: DIR/model.safetensors, or the
// shards listed by DIR/model.safetensors.index.json.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& model_dir);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;  // keep the maps alive
  std::map<std::string, TensorView> tensors_;
};

}  // namespace kvscope
