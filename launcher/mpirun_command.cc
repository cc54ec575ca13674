#include "launcher/mpirun_command.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "launcher/hosts.h"

namespace overlap::launcher {
namespace {

void AddMca(std::vector<std::string>& argv, const std::string& key, const std::string& value) {
  argv.insert(argv.end(), {"--mca", key, value});
}

bool IsSet(const LaunchContext& context, absl::string_view name) {
  for (const auto& [key, value] : context.environment) {
    if (key == name) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> ForwardedVariables(const LaunchOptions& options,
                                            const LaunchContext& context) {
  std::vector<std::string> vars;
  std::set<std::string> named;  // a variable is forwarded once; the most specific source wins
  for (const ForwardedVar& v : options.forwarded) {
    named.insert(v.name);
  }
  for (const auto& [name, value] : options.runtime_env) {
    if (named.count(name)) {
      continue;
    }
    vars.push_back(absl::StrCat(name, "=", value));
    named.insert(name);
  }
  for (const auto& [name, value] : context.environment) {
    // HOROVOD_*: the runtime reads the few that mean what an OVERLAP_* one means
    // (runtime/config.h), and a Horovod program may read its own.
    if (!(absl::StartsWith(name, "OVERLAP_") || absl::StartsWith(name, "HOROVOD_")) ||
        named.count(name)) {
      continue;
    }
    vars.push_back(name);
    named.insert(name);
  }
  for (const char* name : {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH"}) {
    if (!IsSet(context, name) || named.count(name)) {
      continue;
    }
    vars.emplace_back(name);
    named.insert(name);
  }
  for (const ForwardedVar& v : options.forwarded) {
    vars.push_back(v.value ? absl::StrCat(v.name, "=", *v.value) : v.name);
  }
  return vars;
}

std::vector<std::string> BuildMpirunCommand(const LaunchOptions& options,
                                            const LaunchContext& context) {
  std::vector<std::string> argv = {options.mpirun};
  if (context.running_as_root) {
    argv.push_back("--allow-run-as-root");
  }
  argv.insert(argv.end(), {"-np", absl::StrCat(options.num_ranks)});
  if (!options.hosts.empty()) {
    argv.insert(argv.end(), {"-H", FormatHostList(options.hosts)});
  }
  argv.insert(argv.end(), {"--bind-to", "none", "--map-by", "slot"});
  // Ranks on this machine alone may outnumber its cores (tests, debugging): Open MPI then needs
  // --oversubscribe, and it makes idle ranks yield instead of spinning on shared cores.
  if (options.oversubscribe || options.hosts.empty()) {
    argv.push_back("--oversubscribe");
  }
  if (!options.rsh_agent.empty()) {
    AddMca(argv, "plm_rsh_agent", options.rsh_agent);
  }
  if (options.tcp_only) {
    AddMca(argv, "btl", "tcp,self");
  }
  if (!options.network_interface.empty()) {
    AddMca(argv, "btl_tcp_if_include", options.network_interface);
    AddMca(argv, "oob_tcp_if_include", options.network_interface);
  }
  if (options.host_timeout_s > 0) {
    // Half of host_timeout_s idle, then five probes host_timeout_s / 10 apart: a daemon silent
    // for about host_timeout_s ends the job with ORTE's "lost communication with a remote daemon
    // ... on node HOST", which run_job.cc turns into the summary. Five, not fewer, so that a lossy
    // link does not pass for a dead one: at 10% loss each way, five probes in a row go unanswered
    // with probability 0.19^5 = 2.5e-4.
    const long probe_every = std::max(1L, std::lround(options.host_timeout_s / 10));
    const long idle = std::max(1L, std::lround(options.host_timeout_s) - 5 * probe_every);
    AddMca(argv, "oob_tcp_keepalive_time", absl::StrCat(idle));
    AddMca(argv, "oob_tcp_keepalive_intvl", absl::StrCat(probe_every));
    AddMca(argv, "oob_tcp_keepalive_probes", "5");
  }
  for (const std::string& var : ForwardedVariables(options, context)) {
    argv.insert(argv.end(), {"-x", var});
  }
  argv.insert(argv.end(), options.mpi_args.begin(), options.mpi_args.end());
  if (options.wrap_ranks) {
    argv.insert(argv.end(), {context.self_path, "--rank-wrapper"});
    if (options.peer_grace_s != kDefaultPeerGraceS) {
      argv.insert(argv.end(), {"--peer-grace", absl::StrCat(options.peer_grace_s)});
    }
    argv.push_back("--");
  }
  argv.insert(argv.end(), options.program.begin(), options.program.end());
  return argv;
}

std::string ShellQuoted(const std::vector<std::string>& argv) {
  return absl::StrJoin(argv, " ", [](std::string* out, const std::string& arg) {
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789_-+=/.,:@%") == std::string::npos;
    if (plain) {
      out->append(arg);
    } else {
      absl::StrAppend(out, "'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'");
    }
  });
}

}  // namespace overlap::launcher
