#include "launcher/parse_args.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "launcher/hosts.h"
#include "launcher/runtime_flags.h"
#include "runtime/api/env_vars.h"

namespace overlap::launcher {
namespace {

// Walks the arguments; an option's value is "--opt=value" or the next argument.
class ArgReader {
 public:
  explicit ArgReader(absl::Span<const std::string> args) : args_(args) {}

  bool Done() const { return pos_ >= args_.size(); }
  size_t pos() const { return pos_; }
  const std::string& Peek() const { return args_[pos_]; }

  // Consumes the next argument as an option name, splitting off an inline "=value".
  std::string TakeOption() {
    std::string arg = args_[pos_++];
    inline_value_.reset();
    const size_t eq = arg.find('=');
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
    std::vector<std::string> rest(args_.begin() + static_cast<ptrdiff_t>(pos_), args_.end());
    pos_ = args_.size();
    return rest;
  }

 private:
  absl::Span<const std::string> args_;
  size_t pos_ = 0;
  std::optional<std::string> inline_value_;
};

// Applies one option's value (empty for flags) to the options.
using Apply = absl::Status (*)(absl::string_view option, const std::string& value,
                               LaunchOptions& o);

absl::StatusOr<double> ParseSeconds(absl::string_view option, absl::string_view value) {
  double s = 0;
  if (!absl::SimpleAtod(value, &s) || !(s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " '", value, "' is not a positive number of seconds"));
  }
  return s;
}

absl::Status NonEmpty(absl::string_view option, const std::string& value) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(option, " needs a value"));
  }
  return absl::OkStatus();
}

bool IsVariableName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') {
      return false;
    }
  }
  return true;
}

absl::Status SetNumRanks(absl::string_view option, const std::string& value, LaunchOptions& o) {
  if (!absl::SimpleAtoi(value, &o.num_ranks)) {
    return absl::InvalidArgumentError(absl::StrCat(option, " '", value, "' is not an integer"));
  }
  if (o.num_ranks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(option, " must be at least 1, got ", value));
  }
  return absl::OkStatus();
}

absl::Status SetHosts(absl::string_view option, const std::string& value, LaunchOptions& o) {
  if (!o.hosts.empty()) {
    return absl::InvalidArgumentError(
        "give hosts once: with -H or with --hostfile, not both or twice");
  }
  const bool file = option == "--hostfile";
  absl::StatusOr<std::vector<HostSlots>> hosts = file ? ReadHostfile(value) : ParseHostList(value);
  if (!hosts.ok()) {
    return hosts.status();
  }
  o.hosts = *std::move(hosts);
  o.hosts_source = file ? value : "-H";
  return absl::OkStatus();
}

absl::Status AddForwarded(absl::string_view, const std::string& value, LaunchOptions& o) {
  std::vector<std::string> parts = absl::StrSplit(value, absl::MaxSplits('=', 1));
  if (!IsVariableName(parts[0])) {
    return absl::InvalidArgumentError(
        absl::StrCat("-x '", value, "' is not NAME or NAME=VALUE with a valid variable name"));
  }
  ForwardedVar var{parts[0], std::nullopt};
  if (parts.size() == 2) {
    var.value = parts[1];
  }
  o.forwarded.push_back(std::move(var));
  return absl::OkStatus();
}

absl::Status SetStartTimeout(absl::string_view option, const std::string& value, LaunchOptions& o) {
  absl::StatusOr<double> s = ParseSeconds(option, value);
  if (!s.ok()) {
    return s.status();
  }
  // The runtime's Init waits as long, so the value must also be one the runtime accepts.
  const env::Var* var = env::Find("OVERLAP_START_TIMEOUT_S");
  if (var == nullptr) {
    return absl::InternalError("OVERLAP_START_TIMEOUT_S is not in runtime/api/env_vars.cc's table");
  }
  if (absl::Status valid = env::Check(*var, value); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": ", valid.message()));
  }
  o.start_timeout_s = *s;
  o.runtime_env[var->name] = value;
  return absl::OkStatus();
}

