#include "launcher/parse_args.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "launcher/hosts.h"
#include "launcher/runtime_flags.h"

namespace overlap::launcher {
namespace {

// Walks the arguments; an option's value is "--opt=value" or the next argument.
class ArgReader {
 public:
  explicit ArgReader(absl::Span<const std::string> args) : args_(args) {}

  bool Done() const { return pos_ >= args_.size(); }
  const std::string& Peek() const { return args_[pos_]; }

  // Consumes the next argument as an option name, splitting off an inline "=value".
  std::string TakeOption() {
    std::string arg = args_[pos_++];
    inline_value_.reset();
    size_t eq = arg.find('=');
    if (absl::StartsWith(arg, "-") && eq != std::string::npos) {
      inline_value_ = arg.substr(eq + 1);
      arg.resize(eq);
    }
    return arg;
  }

  absl::StatusOr<std::string> TakeValue(absl::string_view option) {
    if (inline_value_) {
      return *std::exchange(inline_value_, std::nullopt);
    }
    if (Done()) {
      return absl::InvalidArgumentError(absl::StrCat(option, " needs a value"));
    }
    return args_[pos_++];
  }

  // A flag must not carry "=value".
  absl::Status NoValue(absl::string_view option) const {
    if (inline_value_) {
      return absl::InvalidArgumentError(absl::StrCat(option, " takes no value"));
    }
    return absl::OkStatus();
  }

  std::vector<std::string> Rest() {
    std::vector<std::string> rest(args_.begin() + pos_, args_.end());
    pos_ = args_.size();
    return rest;
  }

