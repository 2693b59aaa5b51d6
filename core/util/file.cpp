#include "util/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "util/error.h"
#include "util/format.h"

namespace kvscope {

std::string absolute_path(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (!resolved) return path;
  std::string out(resolved);
  std::free(resolved);
  return out;
}

void check_not_a_directory(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw file_error(path, "is a directory, not a file");
}

std::string read_file(const std::string& path) {
  check_not_a_directory(path);
  // A device or a pipe has no end to read to (kvscope memory --config /dev/zero grew
  // without bound); every file kvscope reads is a regular one.
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw file_error(path, "not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw file_error(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw file_error(path, "read failed");
  return ss.str();
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

namespace {

// The file a write to `path` replaces: through symbolic links, even one whose file
// does not exist yet (realpath resolves only what exists). kvscope::Error for links
// that lead round in a loop (40 hops, as the kernel counts).
std::string write_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = path;
  for (int hops = 0; fs::is_symlink(p, ec); ++hops) {
    const fs::path to = fs::read_symlink(p, ec);
    if (ec || hops == 40) throw file_error(path, "cannot write: " + std::string(std::strerror(ELOOP)));
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return absolute_path(p.string());
}

// The temporary file write_file_atomically fills beside `target` before the rename.
std::string temporary_beside(const std::string& target) { return target + ".tmp-" + std::to_string(::getpid()); }

// How a write reaches `path`. Through `stream` when the path already is standard
// output or error (--trace /dev/stdout, whatever the shell sent it to), after what the
// stream holds: opened again by name, a file was truncated (or renamed over) and the
// table lost, and a pipe took the trace before the table. Directly when it is a device
// or a pipe (a FIFO, /dev/null): `special`. Else (neither set) as a file, by a rename.
struct Destination {
  FILE* stream = nullptr;
  bool special = false;
};

Destination destination_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};  // no file yet
  for (FILE* stream : {stdout, stderr}) {
    struct stat open {};
    if (::fstat(::fileno(stream), &open) == 0 && open.st_dev == st.st_dev && open.st_ino == st.st_ino)
      return {stream, false};
  }
  return {nullptr, !S_ISREG(st.st_mode)};
}

}  // namespace

// What write_file_atomically will do, tried now: create (and remove) its temporary
// file in the target's folder, and, when the target exists, ask whether it may be
// written (a read-only file is not replaced behind its back). Opening the target
// alone passed where the folder took no new file, and a name too long once
// ".tmp-PID" was added; a FIFO is not opened (its reader would see an empty file,
// and the real write then wait forever).
void check_writable(const std::string& path) {
  if (path.empty()) throw Error("an output file name is empty");
  check_not_a_directory(path);
  if (const Destination d = destination_of(path); d.stream || d.special) return;
  const std::string target = write_target(path);
  if (::access(target.c_str(), F_OK) == 0 && ::access(target.c_str(), W_OK) != 0)
    throw file_error(path, std::string("cannot write: ") + std::strerror(errno));
  const std::string temp = temporary_beside(target);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) throw file_error(path, std::string("cannot write: ") + std::strerror(errno));
  ::close(fd);
  ::unlink(temp.c_str());
}

void write_file_atomically(const std::string& path, const std::function<void(std::ostream& out)>& write) {
  check_not_a_directory(path);
  const Destination d = destination_of(path);
  if (d.stream) {
    std::ostringstream out;
    write(out);
    const std::string bytes = out.str();
    if (std::fwrite(bytes.data(), 1, bytes.size(), d.stream) != bytes.size() || std::fflush(d.stream) != 0)
      throw file_error(path, "write failed (disk full?)");
    return;
  }
  if (d.special) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw file_error(path, std::string("cannot open for writing: ") + std::strerror(errno));
    write(out);
    out.close();
    if (!out) throw file_error(path, "write failed (disk full?)");
    return;
  }
  const std::string target = write_target(path);  // through a symbolic link, to its file
  const std::string temp = temporary_beside(target);
  struct stat st {};
  const bool existed = ::stat(target.c_str(), &st) == 0;
  std::ofstream out(temp, std::ios::binary | std::ios::trunc);
  if (!out) throw file_error(path, std::string("cannot write: ") + std::strerror(errno));
  try {
    write(out);
  } catch (...) {
    out.close();
    ::unlink(temp.c_str());
    throw;
  }
  out.close();
  if (existed) ::chmod(temp.c_str(), st.st_mode & 07777);  // the file keeps its permissions
  if (!out || ::rename(temp.c_str(), target.c_str()) != 0) {
    ::unlink(temp.c_str());
    throw file_error(path, "write failed (disk full?): not written");
  }
}

namespace {

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

}  // namespace

void check_outputs_apart(const std::vector<NamedPath>& outputs, std::vector<NamedPath> inputs,
                         const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::vector<NamedPath> kept;  // the model folder's held-out text: no output goes over it, read this run or not
  std::error_code ec;
  if (!model_dir.empty())
    for (const fs::directory_entry& e : fs::directory_iterator(model_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name == "config.json" || name == "tokenizer.json" || name == "generation_config.json" ||
          ends_with(name, ".safetensors") || ends_with(name, ".safetensors.index.json"))
        inputs.emplace_back("the model's " + name, e.path().string());
      if (name == "heldout.txt") kept.emplace_back("the model's " + name, e.path().string());
    }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [flag, path] = outputs[i];
    if (path.empty()) continue;
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[j].second.empty() && same_file(path, outputs[j].second))
        throw Error(flag + " and " + outputs[j].first + " both name " + path + ": each output needs a file of its own");
    for (const auto& [name, input] : inputs)
      if (!input.empty() && same_file(path, input))
        throw Error(flag + " " + path + " is " + name + ", which this run reads: writing it would destroy it");
    for (const auto& [name, file] : kept)
      if (same_file(path, file))
        throw Error(flag + " " + path + " is " + name +
                    ", the held-out text eval, heads and serve-bench read: writing it would destroy it");
  }
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a named pipe would wait for a writer (a shard that is a FIFO
  // hung the run); it is refused below, like any file that is not a regular one.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw file_error(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw file_error(path, "not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw file_error(path, std::string("mmap failed: ") + std::strerror(err));
    }
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace kvscope
