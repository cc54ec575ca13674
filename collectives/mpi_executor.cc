#include "collectives/mpi_executor.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/adasum.h"
#include "numeric/half.h"
#include "collectives/ring_allgather.h"
#include "collectives/ring_reduce_scatter.h"
#include "collectives/link_shares.h"
#include "collectives/segmented_allreduce.h"
#include "collectives/weighted_allreduce.h"
#include "numeric/cpu_kernels.h"

namespace overlap {
namespace {

// fp16/bf16 reduction kernels for MPI_Op_create: widen to fp32, combine, round back (sums below).
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename Combine>
void ReduceHalf(const void* in, void* inout, int len, Combine combine) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < len; ++i) b[i] = FromFloat(combine(ToFloat(a[i]), ToFloat(b[i])));
}

struct Prod {
  float operator()(float a, float b) const { return a * b; }
};
struct Min {
  float operator()(float a, float b) const { return std::min(a, b); }
};
struct Max {
  float operator()(float a, float b) const { return std::max(a, b); }
};

template <typename Combine>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceHalf<HalfToFloat, FloatToHalf>(in, inout, *len, Combine());
}
template <typename Combine>
void BFloat16Op(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceHalf<BFloat16ToFloat, FloatToBFloat16>(in, inout, *len, Combine());
}

// Sums, which compressed fp16/bf16 payloads spend most of their reduction time in, take the
// vectorised kernels: the same bits, about ten times the scalar loop's speed.
void HalfSumOp(void* in, void* inout, int* len, MPI_Datatype*) {
  const size_t n = static_cast<size_t>(*len);
  numeric::HalfSum({static_cast<const uint16_t*>(in), n},
                             {static_cast<uint16_t*>(inout), n}, numeric::BestIsa());
}
void BFloat16SumOp(void* in, void* inout, int* len, MPI_Datatype*) {
  const size_t n = static_cast<size_t>(*len);
  numeric::BFloat16Sum({static_cast<const uint16_t*>(in), n},
                                 {static_cast<uint16_t*>(inout), n}, numeric::BestIsa());
}

// User-defined ops live as long as MPI does; created once, after MPI_Init, on first use.
struct HalfOps {
  MPI_Op fp16[4];
  MPI_Op bf16[4];
  HalfOps() {
    MPI_User_function* fp16_fns[4] = {HalfSumOp, HalfOp<Min>, HalfOp<Max>, HalfOp<Prod>};
    MPI_User_function* bf16_fns[4] = {BFloat16SumOp, BFloat16Op<Min>, BFloat16Op<Max>,
                                      BFloat16Op<Prod>};
    for (int i = 0; i < 4; ++i) {
      MPI_Op_create(fp16_fns[i], /*commute=*/1, &fp16[i]);
      MPI_Op_create(bf16_fns[i], /*commute=*/1, &bf16[i]);
    }
  }
};

int HalfOpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return 0;
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kProduct:
      return 3;
    default:
      return -1;
  }
}

class MpiWork : public Work {
 public:
  MpiWork() = default;
  MPI_Request* request() { return &request_; }
  // Buffers MPI reads from while the request is in flight.
  std::vector<int> counts[4];

  absl::StatusOr<bool> Test() override {
    int done = 0;
    const int rc = MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return absl::InternalError(MpiErrorString(rc));
    return done != 0;
  }

 private:
  MPI_Request request_ = MPI_REQUEST_NULL;
};

absl::Status ToInts(const std::vector<int64_t>& in, const char* what, std::vector<int>* out) {
  out->resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] < 0 || in[i] > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "[", i, "] = ", in[i], " elements is outside what MPI can address (0..", INT_MAX,
          "); split the tensor"));
    }
    (*out)[i] = static_cast<int>(in[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ToInt(int64_t count) {
  if (count < 0 || count > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " elements is outside what one MPI call can address (0..", INT_MAX,
                     "); split the tensor"));
  }
  return static_cast<int>(count);
}

}  // namespace

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

