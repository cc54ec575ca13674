#include "scheduler/cluster/cluster_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap::sched::cluster {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class EventKind { kArrival, kWorkerReady, kComputeDone, kRelease, kMilestone, kTransferDone };

struct Event {
  double t = 0;
  uint64_t seq = 0;
  EventKind kind = EventKind::kArrival;
  int job = 0;
  int worker = 0;
  uint64_t version = 0;  // transfer events: stale when the job's version moved on
};

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.t > b.t || (a.t == b.t && a.seq > b.seq);
  }
};

struct Worker {
  int gpu = 0;
  int64_t iter = 0;  // the iteration its current (or next) compute task belongs to
  double start = 0;
  double end = 0;
  bool done = false;  // compute of `iter` ended, next not yet made ready
};

// Everything the simulator tracks about one job. Times in seconds.
struct JobState {
  const TraceJob* job = nullptr;
  bool arrived = false;
  bool finished = false;
  double compute_s = 0, iter_s = 0, release_s = 0, comm_s = 0, tail_s = 0;
  std::vector<Worker> workers;
  std::vector<int> nics;  // servers spanned when more than one; empty otherwise
  int64_t computes_done = 0;
  // Starts of the (at most two) iterations in flight, by parity.
  int started[2] = {0, 0};
  double release_at[2] = {0, 0};
  // The transfer. At most one runs; the next one may be released (pending) meanwhile.
  bool active = false;
  int64_t active_iter = -1;
  int64_t pending_iter = -1;  // released, not yet started
  double remaining = 0, rate = 0, last = 0, started_at = 0;
  uint64_t version = 0;
  int64_t milestone_iter = -1;  // the last iteration whose transfer reached its milestone
  double milestone_t = 0;
  int64_t transfers_done = 0;
  double finish = 0;

  int W() const { return static_cast<int>(workers.size()); }
  bool has_comm() const { return comm_s > 0; }
  // Iterations not finished (an iteration finishes with its last compute and its transfer) x
  // solo iteration time x GPUs: the SRSF priority and the placement workload.
  double RemainingService() const {
    double done = static_cast<double>(computes_done) / W();
    if (has_comm()) {
      done = std::min(done, static_cast<double>(transfers_done));
    }
    return (static_cast<double>(job->iterations) - done) * iter_s * W();
  }
  double RemainingNow(double now) const { return std::max(0.0, remaining - (now - last) * rate); }
};

class Engine {
 public:
  Engine(const Trace& trace, const ClusterSpec& spec, const ClusterSimOptions& options,
         const IterationModelFn& model_fn)
      : trace_(trace), spec_(spec), options_(options), model_fn_(model_fn) {}

  absl::StatusOr<ClusterResult> Run();

 private:
  void Push(double t, EventKind kind, int job, int worker = 0, uint64_t version = 0) {
    queue_.push(Event{t, seq_++, kind, job, worker, version});
  }
  // Priority of jobs under the policy: smaller key first, then trace index.
  double PriorityKey(int j) const;
  bool Before(int a, int b) const;
  absl::Status Arrive(int j, double now);
  void Dispatch(int gpu, double now);
  void ComputeDone(int j, int w, double now);
  void Release(int j, int64_t iter, double now);
  void Enqueue(int j, double now);
  void TryStartTransfers(double now, int enqueued = -1);
  void StartTransfer(int j, double now);
  void Retime(int j, double now);
  void Milestone(int j, double now);
  void TransferDone(int j, double now);
  void MaybeReady(int j, int w, double now);
  void MaybeFinish(int j, double now);
  void Span(int pid, int tid, const std::string& name, double start, double end);

  const Trace& trace_;
  const ClusterSpec& spec_;
  const ClusterSimOptions& options_;
  const IterationModelFn& model_fn_;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  uint64_t seq_ = 0;
  std::vector<JobState> jobs_;
  std::vector<std::vector<int>> gpu_jobs_;                   // unfinished jobs placed there
  std::vector<std::vector<std::pair<int, int>>> gpu_ready_;  // (job, worker)
  std::vector<bool> gpu_busy_;
  std::vector<std::vector<int>> nic_jobs_;  // jobs whose transfer runs on the NIC
  // Per NIC, the jobs whose pending transfer needs it and awaits admission.
  std::vector<std::vector<int>> nic_waiting_;
  std::vector<uint64_t> seen_;  // per job: the admission pass that last considered it
  uint64_t pass_ = 0;
  std::vector<bool> freed_;  // NICs that lost a transfer since the last admission pass
  int64_t transfers_ = 0, shared_ = 0;
  int max_sharing_ = 0;
  std::string timeline_;
};

double Engine::PriorityKey(int j) const {
  return options_.communication.order == CommPolicy::Order::kSrsf ? jobs_[j].RemainingService()
                                                                  : jobs_[j].job->arrival_s;
}

bool Engine::Before(int a, int b) const {
  const double ka = PriorityKey(a), kb = PriorityKey(b);
  return ka < kb || (ka == kb && a < b);
}

absl::Status Engine::Arrive(int j, double now) {
  JobState& s = jobs_[j];
  std::vector<GpuLoad> loads(spec_.gpus());
  for (int g = 0; g < spec_.gpus(); ++g) {
    for (int other : gpu_jobs_[g]) {
      loads[g].jobs += 1;
      loads[g].workload_s += jobs_[other].RemainingService() / jobs_[other].W();
    }
  }
  std::vector<int> gpus = Place(options_.placement, s.job->workers, loads, spec_.gpus_per_server);
  std::vector<int> servers;
  servers.reserve(gpus.size());
  for (int g : gpus) {
    servers.push_back(spec_.ServerOf(g));
  }
  std::sort(servers.begin(), servers.end());
  servers.erase(std::unique(servers.begin(), servers.end()), servers.end());
  auto model = model_fn_(*s.job, servers.size() > 1);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("job '", s.job->id, "': ", model.status().message()));
  }
  for (double v : {model->compute_ms, model->iteration_ms, model->release_ms, model->comm_ms}) {
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("job '", s.job->id, "': iteration model has a negative or infinite time"));
    }
  }
  s.compute_s = model->compute_ms / 1e3;
  s.release_s = model->release_ms / 1e3;
  s.comm_s = s.job->workers > 1 ? model->comm_ms / 1e3 : 0;
  s.tail_s = std::max(model->tail_ms / 1e3, -s.comm_s);
  // The solo iteration, derived rather than trusted: no shorter than what the tasks need alone.
  s.iter_s = std::max({model->iteration_ms / 1e3, s.compute_s,
                       s.comm_s > 0 ? s.release_s + s.comm_s + s.tail_s : 0.0});
  if (servers.size() > 1) {
    s.nics = servers;
  }
  s.arrived = true;
  for (int g : gpus) {
    Worker w;
    w.gpu = g;
    s.workers.push_back(w);
    gpu_jobs_[g].push_back(j);
  }
  for (int w = 0; w < s.W(); ++w) {
    gpu_ready_[s.workers[w].gpu].push_back({j, w});
  }
  for (int g : gpus) {
    Dispatch(g, now);
  }
  return absl::OkStatus();
}

void Engine::Dispatch(int gpu, double now) {
  std::vector<std::pair<int, int>>& ready = gpu_ready_[gpu];
  if (gpu_busy_[gpu] || ready.empty()) {
    return;
  }
  size_t best = 0;
  for (size_t i = 1; i < ready.size(); ++i) {
    if (Before(ready[i].first, ready[best].first)) {
      best = i;
    }
  }
  const auto [j, w] = ready[best];
  ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
  JobState& s = jobs_[j];
  Worker& worker = s.workers[w];
  gpu_busy_[gpu] = true;
  worker.start = now;
  worker.done = false;
  Push(now + s.compute_s, EventKind::kComputeDone, j, w);
  if (!s.has_comm()) {
    return;
  }
  const int parity = static_cast<int>(worker.iter % 2);
  s.release_at[parity] =
      std::max(s.started[parity] == 0 ? 0.0 : s.release_at[parity], now + s.release_s);
  if (++s.started[parity] == s.W()) {
    s.started[parity] = 0;
    Push(s.release_at[parity], EventKind::kRelease, j, static_cast<int>(worker.iter));
  }
}

void Engine::ComputeDone(int j, int w, double now) {
  JobState& s = jobs_[j];
  Worker& worker = s.workers[w];
  worker.end = now;
  worker.done = true;
  ++s.computes_done;
  gpu_busy_[worker.gpu] = false;
  if (options_.record_timeline) {
    Span(0, worker.gpu, s.job->id, worker.start, now);
  }
  MaybeReady(j, w, now);
  MaybeFinish(j, now);
  Dispatch(worker.gpu, now);
}

