// doc_check: the tutorials' doc test. Stale text fails, with a diff.
//
//   doc_check [--update] [--source-dir DIR] [--build-dir DIR] FILE.md...
//   doc_check --other-pages [--source-dir DIR] [--build-dir DIR]
//
// A chapter quotes its program the way a reader would see it, in a ```console
// block: each line starting with "$ " is a command, the lines after it (up to
// the next "$ " or the end of the block) are what it prints.
//
//   ```console
//   $ build/tutorials/03-evict-87-reclaim-12
//   block size 16: ...
//   ```
//
// For every file, doc_check
//   1. runs each command from the source directory (a leading "build/" is the
//      build directory) and requires its standard output to equal the quoted
//      lines, trailing whitespace and trailing blank lines aside; a difference
//      is printed as a diff (- quoted in the text, + printed today);
//   2. requires every number in the prose (outside code blocks) to appear in
//      what the file's commands print or in their options, so a
//      sentence cannot go on quoting a number the program no longer prints
//      (any printed number will do: which one a sentence means is not checked);
//      Not numbers, here: digits glued to letters (Qwen3, 0.6B, f32, 16K),
//      words with a '/' (paths), link texts and targets, HTML comments, list
//      markers and a heading's leading chapter number (prose_numbers.h);
//   3. requires each ```cpp block to be an excerpt of the chapter's main.cpp:
//      every line, trimmed, is a line of the program ("..." lines elide);
//   4. requires every relative link to name a file or folder that exists.
//
// Files without a console block get checks 3 and 4 only. --update rewrites the quoted
// output with today's (then read the diff and fix the prose). --other-pages checks every
// page of documents.h's list but the chapters' (which the doc test checks one test
// each): the README, the model card, the app's guide and any page added later.
// Exit code: 0 when every file passes, 1 otherwise.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "documents.h"
#include "prose_numbers.h"

namespace fs = std::filesystem;
using kvscope::docs::Number;
using kvscope::docs::numbers;
using kvscope::docs::prose_only;
using kvscope::docs::without_paths;

namespace {

std::string rstrip(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return rstrip(s.substr(b));
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Lines as compared: trailing whitespace dropped, trailing blank lines dropped.
std::vector<std::string> normalise(std::vector<std::string> lines) {
  for (std::string& l : lines) l = rstrip(l);
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

bool read_text(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

// ---- markdown: fenced blocks -------------------------------------------------

struct Block {
  std::string info;                // the word after the fence: console, cpp, sh, text, ...
  size_t open = 0, close = 0;      // line indices of the fences
};

// A fence: three or more backticks or tildes, possibly indented.
bool fence(const std::string& line, std::string& marker, std::string& info) {
  const std::string t = trim(line);
  if (t.size() < 3 || (t[0] != '`' && t[0] != '~')) return false;
  size_t n = 0;
  while (n < t.size() && t[n] == t[0]) ++n;
  if (n < 3) return false;
  marker = t.substr(0, n);
  info = trim(t.substr(n));
  return true;
}

std::vector<Block> find_blocks(const std::vector<std::string>& lines, std::vector<bool>& in_block) {
  std::vector<Block> blocks;
  in_block.assign(lines.size(), false);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string marker, info;
    if (!fence(lines[i], marker, info)) continue;
    Block b;
    b.info = info.substr(0, info.find_first_of(" \t{"));
    b.open = i;
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      std::string m2, info2;
      if (fence(lines[j], m2, info2) && m2[0] == marker[0] && m2.size() >= marker.size() && info2.empty()) break;
    }
    b.close = j;  // == lines.size() when the block is never closed
    for (size_t k = i; k <= j && k < lines.size(); ++k) in_block[k] = true;
    blocks.push_back(b);
    i = j;
  }
  return blocks;
}

// ---- running a command -------------------------------------------------------

struct RunResult {
  std::string out;
  int status = 0;
};

RunResult run(const std::string& command) {
  RunResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    r.status = -1;
    return r;
  }
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int st = ::pclose(pipe);
  r.status = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
  return r;
}

// ---- diff --------------------------------------------------------------------

// A line diff by longest common subsequence (outputs are a few hundred lines at most).
// Prints changed lines with two lines of context; `first_line` numbers the quoted lines.
void print_diff(const std::vector<std::string>& want, const std::vector<std::string>& got, size_t first_line) {
  const size_t n = want.size(), m = got.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = want[i] == got[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  struct Op {
    char kind;  // ' ', '-', '+'
    size_t line;  // in the file, for ' ' and '-'; the quoted line it would follow, for '+'
    std::string text;
  };
  std::vector<Op> ops;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && want[i] == got[j]) {
      ops.push_back({' ', first_line + i, want[i]}), ++i, ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      ops.push_back({'-', first_line + i, want[i]}), ++i;
    } else {
      ops.push_back({'+', first_line + i, got[j]}), ++j;
    }
  }
  constexpr size_t kContext = 2;
  std::vector<bool> show(ops.size(), false);
  for (size_t k = 0; k < ops.size(); ++k)
    if (ops[k].kind != ' ')
      for (size_t c = (k > kContext ? k - kContext : 0); c <= std::min(ops.size() - 1, k + kContext); ++c) show[c] = true;
  bool gap = false;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (!show[k]) {
      gap = true;
      continue;
    }
    if (gap) std::cout << "          ...\n";
    gap = false;
    char num[32];
    std::snprintf(num, sizeof num, "%6zu", ops[k].line);
    std::cout << "  " << (ops[k].kind == '+' ? std::string("      ") : std::string(num)) << " " << ops[k].kind << " "
              << ops[k].text << "\n";
  }
}

