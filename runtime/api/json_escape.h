// JSON string escaping for text overlap writes into JSON by hand (the C API's stats, schedule and
// configuration, the timeline): tensor names and paths are user text.
#ifndef OVERLAP_RUNTIME_API_JSON_ESCAPE_H_
#define OVERLAP_RUNTIME_API_JSON_ESCAPE_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace overlap {

// `text` with what a JSON string requires escaped: quotes, backslashes and control characters.
inline std::string JsonEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<int>(c));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_API_JSON_ESCAPE_H_