MPI_Datatype MpiDataType(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return MPI_UINT16_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

absl::StatusOr<MPI_Op> MpiReduceOp(DataType dtype, ReduceOp op) {
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    const int index = HalfOpIndex(op);
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce op ", ReduceOpName(op), " has no MPI operation"));
    }
    static const HalfOps* ops = new HalfOps();
    return dtype == DataType::kFloat16 ? ops->fp16[index] : ops->bf16[index];
  }
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("reduce op ", ReduceOpName(op), " has no MPI operation"));
  }
}

namespace {}  // namespace

namespace {

// Open MPI's non-blocking allreduce (libnbc) picks its algorithm from a process-wide MCA
// variable. Its default choice (a binomial tree whenever the call is in place, as ours mostly
// are) moved large buffers at under half of the blocking MPI_Allreduce's bandwidth; for every
// size we measured (docs/benchmarks.md), recursive doubling is fastest below 64 KiB (9 us for a
// negotiation round's few words against 29 us with Rabenseifner) and Rabenseifner's
// reduce-scatter + allgather above. The variable is written through MPI_T before each call,
// only when it changes, and never when the user set OMPI_MCA_coll_libnbc_iallreduce_algorithm
// (its value is then not the default 0). Other MPIs lack the variable: no-op.
class IallreduceAlgorithm {
 public:
  IallreduceAlgorithm() {
    int provided = 0;
    int index = -1;
    int count = 0;
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS) return;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle_, &count) != MPI_SUCCESS) return;
    int value = -1;
    usable_ = MPI_T_cvar_read(handle_, &value) == MPI_SUCCESS && value == 0;
  }

  void Select(size_t bytes) {
    absl::MutexLock lock(&mu_);
    if (!usable_ || pinned_) return;
    const int wanted = bytes < (size_t{64} << 10) ? kRecursiveDoubling : kRabenseifner;
    if (wanted == current_) return;
    if (MPI_T_cvar_write(handle_, &wanted) == MPI_SUCCESS) current_ = wanted;
  }

  // Back to Open MPI's own choice (0), for good.
  void Pin() {
    absl::MutexLock lock(&mu_);
    if (pinned_) return;
    pinned_ = true;
    const int automatic = 0;
    if (usable_ && current_ != automatic && MPI_T_cvar_write(handle_, &automatic) == MPI_SUCCESS) {
      current_ = automatic;
    }
  }

 private:
  static constexpr int kRabenseifner = 3;
  static constexpr int kRecursiveDoubling = 4;
  absl::Mutex mu_;
  MPI_T_cvar_handle handle_ = nullptr;
  bool usable_ = false;
  bool pinned_ = false;
  int current_ = 0;
};

IallreduceAlgorithm& Algorithm() {
  static IallreduceAlgorithm* algorithm = new IallreduceAlgorithm();
  return *algorithm;
}

// Held across an algorithm choice and the call it is for (StartIallreduce), and by a pin.
absl::Mutex& IallreduceMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

}  // namespace

int StartIallreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                    MPI_Comm comm, MPI_Request* request) {
  int type_bytes = 0;
  MPI_Type_size(type, &type_bytes);
  absl::MutexLock lock(&IallreduceMutex());
  Algorithm().Select(static_cast<size_t>(count) * static_cast<size_t>(type_bytes));
  return MPI_Iallreduce(send, recv, count, type, op, comm, request);
}

void PinIallreduceAlgorithm() {
  absl::MutexLock lock(&IallreduceMutex());
  Algorithm().Pin();
}