absl::Status SetKillGrace(absl::string_view option, const std::string& value, LaunchOptions& o) {
  absl::StatusOr<double> s = ParseSeconds(option, value);
  if (!s.ok()) {
    return s.status();
  }
  o.kill_grace_s = *s;
  return absl::OkStatus();
}

// 0 (end at once) up to a minute: the grace only has to cover the peers' own failure paths.
absl::StatusOr<double> ParsePeerGrace(absl::string_view option, absl::string_view value) {
  double s = 0;
  if (!absl::SimpleAtod(value, &s) || !(s >= 0 && s <= 60)) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " '", value, "' is not a number of seconds in 0..60"));
  }
  return s;
}

absl::Status SetPeerGrace(absl::string_view option, const std::string& value, LaunchOptions& o) {
  absl::StatusOr<double> s = ParsePeerGrace(option, value);
  if (!s.ok()) {
    return s.status();
  }
  o.peer_grace_s = *s;
  return absl::OkStatus();
}

absl::Status SetHostTimeout(absl::string_view option, const std::string& value, LaunchOptions& o) {
  absl::StatusOr<double> s = ParseSeconds(option, value);
  if (!s.ok()) {
    return s.status();
  }
  // Five keepalive probes at least a second apart after a second idle (TCP counts whole seconds).
  if (*s < 6 || *s > 86400) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " '", value, "' must be between 6 and 86400 seconds"));
  }
  o.host_timeout_s = *s;
  return absl::OkStatus();
}

absl::Status SetNetworkInterface(absl::string_view option, const std::string& value,
                                 LaunchOptions& o) {
  o.network_interface = value;
  return NonEmpty(option, value);
}

absl::Status SetRshAgent(absl::string_view option, const std::string& value, LaunchOptions& o) {
  o.rsh_agent = value;
  return NonEmpty(option, value);
}

absl::Status SetMpirun(absl::string_view option, const std::string& value, LaunchOptions& o) {
  o.mpirun = value;
  return NonEmpty(option, value);
}

absl::Status AddMpiArgs(absl::string_view, const std::string& value, LaunchOptions& o) {
  for (absl::string_view word : absl::StrSplit(value, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
    o.mpi_args.emplace_back(word);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ParseCount(absl::string_view option, absl::string_view value, int least) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n)) {
    return absl::InvalidArgumentError(absl::StrCat(option, " '", value, "' is not an integer"));
  }
  if (n < least) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " must be at least ", least, ", got ", value));
  }
  return n;
}

absl::Status SetElasticCount(absl::string_view option, const std::string& value,
                             LaunchOptions& o) {
  const bool is_reset_limit = option == "--reset-limit";
  absl::StatusOr<int> n = ParseCount(option, value, is_reset_limit ? 0 : 1);
  if (!n.ok()) {
    return n.status();
  }
  o.elastic.enabled = true;
  if (is_reset_limit) {
    o.elastic.reset_limit = *n;
  } else if (option == "--slots-per-host") {
    o.elastic.slots_per_host = *n;
  } else if (absl::StartsWith(option, "--min")) {
    o.elastic.min_ranks = *n;
  } else {
    o.elastic.max_ranks = *n;
  }
  return absl::OkStatus();
}

absl::Status SetDiscoveryScript(absl::string_view option, const std::string& value,
                                LaunchOptions& o) {
  o.elastic.enabled = true;
  o.elastic.discovery_script = value;
  return NonEmpty(option, value);
}

absl::Status SetElasticTimeout(absl::string_view option, const std::string& value,
                               LaunchOptions& o) {
  absl::StatusOr<double> s = ParseSeconds(option, value);
  if (!s.ok()) {
    return s.status();
  }
  o.elastic.enabled = true;
  o.elastic.timeout_s = *s;
  return absl::OkStatus();
}