// A worker whose compute of iteration k ended may start k + 1 once the transfer of k reached its
// milestone (iteration_model.h), and not before compute start + iteration time.
void Engine::MaybeReady(int j, int w, double now) {
  JobState& s = jobs_[j];
  Worker& worker = s.workers[w];
  if (!worker.done || worker.iter + 1 >= s.job->iterations) {
    return;
  }
  double ready = std::max(worker.end, worker.start + s.iter_s);
  if (s.has_comm()) {
    if (s.milestone_iter < worker.iter) {
      return;
    }
    ready = std::max(ready, s.milestone_t + std::max(0.0, s.tail_s));
  }
  worker.done = false;
  worker.iter += 1;
  if (ready > now) {
    Push(ready, EventKind::kWorkerReady, j, w);
    return;
  }
  // Ready now: queue it at once, so that a GPU choosing its next task at this instant sees it.
  gpu_ready_[worker.gpu].push_back({j, w});
  Dispatch(worker.gpu, now);
}

void Engine::MaybeFinish(int j, double now) {
  JobState& s = jobs_[j];
  if (s.finished || s.computes_done < s.job->iterations * s.W()) {
    return;
  }
  if (s.has_comm() && s.transfers_done < s.job->iterations) {
    return;
  }
  s.finished = true;
  s.finish = now;
  for (const Worker& w : s.workers) {
    auto& list = gpu_jobs_[w.gpu];
    list.erase(std::remove(list.begin(), list.end(), j), list.end());
  }
}

// Iteration k + 1 is released only after every worker started it, which needs the milestone of
// transfer k: so transfer k is running or over, and at most one transfer is pending.
void Engine::Release(int j, int64_t iter, double now) {
  jobs_[j].pending_iter = iter;
  Enqueue(j, now);
}

void Engine::Enqueue(int j, double now) {
  JobState& s = jobs_[j];
  if (s.active || s.pending_iter < 0) {
    return;
  }
  if (s.nics.empty()) {  // the server's internal link: nothing to contend with
    StartTransfer(j, now);
    return;
  }
  for (int nic : s.nics) {
    nic_waiting_[nic].push_back(j);
  }
  TryStartTransfers(now, j);
}

// Only transfers that touch a NIC freed since the last pass (or the one just enqueued) can have
// become admissible: a NIC's load only grows between frees, and AdaDUAL's test only gets harder
// as the running transfer's remainder shrinks. So the others are skipped, in the same greedy
// priority order the full scan would use.
void Engine::TryStartTransfers(double now, int enqueued) {
  std::vector<std::pair<double, int>> order;  // keys once per call, not per comparison
  ++pass_;
  auto consider = [&](int j) {
    if (seen_[j] != pass_) {
      seen_[j] = pass_;
      order.push_back({PriorityKey(j), j});
    }
  };
  if (enqueued >= 0) {
    consider(enqueued);
  }
  for (int nic = 0; nic < spec_.servers; ++nic) {
    if (freed_[nic]) {
      for (int j : nic_waiting_[nic]) {
        consider(j);
      }
    }
  }
  std::fill(freed_.begin(), freed_.end(), false);
  if (order.empty()) {
    return;
  }
  std::sort(order.begin(), order.end());
  const int cap = options_.communication.admission == CommPolicy::Admission::kExclusive ? 1 : 2;
  std::vector<int> started;
  std::vector<std::vector<double>> running;
  for (const auto& [key, j] : order) {
    JobState& s = jobs_[j];
    bool room = true;  // cheap test first: most waiting transfers face a full NIC
    for (int nic : s.nics) {
      room = room && static_cast<int>(nic_jobs_[nic].size()) < cap;
    }
    if (room) {
      running.assign(s.nics.size(), {});
      for (size_t i = 0; i < s.nics.size(); ++i) {
        for (int other : nic_jobs_[s.nics[i]]) {
          running[i].push_back(jobs_[other].RemainingNow(now));
        }
      }
      room = MayStart(options_.communication, s.comm_s, running, spec_.contention);
    }
    if (room) {
      StartTransfer(j, now);
      started.push_back(j);
    }
  }
  for (int j : started) {
    for (int nic : jobs_[j].nics) {
      auto& list = nic_waiting_[nic];
      list.erase(std::remove(list.begin(), list.end(), j), list.end());
    }
  }
}

