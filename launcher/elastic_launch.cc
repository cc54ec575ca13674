#include "launcher/elastic_launch.h"

#include "absl/strings/str_cat.h"
#include "launcher/hosts.h"

namespace overlap::launcher {

std::vector<std::string> ElasticDriverCommand(const LaunchOptions& options,
                                              const LaunchContext& context) {
  const ElasticOptions& e = options.elastic;
  std::string python = "python3";
  for (const auto& [name, value] : context.environment) {
    if (name == "OVERLAP_ELASTIC_PYTHON" && !value.empty()) {
      python = value;
    }
  }
  std::vector<std::string> argv = {python,
                                   "-m",
                                   "overlap.elastic_driver",
                                   "--overlaprun",
                                   context.self_path,
                                   "--min-np",
                                   absl::StrCat(e.min_ranks),
                                   "--max-np",
                                   absl::StrCat(e.max_ranks)};
  if (!e.discovery_script.empty()) {
    argv.insert(argv.end(), {"--discovery-script", e.discovery_script});
  } else {
    argv.insert(argv.end(), {"--hosts", FormatHostList(options.hosts)});
  }
  argv.insert(argv.end(),
              {"--slots-per-host", absl::StrCat(e.slots_per_host > 0 ? e.slots_per_host : 1),
               "--reset-limit", absl::StrCat(e.reset_limit), "--elastic-timeout",
               absl::StrCat(e.timeout_s)});
  if (e.cooldown_s) {
    argv.insert(argv.end(), {"--cooldown", absl::StrCat(e.cooldown_s->first),
                             absl::StrCat(e.cooldown_s->second)});
  }
  if (options.dry_run) {
    argv.emplace_back("--dry-run");
  }
  argv.insert(argv.end(), {"--generation-args", absl::StrCat(options.generation_args.size())});
  argv.insert(argv.end(), options.generation_args.begin(), options.generation_args.end());
  argv.emplace_back("--");
  argv.insert(argv.end(), options.program.begin(), options.program.end());
  return argv;
}

}  // namespace overlap::launcher