absl::StatusOr<std::unique_ptr<MpiExecutor>> MpiExecutor::Create(
    MPI_Comm comm, const MpiExecutorOptions& options) {
  const int num_channels = options.num_channels;
  if (num_channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_channels = ", num_channels, " < 1"));
  }
  std::vector<MPI_Comm> comms(static_cast<size_t>(num_channels), MPI_COMM_NULL);
  for (MPI_Comm& channel_comm : comms) {
    const int rc = MPI_Comm_dup(comm, &channel_comm);
    if (rc != MPI_SUCCESS) {
      return absl::InternalError(absl::StrCat("MPI_Comm_dup failed: ", MpiErrorString(rc)));
    }
    // Errors come back as codes that we turn into Status instead of aborting the job.
    const int set = MPI_Comm_set_errhandler(channel_comm, MPI_ERRORS_RETURN);
    if (set != MPI_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("MPI_Comm_set_errhandler failed: ", MpiErrorString(set)));
    }
  }
  std::unique_ptr<MpiExecutor> executor(new MpiExecutor(std::move(comms), options));
  if (options.host >= 0) {
    absl::Status s = executor->SplitByHost(options.host);
    if (!s.ok()) return s;
  }
  return executor;
}

absl::Status MpiExecutor::SplitByHost(int host) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comms_.front(), &rank);
  MPI_Comm_size(comms_.front(), &size);
  int rc = MPI_SUCCESS;
  // Split straight into the member: on failure Create drops this executor, whose destructor
  // frees whatever communicators were made before the error.
  host_comms_.assign(comms_.size(), HostComms{});
  for (size_t c = 0; c < comms_.size(); ++c) {
    HostComms& hc = host_comms_[c];
    int local_rank = 0, local_size = 0, cross_size = 0;
    rc = MPI_Comm_split(comms_[c], host, rank, &hc.local);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(hc.local, &local_rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(hc.local, &local_size);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_split(comms_[c], local_rank, rank, &hc.cross);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(hc.cross, &cross_size);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(hc.local, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(hc.cross, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
      return absl::InternalError(absl::StrCat("rank ", rank,
                                              ": hierarchical allreduce: splitting channel ", c,
                                              " by host: ", MpiErrorString(rc)));
    }
    // Uniform hosts: every host's cross communicator then spans every host.
    int uniform = local_size * cross_size == size ? 1 : 0, all_uniform = 0;
    rc = MPI_Allreduce(&uniform, &all_uniform, 1, MPI_INT, MPI_MIN, comms_[c]);
    if (rc != MPI_SUCCESS || !all_uniform) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank,
                       ": hierarchical allreduce needs the same number of ranks on every "
                       "host; this rank's host (",
                       host, ") has ", local_size));
    }
  }
  return absl::OkStatus();
}

MpiExecutor::~MpiExecutor() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm& comm : comms_) MPI_Comm_free(&comm);
  for (HostComms& hc : host_comms_) {
    if (hc.local != MPI_COMM_NULL) MPI_Comm_free(&hc.local);
    if (hc.cross != MPI_COMM_NULL) MPI_Comm_free(&hc.cross);
  }
}

absl::StatusOr<std::unique_ptr<Work>> MpiExecutor::StartAdasum(int channel,
                                                               const CollectiveArgs& a) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(a.count, 0)) * DataTypeSize(a.dtype);
  if (a.send != nullptr && a.send != a.recv && bytes > 0) std::memcpy(a.recv, a.send, bytes);
  absl::StatusOr<std::unique_ptr<AdasumAllreduce>> adasum =
      AdasumAllreduce::Start(comms_[static_cast<size_t>(channel)], NextRingTag(channel), a.recv,
                             a.count, a.dtype, a.segments);
  if (!adasum.ok()) return adasum.status();
  return std::unique_ptr<Work>(std::move(*adasum));
}

bool MpiExecutor::Adapts(size_t bytes, ReduceOp op) const {
  if (options_.adaptation == LinkAdaptation::kOff || op == ReduceOp::kAdasum ||
      bytes < kAdaptiveMinBytes) {
    return false;
  }
  if (options_.adaptation == LinkAdaptation::kOn) return true;
  int size = 0;
  MPI_Comm_size(comms_.front(), &size);
  return options_.hosts >= 3 && (hierarchical() || options_.hosts == size);
}