// ---- one file ----------------------------------------------------------------

struct Options {
  fs::path source_dir = ".";
  fs::path build_dir = "build";
  bool update = false;
};

// The command as run: from the source directory, a leading "build/" in the build directory.
std::string shell_command(const std::string& command, const Options& o) {
  std::string c = command;
  if (c.rfind("build/", 0) == 0) c = (o.build_dir / c.substr(6)).string();
  return "cd '" + o.source_dir.string() + "' && " + c;
}

// One Markdown file being checked, and whether it has failed yet.
struct Page {
  std::string name;                // as given on the command line; failures are "name:line: what"
  fs::path path;
  std::vector<std::string> lines;  // the file, one entry per line
  std::vector<bool> in_block;      // [lines]  inside a ``` block, fences included
  std::vector<Block> blocks;
  bool ok = true;

  void fail(size_t line, const std::string& what) {
    std::cout << name << ":" << line + 1 << ": " << what << "\n";
    ok = false;
  }
};

// Check 1: runs a ```console block's commands and compares what they print with the
// quoted lines. Adds every number they print, or are given, to `printed`; returns the
// block's body with today's output (what --update writes).
std::vector<std::string> check_console(Page& page, const Block& b, const Options& o, std::set<std::string>& printed) {
  const std::vector<std::string> body(page.lines.begin() + b.open + 1, page.lines.begin() + b.close);
  std::vector<std::string> new_body;
  for (size_t k = 0; k < body.size();) {
    if (body[k].rfind("$ ", 0) != 0) {
      page.fail(b.open + 1 + k, "a ```console block must start with a \"$ command\" line");
      break;
    }
    const std::string command = trim(body[k].substr(2));
    const size_t first = k + 1;
    size_t end = first;
    while (end < body.size() && body[end].rfind("$ ", 0) != 0) ++end;
    const std::vector<std::string> want = normalise({body.begin() + first, body.begin() + end});

    const RunResult r = run(shell_command(command, o));
    const std::vector<std::string> got = normalise(split_lines(r.out));
    for (const std::string& l : got)
      for (const Number& n : numbers(l)) printed.insert(n.text);
    for (const Number& n : numbers(without_paths(command))) printed.insert(n.text);  // its options, not its path

    if (r.status != 0) {
      page.fail(b.open + 1 + k, "`" + command + "` exited with status " + std::to_string(r.status));
    } else if (want != got) {
      page.fail(b.open + 1 + k, "the output of `" + command + "` is not what the text quotes (- quoted, + printed today):");
      print_diff(want, got, b.open + 2 + first);
    }
    new_body.push_back(body[k]);
    new_body.insert(new_body.end(), got.begin(), got.end());
    k = end;
  }
  return new_body;
}

