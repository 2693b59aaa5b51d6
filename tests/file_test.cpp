// util/file.h: writing an output file whole or not at all (write_file_atomically), and
// reading a checkpoint in place (MappedFile).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/file.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

TEST(WriteFileAtomically, WritesTheWholeFile) {
  const fs::path dir = fresh_dir("kvscope-atomic-whole");
  const std::string path = (dir / "out.json").string();
  write_file_atomically(path, [](std::ostream& out) { out << "new"; });
  EXPECT_EQ(read_file(path), "new");
  write_text(path, "old, and longer than new");
  write_file_atomically(path, [](std::ostream& out) { out << "new"; });
  EXPECT_EQ(read_file(path), "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temporary left
}

// Once every output was opened with truncation and written in place: a disk that
// filled up half-way left a file cut short where the last good one had been.
TEST(WriteFileAtomically, AFailedWriteLeavesTheFileBeforeIt) {
  const fs::path dir = fresh_dir("kvscope-atomic-failed");
  const std::string path = (dir / "run.trace").string();
  write_text(path, "the last good trace");
  try {
    write_file_atomically(path, [](std::ostream& out) {
      out << "half of a new one";
      out.setstate(std::ios::badbit);  // what a full disk does to the stream
    });
    ADD_FAILURE() << "a failed write was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": write failed (disk full?): not written");
  }
  EXPECT_EQ(read_file(path), "the last good trace");
  // A writer that throws: its error, and the same file.
  EXPECT_THROW(write_file_atomically(path, [](std::ostream&) { throw Error("the writer's own error"); }), Error);
  EXPECT_EQ(read_file(path), "the last good trace");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temporary left
}

TEST(WriteFileAtomically, ALinkStaysALinkToItsFile) {
  const fs::path dir = fresh_dir("kvscope-atomic-link");
  write_text(dir / "real.json", "old");
  fs::create_symlink(dir / "real.json", dir / "link.json");
  write_file_atomically((dir / "link.json").string(), [](std::ostream& out) { out << "new"; });
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(read_file((dir / "real.json").string()), "new");
}

// A link to a file not written yet: the file is written where the link points, and
// the link stays. (It was replaced by a regular file, and check_writable left the file
// it had created through the link behind, empty.)
TEST(WriteFileAtomically, ALinkToAFileNotThereYetStaysALink) {
  const fs::path dir = fresh_dir("kvscope-atomic-dangling");
  fs::create_symlink(dir / "later.json", dir / "link.json");
  check_writable((dir / "link.json").string());
  EXPECT_FALSE(fs::exists(dir / "later.json"));  // the check leaves nothing behind
  write_file_atomically((dir / "link.json").string(), [](std::ostream& out) { out << "new"; });
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(read_file((dir / "later.json").string()), "new");
}

// Links that lead round in a loop are refused, as the kernel refuses them (the loop
// resolved to the link itself, which the write then replaced with a file).
TEST(CheckWritable, LinksInALoopAreRefused) {
  const fs::path dir = fresh_dir("kvscope-writable-loop");
  fs::create_symlink(dir / "b", dir / "a");
  fs::create_symlink(dir / "a", dir / "b");
  try {
    check_writable((dir / "a").string());
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write: Too many levels of symbolic links"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_symlink(dir / "a"));
}

// A file written again keeps its permissions (a 0600 trace came back 0644).
TEST(WriteFileAtomically, TheFileKeepsItsPermissions) {
  const fs::path dir = fresh_dir("kvscope-atomic-mode");
  const std::string path = (dir / "private.json").string();
  write_text(path, "old");
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomically(path, [](std::ostream& out) { out << "new"; });
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
}

// check_writable tries what the write will do, a temporary file beside the target: a
// name that fits alone but not with ".tmp-PID" after it passed, and the run failed
// at its end ("File name too long").
TEST(CheckWritable, TriesTheTemporaryFileTheWriteUses) {
  const fs::path dir = fresh_dir("kvscope-writable");
  const std::string longest = (dir / std::string(250, 'a')).string();  // a name may have 255 bytes
  write_text(longest, "x");
  ASSERT_TRUE(fs::exists(longest));
  try {
    check_writable(longest);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write: File name too long"), std::string::npos) << e.what();
  }
  check_writable((dir / "fine.json").string());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // nothing left behind
}

// A device is written, not replaced: renaming a file over /dev/full would need root
// and break the machine; writing to it fails, and says so.
TEST(WriteFileAtomically, ADeviceIsWrittenDirectly) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full on this machine";
  EXPECT_THROW(write_file_atomically("/dev/full", [](std::ostream& out) { out << "bytes"; }), Error);
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
  write_file_atomically("/dev/null", [](std::ostream& out) { out << "bytes"; });
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

// ---- MappedFile (a checkpoint's bytes, read in place) -----------------------------

// A move hands the mapping over: the moved-from file holds nothing (its destructor
// must not unmap what the other now reads), and an assignment unmaps what it held.
TEST(MappedFile, MovingHandsTheMappingOver) {
  const fs::path dir = fresh_dir("kvscope-mapped-move");
  write_text(dir / "a", "abc");
  write_text(dir / "b", "defgh");
  MappedFile a((dir / "a").string());
  const unsigned char* bytes = a.data();
  MappedFile moved(std::move(a));
  EXPECT_EQ(moved.data(), bytes);
  EXPECT_EQ(moved.size(), 3u);
  EXPECT_EQ(a.data(), nullptr);  // reading a moved-from file on purpose: what the move left
  EXPECT_EQ(a.size(), 0u);
  MappedFile b((dir / "b").string());
  b = std::move(moved);
  EXPECT_EQ(b.data(), bytes);
  EXPECT_EQ(std::string(b.data(), b.data() + b.size()), "abc");
  EXPECT_EQ(b.path(), (dir / "a").string());
  EXPECT_EQ(moved.data(), nullptr);
}

// Only a regular file is mapped: a device or a folder is refused by name.
TEST(MappedFile, MapsOnlyARegularFile) {
  for (const std::string path : {"/dev/null", "/"}) {
    try {
      MappedFile m(path);
      ADD_FAILURE() << path << " was mapped";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), path + ": not a regular file");
    }
  }
  const fs::path dir = fresh_dir("kvscope-mapped-empty");
  // A named pipe too, refused at once: opening it once waited for a writer (a model
  // whose shard was a FIFO hung), so this test would hang without O_NONBLOCK.
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW({ MappedFile m(fifo); }, Error);
  write_text(dir / "empty", "");
  const MappedFile empty((dir / "empty").string());  // mmap of 0 bytes would fail: nothing is mapped
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
}

}  // namespace
}  // namespace kvscope
