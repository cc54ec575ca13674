// Every OVERLAP_* environment variable, once: its name, kind, accepted range or values, default,
// one-line description and, for those overlaprun sets, the launcher option. The runtime parses and
// checks its configuration through this table (runtime/api/config.cc), overlaprun builds its runtime
// options from it and checks them with the same functions before launching
// (launcher/runtime_flags.cc), the runtime's unknown-variable warning and the docs' table
// (docs/tuning.md, written by //runtime:env_vars_doc) come from it, and
// tests/runtime/env_vars_test.sh checks that every variable the sources read is listed here.
//
// Depends on Abseil only, so that overlaprun can use it without linking the runtime.
#ifndef OVERLAP_RUNTIME_API_ENV_VARS_H_
#define OVERLAP_RUNTIME_API_ENV_VARS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace overlap::env {

enum class Kind {
  kInt,     // a decimal integer (absl::SimpleAtoi) in [min, max]
  kDouble,  // a number (absl::SimpleAtod) in [min, max], or (min, max] when min_exclusive
  kEnum,    // one of `values`
  kString,  // free text, checked by its reader (OVERLAP_COMPRESSION: runtime/planes/compression_stage.h)
  kPath,    // a file or directory
};

// Who reads a variable. Only kRuntime variables are fields of overlap::Config; the others are
// listed so that the runtime does not warn about them and the docs name them.
enum class Reader {
  kRuntime,  // runtime/api/config.cc, into overlap::Config
  kPython,   // the Python package (python/overlap)
  kBuild,    // the Bazel build (third_party/cuda)
  kTest,     // test hooks and test programs only; never set them in a real job
};

// The overlaprun option that sets a variable.
struct Flag {
  const char* name = nullptr;   // "--fusion-threshold-mb"; nullptr: overlaprun has none
  const char* value = nullptr;  // "MB", the value's name in --help
  const char* help = nullptr;   // one sentence for --help
  // The option's value times `scale` is the variable's (MiB on the command line, bytes in the
  // variable); 1 passes the value on as given, for the runtime to parse with the same parser.
  double scale = 1;
  const char* unit = nullptr;  // the option's unit in messages when scale != 1: "MiB"
};

struct Var {
  const char* name = nullptr;
  Kind kind = Kind::kString;
  Reader reader = Reader::kRuntime;
  // kInt and kDouble: the accepted range, and a value accepted outside it (OVERLAP_BUDGET's -1).
  double min = 0;
  double max = 0;
  bool min_exclusive = false;
  bool minus_one_allowed = false;
  // kInt and kDouble: what a value is, in messages: "an integer", "a byte count", "seconds".
  const char* unit = "a number";
  // kEnum: the accepted values, ", "-separated: "auto, nccl, mpi".
  const char* values = "";
  // Appended to the expectation in messages, in parentheses: "0 tunes it"; may be empty.
  const char* note = "";
  const char* default_value = "";  // as the docs show it; "" for none
  const char* description = "";    // one line for the docs
  Flag flag;

  bool test_only() const { return reader == Reader::kTest; }
};

// Every variable, runtime settings first, in the order docs and --help list them.
absl::Span<const Var> Vars();

// The variable called `name`, or nullptr.
const Var* Find(absl::string_view name);

// The variable that overlaprun option `flag` (with its dashes) sets, or nullptr.
const Var* FindByFlag(absl::string_view flag);

// What `var` accepts, for messages: "an integer in 1..16", "seconds in (0, 1e7]",
// "one of auto, nccl, mpi", with the note in parentheses.
std::string Expected(const Var& var);

// InvalidArgument "NAME='value' is not valid: expected <Expected(var)>" unless the value is in
// range. For values set in code (overlap::Config::Validate).
absl::Status CheckInt(const Var& var, int64_t value);
absl::Status CheckDouble(const Var& var, double value);

// Parse `text` as `var`'s kind and check it, with the message above for either failure.
absl::StatusOr<int64_t> ParseInt(const Var& var, absl::string_view text);
absl::StatusOr<double> ParseDouble(const Var& var, absl::string_view text);

// Any kind, as read from the environment: OK when `text` is a value `var` accepts, with the
// message above otherwise (kString and kPath accept any text; their reader checks further).
absl::Status Check(const Var& var, absl::string_view text);

// overlaprun: the value of `var.flag` given on the command line -> the variable's value, checked
// as the runtime checks it (converted by flag.scale first). InvalidArgument names the option:
// "--num-channels '17' is not valid: expected an integer in 1..16".
absl::StatusOr<std::string> FlagToValue(const Var& var, absl::string_view value);

// The docs' table of every variable, as Markdown (tools: //runtime:env_vars_doc).
std::string MarkdownTable();

}  // namespace overlap::env

#endif  // OVERLAP_RUNTIME_API_ENV_VARS_H_