absl::StatusOr<std::unique_ptr<Work>> MpiExecutor::StartAllreduce(
    int channel, const CollectiveArgs& a, MPI_Op op, const std::vector<double>& shares) {
  const MPI_Datatype type = MpiDataType(a.dtype);
  const size_t elem_bytes = DataTypeSize(a.dtype);
  const size_t bytes = static_cast<size_t>(a.count) * elem_bytes;
  const bool two_level_form =
      splits_by_host() && (a.two_stage || (hierarchical() && bytes >= kHierarchicalMinBytes));
  // Shares are per host only where the probes measured the cross-host links (hierarchical); a
  // plan's two-stage bucket on an executor that is flat otherwise runs its cross-host phase
  // unweighted.
  const std::vector<double> kUnweighted;
  const std::vector<double>& used = two_level_form && !hierarchical() ? kUnweighted : shares;
  if (!used.empty()) {
    ++counters_.weighted;
    if (options_.counters != nullptr) ++options_.counters->weighted;
  }
  if (two_level_form) {
    const int tags[2] = {NextRingTag(channel), NextRingTag(channel)};
    absl::StatusOr<std::unique_ptr<HierarchicalAllreduce>> two_level =
        HierarchicalAllreduce::Start(host_comms_[static_cast<size_t>(channel)], tags, a.recv,
                                     a.count, type, elem_bytes, op, used);
    if (!two_level.ok()) return two_level.status();
    return std::unique_ptr<Work>(std::move(*two_level));
  }
  MPI_Comm comm = comms_[static_cast<size_t>(channel)];
  if (!used.empty()) {
    const int tags[2] = {NextRingTag(channel), NextRingTag(channel)};
    absl::StatusOr<std::unique_ptr<WeightedAllreduce>> weighted =
        WeightedAllreduce::Start(comm, tags, a.recv, a.count, type, elem_bytes, op, used);
    if (!weighted.ok()) return weighted.status();
    return std::unique_ptr<Work>(std::move(*weighted));
  }
  if (bytes > SegmentedAllreduce::kSegmentBytes) {
    absl::StatusOr<std::unique_ptr<SegmentedAllreduce>> segmented =
        SegmentedAllreduce::Start(comm, nullptr, a.recv, a.count, type, elem_bytes, op);
    if (!segmented.ok()) return segmented.status();
    return std::unique_ptr<Work>(std::move(*segmented));
  }
  auto work = std::make_unique<MpiWork>();
  absl::StatusOr<int> count = ToInt(a.count);
  if (!count.ok()) return count.status();
  const int rc = StartIallreduce(MPI_IN_PLACE, a.recv, *count, type, op, comm, work->request());
  if (rc != MPI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("MPI allreduce failed to start: ", MpiErrorString(rc)));
  }
  return std::unique_ptr<Work>(std::move(work));
}

namespace {

// A collective whose start-to-end time is added to a running sum when it ends.
class TimedWork : public Work {
 public:
  TimedWork(std::unique_ptr<Work> inner, std::function<void(double)> done)
      : inner_(std::move(inner)), done_(std::move(done)), start_(absl::Now()) {}

  absl::StatusOr<bool> Test() override {
    absl::StatusOr<bool> finished = inner_->Test();
    if (finished.ok() && *finished && done_) {
      done_(absl::ToDoubleSeconds(absl::Now() - start_));
      done_ = nullptr;
    }
    return finished;
  }

