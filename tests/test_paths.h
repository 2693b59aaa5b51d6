// Where tests find their data: the source tree (models, fixtures) and the build tree.
#pragma once

#include <string>

namespace kvscope::test {

inline std::string source_path(const std::string& rel) { return std::string(KVSCOPE_SOURCE_DIR) + "/" + rel; }
inline std::string binary_path(const std::string& rel) { return std::string(KVSCOPE_BINARY_DIR) + "/" + rel; }

// The tiny random-weight checkpoints made by tests/reference/make_tiny_models.py.
inline std::string tiny_model(const std::string& name) { return source_path("tests/models/" + name); }

}  // namespace kvscope::test
