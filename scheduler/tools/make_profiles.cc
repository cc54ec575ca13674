// Regenerates the bundled profiles:
//   bazel run //scheduler:make_profiles -- $PWD/scheduler/profiles
// Reads <dir>/pipedream/{resnet50,resnet101,vgg16}.txt, fits the FLOP-model calibration on
// resnet50 and vgg16 (batch 128), writes <dir>/<model>.json for the three CNNs and the four
// transformers, and prints the calibration for scheduler/profiles/README.md.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "scheduler/model_zoo.h"
#include "scheduler/pipedream.h"

namespace {

using overlap::sched::BuildTransformerProfile;
using overlap::sched::CalibrateOnPipeDream;
using overlap::sched::ParsePipeDreamGraph;
using overlap::sched::PipeDreamNode;
using overlap::sched::PipeDreamToProfile;
using overlap::sched::Profile;
using overlap::sched::TransformerConfig;
using overlap::sched::TransformerPresets;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "make_profiles: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_profiles <scheduler/profiles directory>\n");
    return 2;
  }
  const std::string dir = argv[1];
  constexpr int kBatch = 128;  // PipeDream's image-model batch size
  std::vector<std::vector<PipeDreamNode>> calibration_graphs;
  std::vector<std::pair<std::string, std::vector<PipeDreamNode>>> graphs;
  for (const char* model : {"resnet50", "resnet101", "vgg16"}) {
    const std::string path = absl::StrCat(dir, "/pipedream/", model, ".txt");
    std::ifstream in(path);
    if (!in) {
      return Fail(absl::NotFoundError(absl::StrCat(path, ": cannot open")));
    }
    std::stringstream text;
    text << in.rdbuf();
    auto nodes = ParsePipeDreamGraph(text.str(), path);
    if (!nodes.ok()) {
      return Fail(nodes.status());
    }
    if (std::string(model) != "resnet101") {
      calibration_graphs.push_back(*nodes);
    }
    graphs.emplace_back(model, *nodes);
  }
  auto calibration = CalibrateOnPipeDream(calibration_graphs, kBatch);
  if (!calibration.ok()) {
    return Fail(calibration.status());
  }
  std::printf(
      "matmul forward %.3f TFLOP/s, backward %.3f TFLOP/s; elementwise forward %.4f "
      "ms/GB, backward %.4f ms/GB\n",
      calibration->matmul_forward_tflops, calibration->matmul_backward_tflops,
      calibration->elementwise_forward_ms_per_gb, calibration->elementwise_backward_ms_per_gb);
  std::vector<Profile> profiles;
  for (const auto& [model, nodes] : graphs) {
    double bytes = 0;
    for (const PipeDreamNode& n : nodes) {
      bytes += n.parameter_bytes;
    }
    auto profile =
        PipeDreamToProfile(nodes, model, calibration->UpdateMs(static_cast<int64_t>(bytes)));
    if (!profile.ok()) {
      return Fail(profile.status());
    }
    profiles.push_back(*profile);
  }
  for (const TransformerConfig& config : TransformerPresets()) {
    auto profile = BuildTransformerProfile(config, *calibration);
    if (!profile.ok()) {
      return Fail(profile.status());
    }
    profiles.push_back(*profile);
  }
  for (const Profile& p : profiles) {
    const std::string path = absl::StrCat(dir, "/", p.model, ".json");
    std::ofstream out(path);
    out << p.ToJson();
    if (!out) {
      return Fail(absl::InternalError(absl::StrCat(path, ": write failed")));
    }
    std::printf(
        "%-12s forward %8.2f ms  backward %8.2f ms  update %6.2f ms  %5zu tensors  "
        "%9.2f MB\n",
        p.model.c_str(), p.forward_ms, p.backward_ms, p.update_ms, p.tensors.size(),
        p.total_bytes / 1e6);
  }
  return 0;
}