// horovodrun's form is two arguments, "--blacklist-cooldown-range 60 300"; "60,300" is taken too.
absl::Status SetCooldownRange(absl::string_view option, ArgReader& reader, LaunchOptions& o) {
  absl::StatusOr<std::string> first = reader.TakeValue(option);
  if (!first.ok()) {
    return first.status();
  }
  std::vector<std::string> parts = absl::StrSplit(*first, ',');
  if (parts.size() == 1) {
    absl::StatusOr<std::string> second = reader.TakeValue(option);
    if (!second.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(option, " needs two values: MIN MAX seconds"));
    }
    parts.push_back(*second);
  }
  int low = 0, high = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &low) ||
      !absl::SimpleAtoi(parts[1], &high)) {
    return absl::InvalidArgumentError(absl::StrCat(
        option, " '", absl::StrJoin(parts, " "), "' is not two whole numbers of seconds MIN MAX"));
  }
  // Horovod's bounds: at least a second, at most an hour.
  if (low < 1 || high > 3600 || low > high) {
    return absl::InvalidArgumentError(absl::StrCat(
        option, " ", low, " ", high, ": needs 1 <= MIN <= MAX <= 3600 seconds"));
  }
  o.elastic.enabled = true;
  o.elastic.cooldown_s = std::make_pair(low, high);
  return absl::OkStatus();
}

struct OptionSpec {
  const char* names[3];  // unused entries are nullptr
  bool takes_value;
  Apply apply;
  // The elastic driver sets it for each generation itself (placement, the elastic flags), so it
  // is left out of LaunchOptions::generation_args: a generation must not be elastic again.
  bool set_by_driver = false;
};
constexpr bool kSetByDriver = true;

// Every option except --help, --rank-wrapper and the runtime flags (runtime_flags.h).
const OptionSpec kOptions[] = {
    {{"-np", "-n", "--num-proc"}, true, SetNumRanks, kSetByDriver},
    {{"-H", "--hosts", "--hostfile"}, true, SetHosts, kSetByDriver},
    {{"-x"}, true, AddForwarded},
    {{"--start-timeout"}, true, SetStartTimeout},
    {{"--kill-grace"}, true, SetKillGrace},
    {{"--peer-grace"}, true, SetPeerGrace},
    {{"--host-timeout"}, true, SetHostTimeout},
    {{"--network-interface"}, true, SetNetworkInterface},
    {{"--rsh-agent"}, true, SetRshAgent},
    {{"--mpirun"}, true, SetMpirun},
    {{"--mpi-args"}, true, AddMpiArgs},
    {{"--min-np", "--min-num-proc"}, true, SetElasticCount, kSetByDriver},
    {{"--max-np", "--max-num-proc"}, true, SetElasticCount, kSetByDriver},
    {{"--slots-per-host"}, true, SetElasticCount, kSetByDriver},
    {{"--reset-limit"}, true, SetElasticCount, kSetByDriver},
    {{"--host-discovery-script"}, true, SetDiscoveryScript, kSetByDriver},
    {{"--elastic-timeout"}, true, SetElasticTimeout, kSetByDriver},
    {{"--failure-report"},
     true,
     [](absl::string_view option, const std::string& value, LaunchOptions& o) {
       o.failure_report = value;
       return NonEmpty(option, value);
     },
     kSetByDriver},
    {{"--dry-run"},
     false,
     [](absl::string_view, const std::string&, LaunchOptions& o) {
       o.dry_run = true;
       return absl::OkStatus();
     },
     kSetByDriver},
    {{"--oversubscribe"},
     false,
     [](absl::string_view, const std::string&, LaunchOptions& o) {
       o.oversubscribe = true;
       return absl::OkStatus();
     }},
    {{"-v", "--verbose"},
     false,
     [](absl::string_view, const std::string&, LaunchOptions& o) {
       o.verbose = true;
       return absl::OkStatus();
     }},
    {{"--tcp-only"},
     false,
     [](absl::string_view, const std::string&, LaunchOptions& o) {
       o.tcp_only = true;
       return absl::OkStatus();
     }},
    {{"--no-rank-wrapper"},
     false,
     [](absl::string_view, const std::string&, LaunchOptions& o) {
       o.wrap_ranks = false;
       return absl::OkStatus();
     }},
};

const OptionSpec* FindOption(absl::string_view option) {
  for (const OptionSpec& spec : kOptions) {
    for (const char* name : spec.names) {
      if (name != nullptr && option == name) {
        return &spec;
      }
    }
  }
  return nullptr;
}

// Handles one option; `option` is already consumed from `reader`.
absl::Status ParseOption(const std::string& option, ArgReader& reader, ParsedCommand& out) {
  if (option == "-h" || option == "--help") {
    out.mode = ParsedCommand::Mode::kHelp;
    return reader.NoValue(option);
  }
  if (option == "--blacklist-cooldown-range") {
    return SetCooldownRange(option, reader, out.options);
  }
  if (const OptionSpec* spec = FindOption(option)) {
    if (!spec->takes_value) {
      if (absl::Status s = reader.NoValue(option); !s.ok()) {
        return s;
      }
      return spec->apply(option, "", out.options);
    }
    absl::StatusOr<std::string> value = reader.TakeValue(option);
    if (!value.ok()) {
      return value.status();
    }
    return spec->apply(option, *value, out.options);
  }
  if (const env::Var* var = FindRuntimeFlag(option)) {
    absl::StatusOr<std::string> value = reader.TakeValue(option);
    if (!value.ok()) {
      return value.status();
    }
    absl::StatusOr<std::string> env_value = RuntimeFlagValue(*var, *value);
    if (!env_value.ok()) {
      return env_value.status();
    }
    out.options.runtime_env[var->name] = *std::move(env_value);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown option '", option, "' (overlaprun --help lists them)"));
}

// Whether the elastic driver sets `option` for each generation itself (OptionSpec::set_by_driver;
// the cooldown range is parsed outside the table, for its two values).
bool SetByDriver(absl::string_view option) {
  const OptionSpec* spec = FindOption(option);
  return (spec != nullptr && spec->set_by_driver) || option == "--blacklist-cooldown-range";
}

}  // namespace

absl::StatusOr<ParsedCommand> ParseArgs(absl::Span<const std::string> args) {
  ParsedCommand out;
  ArgReader reader(args);
  // The wrapper mode is internal and only ever first: mpirun runs
  // "overlaprun --rank-wrapper [--peer-grace S] --".
  if (!reader.Done() && reader.Peek() == "--rank-wrapper") {
    reader.TakeOption();
    if (!reader.Done() && reader.Peek() == "--peer-grace") {
      const std::string option = reader.TakeOption();
      absl::StatusOr<std::string> value = reader.TakeValue(option);
      if (!value.ok()) {
        return value.status();
      }
      if (absl::Status s = SetPeerGrace(option, *value, out.options); !s.ok()) {
        return s;
      }
    }
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
    const size_t begin = reader.pos();
    const std::string option = reader.TakeOption();
    if (absl::Status s = ParseOption(option, reader, out); !s.ok()) {
      return s;
    }
    if (!SetByDriver(option)) {
      out.options.generation_args.insert(out.options.generation_args.end(),
                                         args.begin() + static_cast<ptrdiff_t>(begin),
                                         args.begin() + static_cast<ptrdiff_t>(reader.pos()));
    }
    if (out.mode == ParsedCommand::Mode::kHelp) {
      return out;
    }
  }
  out.options.program = reader.Rest();
  // horovodrun: --min-np defaults to -np, and an elastic job may give only --min-np.
  ElasticOptions& elastic = out.options.elastic;
  if (elastic.enabled) {
    if (elastic.min_ranks == 0) {
      elastic.min_ranks = out.options.num_ranks;
    }
    if (out.options.num_ranks == 0) {
      out.options.num_ranks = elastic.min_ranks;
    }
  }
  return out;
}

}  // namespace overlap::launcher
