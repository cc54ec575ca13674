// The docs' table of OVERLAP_* variables, written from runtime/api/env_vars.cc's table.
//   env_vars_doc                print the Markdown table
//   env_vars_doc --names        print every variable's name, one per line
//   env_vars_doc --check FILE   exit 1 unless FILE's generated section is the table
//   env_vars_doc --update FILE  rewrite FILE's generated section
// After changing the table: bazel run //runtime:env_vars_doc -- --update docs/tuning.md
// (bazel run starts in the runfiles; a relative FILE is taken from the workspace).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/api/env_vars.h"

namespace {

constexpr char kBegin[] =
    "<!-- OVERLAP_* table: generated from runtime/api/env_vars.cc by "
    "`bazel run //runtime:env_vars_doc -- --update docs/tuning.md`; do not edit by hand -->\n";
constexpr char kEnd[] = "<!-- end of generated OVERLAP_* table -->\n";

std::string WorkspacePath(const std::string& path) {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (path.empty() || path[0] == '/' || workspace == nullptr) return path;
  return absl::StrCat(workspace, "/", path);
}

bool ReadFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream buffer;
  buffer << in.rdbuf();
  *text = buffer.str();
  return true;
}

// The text between the markers, and where it starts and ends; false when a marker is missing.
bool FindSection(const std::string& text, size_t* begin, size_t* end) {
  const size_t b = text.find(kBegin);
  if (b == std::string::npos) return false;
  *begin = b + sizeof(kBegin) - 1;
  *end = text.find(kEnd, *begin);
  return *end != std::string::npos;
}

int CheckOrUpdate(const std::string& arg, const std::string& path) {
  std::string text;
  if (!ReadFile(path, &text)) {
    std::fprintf(stderr, "env_vars_doc: cannot read %s\n", path.c_str());
    return 2;
  }
  size_t begin = 0;
  size_t end = 0;
  if (!FindSection(text, &begin, &end)) {
    std::fprintf(stderr, "env_vars_doc: %s has no generated section; put these lines in it:\n%s%s",
                 path.c_str(), kBegin, kEnd);
    return 2;
  }
  const std::string table = overlap::env::MarkdownTable();
  if (arg == "--check") {
    if (text.compare(begin, end - begin, table) == 0) return 0;
    std::fprintf(stderr,
                 "env_vars_doc: the OVERLAP_* table in %s is not runtime/api/env_vars.cc's; run\n"
                 "  bazel run //runtime:env_vars_doc -- --update docs/tuning.md\n"
                 "---- in the file:\n%s---- from the table:\n%s",
                 path.c_str(), text.substr(begin, end - begin).c_str(), table.c_str());
    return 1;
  }
  text.replace(begin, end - begin, table);
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) {
    std::fprintf(stderr, "env_vars_doc: cannot write %s\n", path.c_str());
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string arg = argc > 1 ? argv[1] : "";
  if (argc == 1) {
    std::fputs(overlap::env::MarkdownTable().c_str(), stdout);
    return 0;
  }
  if (argc == 2 && arg == "--names") {
    for (const overlap::env::Var& var : overlap::env::Vars()) std::printf("%s\n", var.name);
    return 0;
  }
  if (argc == 3 && (arg == "--check" || arg == "--update")) {
    return CheckOrUpdate(arg, arg == "--update" ? WorkspacePath(argv[2]) : argv[2]);
  }
  std::fprintf(stderr, "usage: env_vars_doc [--names | --check FILE | --update FILE]\n");
  return 2;
}
