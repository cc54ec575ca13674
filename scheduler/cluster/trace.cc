#include "scheduler/cluster/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace overlap::sched::cluster {

namespace {

using nlohmann::json;

std::string JobLabel(int index, absl::string_view id) {
  if (id.empty()) {
    return absl::StrCat("jobs[", index, "]");
  }
  return absl::StrCat("jobs[", index, "] (id '", id, "')");
}

absl::Status JobError(absl::string_view source, int index, absl::string_view id,
                      absl::string_view field, absl::string_view cause) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", JobLabel(index, id), ": ", field, ": ", cause));
}

bool Contains(const std::vector<std::string>& names, absl::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Reads one job object; type errors only (ranges are ValidateTrace's job).
absl::StatusOr<TraceJob> ParseJob(const json& obj, int index, absl::string_view source) {
  TraceJob job;
  if (!obj.is_object()) {
    return JobError(source, index, "", "job", "expected an object");
  }
  if (obj.contains("id")) {
    if (!obj["id"].is_string()) {
      return JobError(source, index, "", "id", "expected a string");
    }
    job.id = obj["id"].get<std::string>();
  } else {
    job.id = absl::StrCat("job", index);
  }
  auto number = [&](const char* key) -> absl::StatusOr<double> {
    if (!obj.contains(key)) {
      return JobError(source, index, job.id, key, "missing");
    }
    if (!obj[key].is_number()) {
      return JobError(source, index, job.id, key, "expected a number");
    }
    return obj[key].get<double>();
  };
  auto integer = [&](const char* key) -> absl::StatusOr<int64_t> {
    auto v = number(key);
    if (!v.ok()) {
      return v.status();
    }
    if (!obj[key].is_number_integer()) {
      return JobError(source, index, job.id, key,
                      absl::StrCat("expected an integer, got ", obj[key].dump()));
    }
    return obj[key].get<int64_t>();
  };
  auto arrival = number("arrival_s");
  if (!arrival.ok()) {
    return arrival.status();
  }
  job.arrival_s = *arrival;
  if (!obj.contains("model") || !obj["model"].is_string()) {
    return JobError(source, index, job.id, "model",
                    obj.contains("model") ? "expected a string" : "missing");
  }
  job.model = obj["model"].get<std::string>();
  auto workers = integer("workers");
  if (!workers.ok()) {
    return workers.status();
  }
  if (*workers < 0 || *workers > (int64_t{1} << 30)) {
    return JobError(source, index, job.id, "workers",
                    absl::StrCat("expected a GPU count >= 1, got ", *workers));
  }
  job.workers = static_cast<int>(*workers);
  auto iterations = integer("iterations");
  if (!iterations.ok()) {
    return iterations.status();
  }
  job.iterations = *iterations;
  if (obj.contains("planner")) {
    if (!obj["planner"].is_string()) {
      return JobError(source, index, job.id, "planner", "expected a string");
    }
    job.planner = obj["planner"].get<std::string>();
  }
  return job;
}

absl::Status CheckJob(const TraceJob& job, int index, absl::string_view source) {
  if (job.id.empty()) {
    return JobError(source, index, job.id, "id", "must not be empty");
  }
  if (!std::isfinite(job.arrival_s) || job.arrival_s < 0) {
    return JobError(source, index, job.id, "arrival_s",
                    absl::StrCat("expected a finite number >= 0, got ", job.arrival_s));
  }
  if (job.workers < 1) {
    return JobError(source, index, job.id, "workers",
                    absl::StrCat("expected a GPU count >= 1, got ", job.workers));
  }
  if (job.iterations < 1) {
    return JobError(source, index, job.id, "iterations",
                    absl::StrCat("expected >= 1, got ", job.iterations));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Trace::ToJson() const {
  json out = json::object();
  out["jobs"] = json::array();
  for (const TraceJob& job : jobs) {
    json j = {{"id", job.id},
              {"arrival_s", job.arrival_s},
              {"model", job.model},
              {"workers", job.workers},
              {"iterations", job.iterations}};
    if (!job.planner.empty()) {
      j["planner"] = job.planner;
    }
    out["jobs"].push_back(j);
  }
  return out.dump(1);
}

absl::StatusOr<Trace> ParseTraceJson(absl::string_view text, absl::string_view source) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  if (!root.is_object() || !root.contains("jobs") || !root["jobs"].is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": jobs: expected an object with a \"jobs\" array"));
  }
  Trace trace;
  int index = 0;
  for (const json& obj : root["jobs"]) {
    auto job = ParseJob(obj, index, source);
    if (!job.ok()) {
      return job.status();
    }
    absl::Status status = CheckJob(*job, index, source);
    if (!status.ok()) {
      return status;
    }
    trace.jobs.push_back(std::move(*job));
    ++index;
  }
  return trace;
}

absl::StatusOr<Trace> LoadTraceJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot read the trace file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseTraceJson(text.str(), path);
}

absl::Status ValidateJobs(const Trace& trace, int cluster_gpus, absl::string_view source) {
  absl::flat_hash_set<std::string> ids;
  for (int i = 0; i < static_cast<int>(trace.jobs.size()); ++i) {
    const TraceJob& job = trace.jobs[i];
    absl::Status status = CheckJob(job, i, source);
    if (!status.ok()) {
      return status;
    }
    if (!ids.insert(job.id).second) {
      return JobError(source, i, job.id, "id", "duplicate id");
    }
    if (job.workers > cluster_gpus) {
      return JobError(
          source, i, job.id, "workers",
          absl::StrCat(job.workers, " GPUs requested but the cluster has ", cluster_gpus));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTrace(const Trace& trace, int cluster_gpus,
                           const std::vector<std::string>& models,
                           const std::vector<std::string>& planners, absl::string_view source) {
  absl::Status valid = ValidateJobs(trace, cluster_gpus, source);
  if (!valid.ok()) {
    return valid;
  }
  for (int i = 0; i < static_cast<int>(trace.jobs.size()); ++i) {
    const TraceJob& job = trace.jobs[i];
    if (!Contains(models, job.model)) {
      return JobError(source, i, job.id, "model",
                      absl::StrCat("unknown model '", job.model,
                                   "' (known: ", absl::StrJoin(models, ", "), ")"));
    }
    if (!job.planner.empty() && !Contains(planners, job.planner)) {
      return JobError(source, i, job.id, "planner",
                      absl::StrCat("unknown planner '", job.planner,
                                   "' (known: ", absl::StrJoin(planners, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::sched::cluster