 private:
  absl::Span<const std::string> args_;
  size_t pos_ = 0;
  std::optional<std::string> inline_value_;
};

absl::StatusOr<double> ParseSeconds(absl::string_view option, absl::string_view value) {
  double s = 0;
  if (!absl::SimpleAtod(value, &s) || !(s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " '", value, "' is not a positive number of seconds"));
  }
  return s;
}

absl::StatusOr<ForwardedVar> ParseForwarded(absl::string_view value) {
  ForwardedVar var;
  std::vector<std::string> parts = absl::StrSplit(value, absl::MaxSplits('=', 1));
  var.name = parts[0];
  if (parts.size() == 2) {
    var.value = parts[1];
  }
  if (var.name.empty() ||
      var.name.find_first_not_of(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos ||
      absl::ascii_isdigit(var.name[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("-x '", value, "' is not NAME or NAME=VALUE with a valid variable name"));
  }
  return var;
}

// Handles one option; `option` is already consumed from `reader`.
absl::Status ParseOption(const std::string& option, ArgReader& reader, ParsedCommand& out) {
  LaunchOptions& o = out.options;
  auto value = [&]() { return reader.TakeValue(option); };
  auto flag = [&](bool& field) {
    field = true;
    return reader.NoValue(option);
  };

  if (option == "-h" || option == "--help") {
    out.mode = ParsedCommand::Mode::kHelp;
    return reader.NoValue(option);
  }
  if (option == "-np" || option == "-n" || option == "--num-proc") {
    absl::StatusOr<std::string> v = value();
    if (!v.ok()) {
      return v.status();
    }
    if (!absl::SimpleAtoi(*v, &o.num_ranks)) {
      return absl::InvalidArgumentError(absl::StrCat(option, " '", *v, "' is not an integer"));
    }
    if (o.num_ranks < 1) {
      return absl::InvalidArgumentError(absl::StrCat(option, " must be at least 1, got ", *v));
    }
    return absl::OkStatus();
  }
  if (option == "-H" || option == "--hosts" || option == "--hostfile") {
    if (!o.hosts.empty()) {
      return absl::InvalidArgumentError(
          "give hosts once: with -H or with --hostfile, not both or twice");
    }
    absl::StatusOr<std::string> v = value();
    if (!v.ok()) {
      return v.status();
    }
    absl::StatusOr<std::vector<HostSlots>> hosts =
        option == "--hostfile" ? ReadHostfile(*v) : ParseHostList(*v);
    if (!hosts.ok()) {
      return hosts.status();
    }
    o.hosts = *std::move(hosts);
    o.hosts_source = option == "--hostfile" ? *v : "-H";
    return absl::OkStatus();
  }
  if (option == "-x") {
    absl::StatusOr<std::string> v = value();
    if (!v.ok()) {
      return v.status();
    }
    absl::StatusOr<ForwardedVar> var = ParseForwarded(*v);
    if (!var.ok()) {
      return var.status();
    }
    o.forwarded.push_back(*std::move(var));
    return absl::OkStatus();
  }
  if (option == "--start-timeout" || option == "--kill-grace") {
    absl::StatusOr<std::string> v = value();
    if (!v.ok()) {
      return v.status();
    }
    absl::StatusOr<double> s = ParseSeconds(option, *v);
    if (!s.ok()) {
      return s.status();
    }
    if (option == "--kill-grace") {
      o.kill_grace_s = *s;
    } else {
      o.start_timeout_s = *s;
      o.runtime_env["OVERLAP_START_TIMEOUT_S"] = *v;  // the runtime's Init waits as long
    }
    return absl::OkStatus();
  }
  if (option == "--network-interface" || option == "--rsh-agent" || option == "--mpirun") {
    absl::StatusOr<std::string> v = value();
    if (!v.ok()) {
      return v.status();
    }
    if (v->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(option, " needs a value"));
    }
    (option == "--network-interface" ? o.network_interface
     : option == "--rsh-agent"       ? o.rsh_agent
                                     : o.mpirun) = *v;
    return absl::OkStatus();
  }
  if (option == "--mpi-args") {
    absl::StatusOr<std::string> v = value();
    if (!v.ok()) {
      return v.status();
    }
    for (absl::string_view word : absl::StrSplit(*v, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      o.mpi_args.emplace_back(word);
    }
    return absl::OkStatus();
  }
  if (option == "--dry-run") {
    return flag(o.dry_run);
  }
  if (option == "--oversubscribe") {
    return flag(o.oversubscribe);
  }
  if (option == "--verbose" || option == "-v") {
    return flag(o.verbose);
  }
  if (option == "--tcp-only") {
    return flag(o.tcp_only);
  }
  if (option == "--no-rank-wrapper") {
    o.wrap_ranks = false;
    return reader.NoValue(option);
  }
  if (const RuntimeFlag* rf = FindRuntimeFlag(option)) {
    absl::StatusOr<std::string> v = value();
    if (!v.ok()) {
      return v.status();
    }
    absl::StatusOr<std::string> env_value = rf->convert(rf->flag, *v);
    if (!env_value.ok()) {
      return env_value.status();
    }
    o.runtime_env[rf->env] = *std::move(env_value);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown option '", option, "' (overlaprun --help lists them)"));
}

}  // namespace

absl::StatusOr<ParsedCommand> ParseArgs(absl::Span<const std::string> args) {
  ParsedCommand out;
  ArgReader reader(args);
  // The wrapper mode is internal and only ever first: mpirun runs "overlaprun --rank-wrapper --".
  if (!reader.Done() && reader.Peek() == "--rank-wrapper") {
    reader.TakeOption();
    if (!reader.Done() && reader.Peek() == "--") {
      reader.TakeOption();
    }
    out.mode = ParsedCommand::Mode::kRankWrapper;
    out.options.program = reader.Rest();
    if (out.options.program.empty()) {
      return absl::InvalidArgumentError("--rank-wrapper needs a program");
    }
    return out;
  }
  while (!reader.Done()) {
    const std::string& next = reader.Peek();
    if (next == "--") {
      reader.TakeOption();
      break;
    }
    if (next.size() < 2 || next[0] != '-') {
      break;  // the program
    }
    std::string option = reader.TakeOption();
    absl::Status status = ParseOption(option, reader, out);
    if (!status.ok()) {
      return status;
    }
    if (out.mode == ParsedCommand::Mode::kHelp) {
      return out;
    }
  }
  out.options.program = reader.Rest();
  return out;
}

}  // namespace overlap::launcher
