#include "runtime/api/timeline.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/api/json_escape.h"

namespace overlap {

Timeline::~Timeline() { Close(); }

absl::Status Timeline::Open(const std::string& path, int rank) {
  Close();
  absl::MutexLock lock(&mu_);
  const std::string file = rank == 0 ? path : absl::StrCat(path, ".rank", rank);
  file_ = std::fopen(file.c_str(), "w");
  if (file_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("rank ", rank, ": cannot write timeline '", file,
                                               "': ", std::strerror(errno)));
  }
  rank_ = rank;
  origin_ = absl::Now();
  tracks_.clear();
  predicted_tracks_.clear();
  open_ = true;
  std::fprintf(
      file_,
      "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
      rank, rank);
  return absl::OkStatus();
}

int Timeline::TrackId(absl::flat_hash_map<std::string, int>* tracks, int pid,
                      const std::string& track) {
  auto it = tracks->find(track);
  if (it != tracks->end()) return it->second;
  if (tracks->empty() && pid == PredictedPid()) {
    std::fprintf(file_,
                 ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":"
                 "\"rank %d predicted (simulator)\"}}",
                 pid, rank_);
  }
  const int id = static_cast<int>(tracks->size()) + 1;
  tracks->emplace(track, id);
  std::fprintf(
      file_,
      ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
      pid, id, JsonEscape(track).c_str());
  return id;
}

void Timeline::Write(int pid, int tid, const std::string& what, absl::Time start,
                     absl::Time end) {
  std::fprintf(file_,
               ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
               JsonEscape(what).c_str(), pid, tid, absl::ToDoubleMicroseconds(start - origin_),
               absl::ToDoubleMicroseconds(end - start));
}

void Timeline::Span(const std::string& track, const char* what, absl::Time start, absl::Time end) {
  absl::MutexLock lock(&mu_);
  if (file_ == nullptr) return;
  Write(MeasuredPid(), TrackId(&tracks_, MeasuredPid(), track), what, start, end);
}

void Timeline::Predicted(const std::string& track, const std::string& what, absl::Time start,
                         absl::Time end) {
  absl::MutexLock lock(&mu_);
  if (file_ == nullptr) return;
  Write(PredictedPid(), TrackId(&predicted_tracks_, PredictedPid(), track), what, start, end);
}

void Timeline::Close() {
  absl::MutexLock lock(&mu_);
  if (file_ == nullptr) return;
  std::fprintf(file_, "\n]\n");
  std::fclose(file_);
  file_ = nullptr;
  open_ = false;
}

}  // namespace overlap