// Check 2: every number in the prose is one the commands printed (or were given).
void check_prose_numbers(Page& page, const std::set<std::string>& printed) {
  bool in_comment = false;
  for (size_t i = 0; i < page.lines.size(); ++i) {
    if (page.in_block[i]) continue;
    const std::string prose = prose_only(page.lines[i], in_comment);
    for (const Number& n : numbers(prose))
      if (!n.glued && !printed.count(n.text))
        page.fail(i, "the number " + n.text + " is in the text but no command of this file prints it");
  }
}

// Check 3: every line of a ```cpp block, trimmed, is a line of the chapter's main.cpp.
void check_excerpt(Page& page, const Block& b) {
  std::string program;
  const fs::path main_cpp = page.path.parent_path() / "main.cpp";
  if (!read_text(main_cpp, program)) {
    page.fail(b.open, "a ```cpp block, but no " + main_cpp.filename().string() + " beside the text to quote from");
    return;
  }
  std::set<std::string> source_lines;
  for (const std::string& l : split_lines(program)) source_lines.insert(trim(l));
  for (size_t k = b.open + 1; k < b.close; ++k) {
    const std::string t = trim(page.lines[k]);
    if (t.empty() || t == "..." || t == "// ...") continue;
    if (!source_lines.count(t)) page.fail(k, "this line of a ```cpp block is not in main.cpp: " + t);
  }
}

// Check 4: every relative link names a file or folder that exists.
void check_links(Page& page) {
  for (size_t i = 0; i < page.lines.size(); ++i) {
    if (page.in_block[i]) continue;
    const std::string& l = page.lines[i];
    for (size_t at = 0; (at = l.find("](", at)) != std::string::npos;) {
      const size_t close = l.find(')', at);
      if (close == std::string::npos) break;
      std::string target = l.substr(at + 2, close - at - 2);
      at = close;
      if (target.empty() || target[0] == '#' || target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0)
        continue;
      target = target.substr(0, target.find('#'));
      if (!fs::exists(page.path.parent_path() / target)) page.fail(i, "the link target " + target + " does not exist");
    }
  }
}

// --update: the file again, with each console block's body replaced by today's.
//   new_bodies: (index into page.blocks, body), in file order
// Written to a temporary file and renamed over the page, so a full disk cannot leave
// it cut short. Returns false (and says so) when it could not be written.
bool write_new_bodies(const Page& page, const std::vector<std::pair<size_t, std::vector<std::string>>>& new_bodies) {
  std::vector<std::string> out;
  size_t next = 0;
  for (const auto& [bi, body] : new_bodies) {
    const Block& b = page.blocks[bi];
    out.insert(out.end(), page.lines.begin() + next, page.lines.begin() + b.open + 1);
    out.insert(out.end(), body.begin(), body.end());
    next = b.close;
  }
  out.insert(out.end(), page.lines.begin() + next, page.lines.end());
  const fs::path temp = page.path.string() + ".update";
  std::ofstream f(temp, std::ios::binary);
  for (const std::string& l : out) f << l << "\n";
  f.close();
  std::error_code ec;
  if (!f || (fs::rename(temp, page.path, ec), ec)) {
    fs::remove(temp, ec);
    std::cout << page.name << ": cannot write the updated page (disk full?); it is as it was\n";
    return false;
  }
  std::cout << page.name << ": quoted output updated\n";
  return true;
}