void Engine::StartTransfer(int j, double now) {
  JobState& s = jobs_[j];
  s.active = true;
  s.active_iter = s.pending_iter;
  s.pending_iter = -1;
  s.remaining = s.comm_s;
  s.rate = 1;
  s.last = now;
  s.started_at = now;
  if (!s.nics.empty()) {
    ++transfers_;
    bool shared = false;
    for (int nic : s.nics) {
      shared = shared || !nic_jobs_[nic].empty();
      nic_jobs_[nic].push_back(j);
      max_sharing_ = std::max(max_sharing_, static_cast<int>(nic_jobs_[nic].size()));
    }
    shared_ += shared ? 1 : 0;
  }
  // Retime every transfer on the NICs whose load changed (this one included).
  std::vector<int> touched = {j};
  for (int nic : s.nics) {
    touched.insert(touched.end(), nic_jobs_[nic].begin(), nic_jobs_[nic].end());
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (int t : touched) {
    Retime(t, now);
  }
}

// Brings job j's transfer to `now` at its old rate and schedules its milestone and end at the
// rate its NICs give it now.
void Engine::Retime(int j, double now) {
  JobState& s = jobs_[j];
  s.remaining = s.RemainingNow(now);
  s.last = now;
  int k = 1;
  for (int nic : s.nics) {
    k = std::max(k, static_cast<int>(nic_jobs_[nic].size()));
  }
  s.rate = 1.0 / spec_.contention.Slowdown(k);
  ++s.version;
  Push(now + s.remaining / s.rate, EventKind::kTransferDone, j, 0, s.version);
  if (s.tail_s < 0 && s.milestone_iter < s.active_iter) {
    const double to_go = std::max(0.0, s.remaining - (-s.tail_s));
    Push(now + to_go / s.rate, EventKind::kMilestone, j, 0, s.version);
  }
}

void Engine::Milestone(int j, double now) {
  JobState& s = jobs_[j];
  if (s.milestone_iter >= s.active_iter) {
    return;
  }
  s.milestone_iter = s.active_iter;
  s.milestone_t = now;
  for (int w = 0; w < s.W(); ++w) {
    MaybeReady(j, w, now);
  }
}

void Engine::TransferDone(int j, double now) {
  JobState& s = jobs_[j];
  s.active = false;
  s.remaining = 0;
  ++s.transfers_done;
  for (int nic : s.nics) {
    auto& list = nic_jobs_[nic];
    list.erase(std::remove(list.begin(), list.end(), j), list.end());
    freed_[nic] = true;
    if (options_.record_timeline) {
      Span(1, nic, s.job->id, s.started_at, now);
    }
  }
  std::vector<int> touched;
  for (int nic : s.nics) {
    touched.insert(touched.end(), nic_jobs_[nic].begin(), nic_jobs_[nic].end());
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (int t : touched) {
    Retime(t, now);
  }
  Milestone(j, now);  // a no-op when it was reached earlier (negative tail)
  MaybeFinish(j, now);
  if (s.pending_iter >= 0) {
    Enqueue(j, now);  // the next iteration's transfer, released meanwhile (admits waiters too)
  } else {
    TryStartTransfers(now);
  }
}

void Engine::Span(int pid, int tid, const std::string& name, double start, double end) {
  absl::StrAppendFormat(&timeline_,
                        "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                        "\"dur\":%.3f}",
                        timeline_.empty() ? "" : ",\n", name, pid, tid, start * 1e6,
                        (end - start) * 1e6);
}

double Percentile(std::vector<double> sorted, double q) {
  const size_t n = sorted.size();
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  return sorted[rank - 1];
}

absl::StatusOr<ClusterResult> Engine::Run() {
  absl::Status valid = ValidateJobs(trace_, spec_.gpus());
  if (!valid.ok()) {
    return valid;
  }
  if (trace_.jobs.empty()) {
    return absl::InvalidArgumentError("trace: jobs: expected at least one job");
  }
  jobs_.resize(trace_.jobs.size());
  gpu_jobs_.assign(spec_.gpus(), {});
  gpu_ready_.assign(spec_.gpus(), {});
  gpu_busy_.assign(spec_.gpus(), false);
  nic_jobs_.assign(spec_.servers, {});
  freed_.assign(spec_.servers, false);
  nic_waiting_.assign(spec_.servers, {});
  seen_.assign(trace_.jobs.size(), 0);
  std::vector<int> order(trace_.jobs.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = static_cast<int>(i);
    jobs_[i].job = &trace_.jobs[i];
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return trace_.jobs[a].arrival_s < trace_.jobs[b].arrival_s;
  });
  for (int j : order) {
    Push(trace_.jobs[j].arrival_s, EventKind::kArrival, j);
  }
  while (!queue_.empty()) {
    const Event e = queue_.top();
    queue_.pop();
    JobState& s = jobs_[e.job];
    switch (e.kind) {
      case EventKind::kArrival: {
        absl::Status status = Arrive(e.job, e.t);
        if (!status.ok()) {
          return status;
        }
        break;
      }
      case EventKind::kWorkerReady:
        gpu_ready_[s.workers[e.worker].gpu].push_back({e.job, e.worker});
        Dispatch(s.workers[e.worker].gpu, e.t);
        break;
      case EventKind::kComputeDone:
        ComputeDone(e.job, e.worker, e.t);
        break;
      case EventKind::kRelease:
        Release(e.job, e.worker, e.t);
        break;
      case EventKind::kMilestone:
        if (e.version == s.version && s.active) {
          Milestone(e.job, e.t);
        }
        break;
      case EventKind::kTransferDone:
        if (e.version == s.version && s.active) {
          TransferDone(e.job, e.t);
        }
        break;
    }
  }
  ClusterResult result;
  double first_arrival = kInf, last_finish = 0, busy = 0;
  std::vector<double> jcts;
  for (const JobState& s : jobs_) {
    if (!s.finished) {
      return absl::InternalError(absl::StrCat("job '", s.job->id, "' never finished"));
    }
    JobResult r;
    r.id = s.job->id;
    for (const Worker& w : s.workers) {
      r.gpus.push_back(w.gpu);
    }
    r.servers = std::max<int>(1, static_cast<int>(s.nics.size()));
    r.arrival_s = s.job->arrival_s;
    r.finish_s = s.finish;
    r.jct_s = s.finish - s.job->arrival_s;
    r.solo_s = static_cast<double>(s.job->iterations) * s.iter_s;
    first_arrival = std::min(first_arrival, r.arrival_s);
    last_finish = std::max(last_finish, r.finish_s);
    busy += static_cast<double>(s.job->iterations) * s.W() * s.compute_s;
    jcts.push_back(r.jct_s);
    result.jobs.push_back(std::move(r));
  }
  std::sort(jcts.begin(), jcts.end());
  double sum = 0;
  for (double v : jcts) {
    sum += v;
  }
  const size_t n = jcts.size();
  result.avg_jct_s = sum / static_cast<double>(n);
  result.median_jct_s = n % 2 == 1 ? jcts[n / 2] : (jcts[n / 2 - 1] + jcts[n / 2]) / 2;
  result.p95_jct_s = Percentile(jcts, 0.95);
  result.makespan_s = last_finish - first_arrival;
  result.gpu_util = result.makespan_s > 0 ? busy / (spec_.gpus() * result.makespan_s) : 0;
  result.transfers = transfers_;
  result.shared_transfers = shared_;
  result.max_nic_sharing = max_sharing_;
  if (options_.record_timeline) {
    std::string meta;
    for (int g = 0; g < spec_.gpus(); ++g) {
      absl::StrAppendFormat(&meta,
                            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                            "\"args\":{\"name\":\"GPU %d (server %d)\"}},\n",
                            g, g, spec_.ServerOf(g));
    }
    for (int nic = 0; nic < spec_.servers; ++nic) {
      absl::StrAppendFormat(&meta,
                            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                            "\"args\":{\"name\":\"NIC of server %d\"}},\n",
                            nic, nic);
    }
    meta +=
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"GPUs\"}},\n"
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"NICs\"}}";
    result.timeline_json = absl::StrCat("{\"traceEvents\":[\n", meta,
                                        timeline_.empty() ? "" : ",\n", timeline_, "\n]}\n");
  }
  return result;
}

}  // namespace

absl::StatusOr<ClusterResult> SimulateCluster(const Trace& trace, const ClusterSpec& spec,
                                              const ClusterSimOptions& options,
                                              const IterationModelFn& model_fn) {
  absl::Status status = spec.Validate();
  if (!status.ok()) {
    return status;
  }
  Engine engine(trace, spec, options, model_fn);
  return engine.Run();
}

}  // namespace overlap::sched::cluster