 private:
  std::unique_ptr<Work> inner_;
  std::function<void(double)> done_;
  const absl::Time start_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Work>> MpiExecutor::Timed(
    int channel, absl::StatusOr<std::unique_ptr<Work>> work) {
  if (!work.ok()) return work;
  return std::unique_ptr<Work>(std::make_unique<TimedWork>(std::move(*work), [this, channel](
                                                                                 double seconds) {
    LinkState& state = links_[static_cast<size_t>(channel)];
    state.wait_sum += seconds;
    ++state.waited;
  }));
}

void MpiExecutor::Judge(const LinkProbe& probe, LinkState* state) const {
  const bool measured = probe.measures_rates();
  const std::vector<double>& waits = probe.waits();
  const std::vector<int> late = Stragglers(waits);
  const bool pays = measured ? WeightedPays(probe.rates()) : state->last_paid;
  // A verdict that repeats the last one's stands until the next rate probe is due; a new one is
  // checked soon, before it takes effect. The first rate verdict is settled when it finds that
  // weighting does not pay, which is how allreduces ran before any probe; a lateness verdict is
  // not when nothing was timed before the probe (the first, unless first_probe_after held it).
  state->rates_settled = pays == state->last_paid;
  const bool timed = std::any_of(waits.begin(), waits.end(), [](double w) { return w > 0; });
  const bool settled = state->rates_settled && timed && late == state->last_stragglers;
  if (measured) {
    state->rates = probe.rates();
    state->since_rates = 0;
    state->last_paid = pays;
    state->paying_probes = pays ? state->paying_probes + 1 : 0;
    const bool weighted = options_.adaptation == LinkAdaptation::kOn
                              ? state->rates.size() >= 2
                              : state->paying_probes >= 2;
    state->shares = weighted ? LinkShares(state->rates) : std::vector<double>();
  }
  state->interval = settled ? std::max<int64_t>(1, options_.reprobe_every - state->since_rates)
                            : std::min(kFirstReprobe, options_.reprobe_every);
  ++state->since_rates;  // the allreduce this probe or check precedes
  state->stragglers = late == state->last_stragglers ? late : std::vector<int>();
  state->last_stragglers = late;
  UpdateLateness(waits, state);
}

void MpiExecutor::UpdateLateness(const std::vector<double>& waits, LinkState* state) const {
  std::vector<double> sorted = waits;
  std::sort(sorted.begin(), sorted.end());
  state->lateness_s = 0;
  for (int s : state->stragglers) {
    const double behind = sorted[sorted.size() / 2] - waits[static_cast<size_t>(s)];
    state->lateness_s = state->lateness_s == 0 ? behind : std::min(state->lateness_s, behind);
  }
  state->late_shares = state->stragglers.empty() || state->rates.empty()
                           ? std::vector<double>()
                           : LinkShares(state->rates, state->stragglers);
}

const std::vector<double>& MpiExecutor::SharesFor(const LinkState& link, size_t bytes) const {
  if (!link.stragglers.empty() &&
      (options_.adaptation == LinkAdaptation::kOn ||
       StragglerPays(link.rates, link.stragglers, link.lateness_s, static_cast<double>(bytes)))) {
    return link.late_shares;
  }
  return link.shares;
}

absl::StatusOr<std::unique_ptr<Work>> MpiExecutor::StartAdaptive(int channel,
                                                                 const CollectiveArgs& a,
                                                                 MPI_Op op) {
  const size_t bytes = static_cast<size_t>(a.count) * DataTypeSize(a.dtype);
  LinkState& link = links_[static_cast<size_t>(channel)];
  if (link.since_probe < link.interval) {
    ++link.since_probe;
    ++link.since_rates;
    return Timed(channel, StartAllreduce(channel, a, op, SharesFor(link, bytes)));
  }
  // Rates again when never measured, when their verdict is unsettled, or when due; otherwise a
  // lateness check.
  const bool measure_rates = link.rates.empty() || !link.rates_settled ||
                             link.since_rates >= options_.reprobe_every;
  // The cross-host communicator when hierarchical: its ranks are the hosts' links.
  const bool cross = hierarchical();
  MPI_Comm probed = cross ? host_comms_[static_cast<size_t>(channel)].cross
                          : comms_[static_cast<size_t>(channel)];
  const double wait = link.waited > 0 ? link.wait_sum / static_cast<double>(link.waited) : 0;
  link.wait_sum = 0;
  link.waited = 0;
  // A probe exchanges no more than the allreduce it precedes moves (at least kAdaptiveMinBytes),
  // except one that checks a new verdict before it takes effect: a job of small buckets on a
  // slow link paid 0.4 s for its first probe's 4 MiB rounds (the Fashion-MNIST CNN at
  // 300 Mbit/s), and a verdict that weighting pays, the one a short probe may get wrong (a
  // token-bucket shaper's burst, TCP's slow start), is confirmed at full size.
  const bool confirming = !link.rates.empty() && !link.rates_settled;
  const size_t probe_bytes =
      confirming ? options_.probe_bytes : std::min(options_.probe_bytes, bytes);
  absl::StatusOr<std::unique_ptr<LinkProbe>> probe =
      LinkProbe::Start(probed, NextProbeTag(channel), measure_rates ? probe_bytes : 0, wait);
  if (!probe.ok()) return probe.status();
  const absl::Time started = absl::Now();
  CollectiveArgs args = a;
  const size_t exchanged = measure_rates ? probe_bytes : 0;
  return std::unique_ptr<Work>(std::make_unique<ProbedAllreduce>(
      std::move(*probe),
      [this, channel, cross, started, args, op, bytes, exchanged](
          const LinkProbe& done) -> absl::StatusOr<std::unique_ptr<Work>> {
        LinkState& state = links_[static_cast<size_t>(channel)];
        if (done.measures_rates()) {
          ++counters_.probes;
          if (options_.counters != nullptr) ++options_.counters->probes;
        }
        state.since_probe = 1;
        Judge(done, &state);
        if (options_.on_probe) {
          LinkReport report;
          report.channel = channel;
          report.cross_host = cross;
          report.rates_measured = done.measures_rates();
          report.rates = state.rates;
          report.shares = state.stragglers.empty() ? state.shares : state.late_shares;
          report.waits = done.waits();
          report.stragglers = state.stragglers;
          report.seconds = absl::ToDoubleSeconds(absl::Now() - started);
          report.bytes = exchanged;
          options_.on_probe(report);
        }
        return Timed(channel, StartAllreduce(channel, args, op, SharesFor(state, bytes)));
      }));
}

void MpiExecutor::Poke() {
  // A probe that matches nothing still runs Open MPI's progress engine (every BTL, every libnbc
  // schedule); it receives nothing, so the rings' own messages are left for their Tests.
  int flag = 0;
  (void)MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comms_.front(), &flag, MPI_STATUS_IGNORE);
}

absl::StatusOr<std::unique_ptr<Work>> MpiExecutor::Start(int channel, const CollectiveArgs& a) {
  if (channel < 0 || channel >= num_channels()) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel ", channel, " out of range [0, ", num_channels(), ")"));
  }
  MPI_Comm comm = comms_[static_cast<size_t>(channel)];
  const MPI_Datatype type = MpiDataType(a.dtype);
  auto work = std::make_unique<MpiWork>();
  MPI_Request* req = work->request();
  int rc = MPI_SUCCESS;
  switch (a.kind) {
    case CollectiveKind::kAllreduce: {
      if (a.op == ReduceOp::kAdasum) return StartAdasum(channel, a);
      absl::StatusOr<MPI_Op> op = MpiReduceOp(a.dtype, a.op);
      if (!op.ok()) return op.status();
      if (a.count < 0) {
        return absl::InvalidArgumentError(absl::StrCat("allreduce of ", a.count, " elements"));
      }
      // Always in place. MPI asks for MPI_IN_PLACE on every rank or on none, and one rank may
      // reduce a tensor in place while another reduces it out of place; Open MPI's own choice of
      // libnbc algorithm (in force after PinIallreduceAlgorithm) depends on it, so the ranks ran
      // different algorithms for one allreduce and failed with MPI_ERR_TRUNCATE.
      const size_t bytes = static_cast<size_t>(a.count) * DataTypeSize(a.dtype);
      if (a.send != nullptr && a.send != a.recv && bytes > 0) std::memcpy(a.recv, a.send, bytes);
      if (Adapts(bytes, a.op)) return StartAdaptive(channel, a, *op);
      return StartAllreduce(channel, a, *op, {});
    }
    case CollectiveKind::kBroadcast: {
      absl::StatusOr<int> count = ToInt(a.count);
      if (!count.ok()) return count.status();
      rc = MPI_Ibcast(a.recv, *count, type, a.root, comm, req);
      break;
    }
    case CollectiveKind::kAllgatherv: {
      std::vector<int>& counts = work->counts[0];
      std::vector<int>& displs = work->counts[1];
      absl::Status s = ToInts(a.recv_counts, "recv_counts", &counts);
      if (s.ok()) s = ToInts(a.recv_displs, "recv_displs", &displs);
      if (!s.ok()) return s;
      int rank = 0;
      rc = MPI_Comm_rank(comm, &rank);
      if (rc != MPI_SUCCESS) break;
      int64_t total = 0;
      for (int c : counts) total += c;
      if (a.send != nullptr &&
          static_cast<size_t>(total) * DataTypeSize(a.dtype) >= kRingAllgatherBytes) {
        absl::StatusOr<std::unique_ptr<RingAllgather>> ring =
            RingAllgather::Start(comm, NextRingTag(channel), a.send, a.recv, counts, displs, type,
                                 DataTypeSize(a.dtype));
        if (!ring.ok()) return ring.status();
        return std::unique_ptr<Work>(std::move(*ring));
      }
      rc = MPI_Iallgatherv(a.send, counts[static_cast<size_t>(rank)], type, a.recv, counts.data(),
                           displs.data(), type, comm, req);
      break;
    }
    case CollectiveKind::kReduceScatter: {
      std::vector<int>& counts = work->counts[0];
      absl::Status s = ToInts(a.recv_counts, "recv_counts", &counts);
      if (!s.ok()) return s;
      absl::StatusOr<MPI_Op> op = MpiReduceOp(a.dtype, a.op);
      if (!op.ok()) return op.status();
      const size_t bytes = static_cast<size_t>(a.count) * DataTypeSize(a.dtype);
      if (a.send != nullptr && bytes >= kRingReduceScatterBytes) {
        absl::StatusOr<std::unique_ptr<RingReduceScatter>> ring = RingReduceScatter::Start(
            comm, NextRingTag(channel), a.send, a.recv, counts, type, DataTypeSize(a.dtype), *op);
        if (!ring.ok()) return ring.status();
        return std::unique_ptr<Work>(std::move(*ring));
      }
      rc = MPI_Ireduce_scatter(a.send, a.recv, counts.data(), type, *op, comm, req);
      break;
    }
    case CollectiveKind::kAlltoallv: {
      absl::Status s = ToInts(a.send_counts, "send_counts", &work->counts[0]);
      if (s.ok()) s = ToInts(a.send_displs, "send_displs", &work->counts[1]);
      if (s.ok()) s = ToInts(a.recv_counts, "recv_counts", &work->counts[2]);
      if (s.ok()) s = ToInts(a.recv_displs, "recv_displs", &work->counts[3]);
      if (!s.ok()) return s;
      rc = MPI_Ialltoallv(a.send, work->counts[0].data(), work->counts[1].data(), type, a.recv,
                          work->counts[2].data(), work->counts[3].data(), type, comm, req);
      break;
    }
    case CollectiveKind::kBarrier:
      rc = MPI_Ibarrier(comm, req);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown collective kind ", static_cast<int>(a.kind)));
  }
  if (rc != MPI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("MPI ", CollectiveKindName(a.kind), " failed to start: ", MpiErrorString(rc)));
  }
  return std::unique_ptr<Work>(std::move(work));
}

}  // namespace overlap
