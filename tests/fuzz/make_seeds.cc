// Writes the binary seeds of the fuzz corpora with overlap's own encoders, so that the seeds
// follow the formats as they are (tools/fuzz.sh -s runs it). Text seeds (hostfiles, arguments,
// environments, profiles) are kept by hand in tests/fuzz/corpus/.
#include <cstdio>
#include <fstream>
#include <string>

#include "compression/residual.h"
#include "runtime/negotiation/messages.h"
#include "runtime/plan/plan_checkpoint.h"
#include "scheduler/plan.h"
#include "tests/runtime/sample_plan_checkpoint.h"

namespace overlap {
namespace {

std::string dir;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + target + "/" + name, std::ios::binary) << bytes;
}

Request Allreduce(const std::string& name, std::vector<int64_t> shape) {
  Request r;
  r.name = name;
  r.tensors.push_back(TensorMeta{DataType::kFloat32, std::move(shape)});
  return r;
}

void Messages() {
  auto with_mode = [](char mode, ByteWriter& w) { return std::string(1, mode) + w.bytes(); };
  ByteWriter a;
  EncodeRequest(Allreduce("layer1.weight", {128, 784}), &a);
  Write("messages_fuzz", "request_allreduce", with_mode(0, a));
  Request grouped = Allreduce("group", {10});
  grouped.tensors.push_back(TensorMeta{DataType::kFloat16, {3, 3}});
  grouped.compression = "topk:ratio=0.01";
  grouped.update_schedule = "delay 1, period 2, phase 0";
  grouped.prescale = 0.5;
  ByteWriter g;
  EncodeRequest(grouped, &g);
  Write("messages_fuzz", "request_grouped", with_mode(0, g));
  Request alltoall;
  alltoall.name = "a2a";
  alltoall.kind = OpKind::kAlltoall;
  alltoall.tensors.push_back(TensorMeta{DataType::kInt32, {4, 2}});
  alltoall.splits = {1, 3};
  alltoall.device = DeviceKind::kCuda;
  ByteWriter t;
  EncodeRequest(alltoall, &t);
  Write("messages_fuzz", "request_alltoall", with_mode(0, t));
  Response ok;
  ok.name = "layer1.weight";
  ok.cache_id = 3;
  ok.request = Allreduce("layer1.weight", {128, 784});
  ok.rank_rows = {2, 5};
  ByteWriter r;
  EncodeResponse(ok, &r);
  Write("messages_fuzz", "response_ok", with_mode(1, r));
  Response error;
  error.name = "w";
  error.error = "allreduce 'w': shape mismatch";
  ByteWriter e;
  EncodeResponse(error, &e);
  Write("messages_fuzz", "response_error", with_mode(1, e));
  ByteWriter two;
  EncodeRequest(Allreduce("w", {2, 3}), &two);
  EncodeRequest(Allreduce("w", {2, 4}), &two);
  Write("messages_fuzz", "match_shape_mismatch", with_mode(2, two));
  Request gather;
  gather.name = "g";
  gather.kind = OpKind::kAllgather;
  gather.tensors.push_back(TensorMeta{DataType::kFloat64, {3, 2}});
  Request gather2 = gather;
  gather2.tensors[0].shape = {5, 2};
  ByteWriter ag;
  EncodeRequest(gather, &ag);
  EncodeRequest(gather2, &ag);
  Write("messages_fuzz", "match_allgather", with_mode(2, ag));
}

void Plans() {
  sched::Plan plan;
  plan.planner = "deft";
  plan.model = "mlp";
  plan.staleness = 1;
  plan.budget_used = 0.25;
  sched::Bucket a;
  a.slices.push_back(sched::TensorSlice{0, "fc1.weight", 0, 1000});
  a.slices.push_back(sched::TensorSlice{1, "fc1.bias", 0, 10});
  a.bytes = 4040;
  sched::Bucket b;
  b.op = sched::Collective::kReduceScatter;
  b.channel = 1;
  b.window = sched::Window::kNextForward;
  b.delay = 1;
  b.lag = 1;
  b.period = 2;
  b.phase = 1;
  b.compressor = "fp16";
  b.ratio = 0.5;
  b.slices.push_back(sched::TensorSlice{2, "fc2.weight", 500, 500});
  b.bytes = 2000;
  plan.buckets = {a, b};
  Write("plan_fuzz", "two_buckets", plan.Serialize());
  Write("plan_fuzz", "empty", sched::Plan().Serialize());
}

void Snapshots() {
  compress::ResidualMemory memory("topk:ratio=0.5");
  absl::StatusOr<compress::ResidualState*> state = memory.Get(7, 4);
  if (state.ok()) {
    (*state)->residual()[1] = 0.25f;
    (*state)->aux() = {1.0f, 2.0f};
  }
  ByteWriter out;
  out.PutString("overlap-residuals-v1");
  out.PutI64(1);
  out.PutString("topk:ratio=0.5");
  out.PutString(memory.Save());
  out.PutI64s({7, 3});
  Write("compression_snapshot_fuzz", "one_config", out.bytes());
  ByteWriter empty;
  empty.PutString("overlap-residuals-v1");
  empty.PutI64(0);
  Write("compression_snapshot_fuzz", "empty", empty.bytes());
}

// plan_checkpoint_test's sample (a deft plan holding a residual and a result), and the same plan
// before its first pass.
void PlanCheckpoints() {
  PlanCheckpoint c = SamplePlanCheckpoint();
  Write("plan_checkpoint_fuzz", "deft_two_buckets", EncodePlanCheckpoint(c));
  c.state = PlanDelays::State{};
  c.state.residuals.resize(2);
  Write("plan_checkpoint_fuzz", "fresh", EncodePlanCheckpoint(c));
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  overlap::dir = argv[1];
  overlap::Messages();
  overlap::Plans();
  overlap::Snapshots();
  overlap::PlanCheckpoints();
  return 0;
}
