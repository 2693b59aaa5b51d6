// The Markdown pages a reader opens, in one list: the doc test checks each of them
// (doc_check.cpp) and the unit tests read them (tests/readme_test.cpp), so a new page
// is in both at once.
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

namespace kvscope::docs {

// README.md and every .md under assets, core, kernels, tutorials and viz, as paths
// relative to `source_dir` ("tutorials/README.md"), README.md first and the rest sorted.
// Not the doc checker's fixture (tutorials/doc_check_fixtures/), which is stale on purpose.
inline std::vector<std::string> documents(const std::filesystem::path& source_dir) {
  std::vector<std::string> docs = {"README.md"};
  for (const char* folder : {"assets", "core", "kernels", "tutorials", "viz"}) {
    if (!std::filesystem::is_directory(source_dir / folder)) continue;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(source_dir / folder)) {
      const std::string rel = std::filesystem::relative(entry.path(), source_dir).string();
      if (entry.path().extension() == ".md" && rel.rfind("tutorials/doc_check_fixtures/", 0) != 0)
        docs.push_back(rel);
    }
  }
  std::sort(docs.begin() + 1, docs.end());
  return docs;
}

// Whether `doc` is a chapter's page (tutorials/NN-name/README.md) or the chapters'
// index (tutorials/README.md): the pages whose commands the doc test runs one test each.
inline bool is_chapter_page(const std::string& doc) {
  if (doc == "tutorials/README.md") return true;
  const std::string dir = "tutorials/";
  if (doc.rfind(dir, 0) != 0 || doc.size() < dir.size() + 3) return false;
  const std::string rest = doc.substr(dir.size());  // "03-evict-87-reclaim-12/README.md"
  return std::isdigit(static_cast<unsigned char>(rest[0])) && std::isdigit(static_cast<unsigned char>(rest[1])) &&
         rest[2] == '-' && rest.find('/') != std::string::npos && rest.substr(rest.find('/')) == "/README.md";
}

}  // namespace kvscope::docs