// A chapter's page: README.md in a folder named NN-name (tutorials/03-evict-87-reclaim-12/).
bool is_numbered_chapter(const fs::path& path) {
  const std::string folder = path.parent_path().filename().string();
  return path.filename() == "README.md" && folder.size() > 3 && std::isdigit(static_cast<unsigned char>(folder[0])) &&
         std::isdigit(static_cast<unsigned char>(folder[1])) && folder[2] == '-';
}

bool check_file(const std::string& name, const Options& o) {
  Page page;
  page.name = name;
  page.path = fs::path(name).is_absolute() ? fs::path(name) : o.source_dir / name;
  std::string text;
  if (!read_text(page.path, text)) {
    std::cout << name << ": cannot read the file\n";
    return false;
  }
  page.lines = split_lines(text);
  page.blocks = find_blocks(page.lines, page.in_block);

  std::set<std::string> printed;  // every number the commands print, or are given
  bool any_console = false;
  std::vector<std::pair<size_t, std::vector<std::string>>> new_bodies;  // for --update
  for (size_t bi = 0; bi < page.blocks.size(); ++bi) {
    const Block& b = page.blocks[bi];
    if (b.close >= page.lines.size()) {
      page.fail(b.open, "a ``` block is never closed");
    } else if (b.info == "cpp") {
      check_excerpt(page, b);
    } else if (b.info == "console") {
      any_console = true;
      new_bodies.push_back({bi, check_console(page, b, o, printed)});
    }
  }
  if (any_console) check_prose_numbers(page, printed);
  else if (is_numbered_chapter(page.path))  // its numbers would go unchecked
    page.fail(0, "a chapter quotes no ```console block: nothing it prints is checked, nor any number in its text");
  check_links(page);

  if (o.update && !new_bodies.empty() && !write_new_bodies(page, new_bodies)) page.ok = false;
  if (page.ok) std::cout << name << ": ok\n";
  return page.ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> files;
  bool other_pages = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--update") {
      o.update = true;
    } else if (a == "--other-pages") {
      other_pages = true;
    } else if ((a == "--source-dir" || a == "--build-dir") && i + 1 < argc) {
      (a == "--source-dir" ? o.source_dir : o.build_dir) = argv[++i];
    } else if (a == "-h" || a == "--help" || a[0] == '-') {
      std::cerr << "usage: doc_check [--update] [--source-dir DIR] [--build-dir DIR] FILE.md...\n"
                   "       doc_check --other-pages [--source-dir DIR] [--build-dir DIR]\n"
                   "Runs the commands quoted in ```console blocks and checks their output, the numbers\n"
                   "in the prose, ```cpp excerpts and relative links. Paths are relative to the source dir.\n"
                   "--other-pages checks every page but the chapters' (tutorials/documents.h lists them).\n";
      return a[0] == '-' && a != "-h" && a != "--help" ? 2 : 0;
    } else {
      files.push_back(a);
    }
  }
  o.source_dir = fs::absolute(o.source_dir);
  o.build_dir = fs::absolute(o.build_dir);
  if (other_pages && !fs::exists(o.source_dir / "README.md")) {
    std::cerr << "doc_check: no README.md in " << o.source_dir.string()
              << ": run from the repository root, or name it with --source-dir\n";
    return 2;
  }
  if (other_pages)
    for (const std::string& doc : kvscope::docs::documents(o.source_dir))
      if (!kvscope::docs::is_chapter_page(doc)) files.push_back(doc);
  if (files.empty()) {
    std::cerr << "doc_check: no pages to check (name FILE.md, or --other-pages)\n";
    return 2;
  }
  bool ok = true;
  for (const std::string& f : files) ok = check_file(f, o) && ok;
  if (!ok && !o.update)
    std::cout << "\nA quoted output is stale? Rebuild, run `build/tutorials/doc_check --update FILE.md` from the\n"
                 "repository root, read the diff (git diff), and fix every sentence that quotes a changed number.\n";
  return ok ? 0 : 1;
}
