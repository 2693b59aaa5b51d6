// Small file helpers: read a whole file, and a read-only memory map.
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace kvscope {

// The whole file as a string; kvscope::Error naming the file if it cannot be read.
std::string read_file(const std::string& path);

bool file_exists(const std::string& path);  // a regular file
bool path_exists(const std::string& path);  // anything: a file, a directory, a device

// The path from the root, with no "." or ".." ("tests/models/tiny" ->
// "/work/kvscope/tests/models/tiny"): what a file written here names so that it
// still leads there when read from another folder. The path as given when it does
// not exist.
std::string absolute_path(const std::string& path);

// kvscope::Error "PATH: is a directory, not a file" when it is one. A directory
// opens for reading as a file does, and reads as empty: a check before reading.
void check_not_a_directory(const std::string& path);

// Fails now, not after a long run, if `path` cannot be written as write_file_atomically
// writes it: creates and removes the temporary file beside it (a device or a pipe is
// not opened). kvscope::Error naming the file (a directory, a missing folder, no
// permission, a name too long).
void check_writable(const std::string& path);

// Writes `path` whole or not at all: `write` fills a temporary file beside it, which
// is renamed over `path` once every byte is written and closed. A failed write (disk
// full) leaves what was at `path` before, and no temporary file; a symbolic link
// stays one, to the file it names. A device or pipe is written directly; standard
// output or error (/dev/stdout, wherever the shell sent it) through its stream,
// after what the stream holds.
// kvscope::Error "PATH: write failed (disk full?): not written" when it fails.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream& out)>& write);

// Outputs that would destroy a file: two outputs naming one file (--json and --trace:
// the second write erased the first), or an output naming a file the run reads (a
// --trace over the model's safetensors). `outputs` and `inputs` are (flag or name,
// path); empty paths are skipped; `model_dir`'s config, tokenizer, generation config
// and safetensors (with their index) count as inputs, and its heldout.txt is never
// written over either. kvscope::Error, before anything is written.
using NamedPath = std::pair<std::string, std::string>;
void check_outputs_apart(const std::vector<NamedPath>& outputs, std::vector<NamedPath> inputs,
                         const std::string& model_dir = "");

// A read-only, private memory map of a whole file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvscope
