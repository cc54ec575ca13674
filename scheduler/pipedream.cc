#include "scheduler/pipedream.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <queue>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace overlap::sched {
namespace {

bool ParseNodeId(absl::string_view token, int* id) {
  token = absl::StripAsciiWhitespace(token);
  if (!absl::ConsumePrefix(&token, "node")) {
    return false;
  }
  return absl::SimpleAtoi(token, id) && *id >= 0;
}

// Parses "key=value, key=value, ..." into the node's numeric fields.
absl::Status ParseMetrics(absl::string_view text, PipeDreamNode* node) {
  int seen = 0;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    double value = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(kv.second), &value) || !std::isfinite(value) ||
        value < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad value for ", key));
    }
    if (key == "forward_compute_time") {
      node->forward_ms = value;
    } else if (key == "backward_compute_time") {
      node->backward_ms = value;
    } else if (key == "activation_size") {
      node->activation_bytes = value;
    } else if (key == "parameter_size") {
      node->parameter_bytes = value;
    } else {
      continue;  // tolerate metrics added by later PipeDream versions
    }
    ++seen;
  }
  if (seen != 4) {
    return absl::InvalidArgumentError("expected the four metrics of a node line");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PipeDreamNode>> ParsePipeDreamGraph(absl::string_view text,
                                                               absl::string_view source) {
  std::map<int, PipeDreamNode> nodes;
  std::vector<std::pair<int, int>> edges;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) {
      continue;
    }
    auto error = [&](absl::string_view cause) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": ", cause));
    };
    std::vector<absl::string_view> parts = absl::StrSplit(line, " -- ");
    if (parts.size() == 2) {
      int from = 0, to = 0;
      if (!ParseNodeId(parts[0], &from) || !ParseNodeId(parts[1], &to)) {
        return error("edge must read 'nodeA -- nodeB'");
      }
      edges.emplace_back(from, to);
      continue;
    }
    if (parts.size() != 3) {
      return error("expected 'nodeN -- <layer> -- <metrics>' or an edge");
    }
    PipeDreamNode node;
    if (!ParseNodeId(parts[0], &node.id)) {
      return error("node name must be nodeN");
    }
    node.description = std::string(parts[1]);
    absl::Status status = ParseMetrics(parts[2], &node);
    if (!status.ok()) {
      return error(status.message());
    }
    if (!nodes.emplace(node.id, node).second) {
      return error(absl::StrCat("duplicate node", node.id));
    }
  }
  if (nodes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no nodes"));
  }
  std::map<int, std::vector<int>> out;
  std::map<int, int> indegree;
  for (const auto& [id, node] : nodes) {
    indegree[id] = 0;
  }
  for (const auto& [from, to] : edges) {
    if (!nodes.count(from) || !nodes.count(to)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": edge node", from, " -- node", to, " names an unknown node"));
    }
    out[from].push_back(to);
    ++indegree[to];
  }
  // Kahn's algorithm with the smallest ready node id first: deterministic and close to the
  // file's numbering, which PipeDream assigns in module-construction order.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (const auto& [id, degree] : indegree) {
    if (degree == 0) {
      ready.push(id);
    }
  }
  std::vector<PipeDreamNode> order;
  while (!ready.empty()) {
    const int id = ready.top();
    ready.pop();
    order.push_back(nodes[id]);
    for (int next : out[id]) {
      if (--indegree[next] == 0) {
        ready.push(next);
      }
    }
  }
  if (order.size() != nodes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the layer graph has a cycle"));
  }
  return order;
}

absl::StatusOr<Profile> PipeDreamToProfile(const std::vector<PipeDreamNode>& nodes,
                                           absl::string_view model, double update_ms) {
  Profile profile;
  profile.model = std::string(model);
  profile.update_ms = update_ms;
  for (const PipeDreamNode& node : nodes) {
    const std::string type(node.description.substr(0, node.description.find('(')));
    const std::string name = absl::StrCat("node", node.id, ".", type);
    const bool is_input = type == "Input";
    std::vector<std::pair<std::string, int64_t>> tensors;
    const int64_t bytes = std::llround(node.parameter_bytes);
    if (bytes > 0) {
      tensors.emplace_back(name, bytes);
    }
    profile.AddLayer(name, is_input ? 0.0 : node.forward_ms, node.backward_ms, tensors);
  }
  absl::Status status = profile.Finalize();
  if (!status.ok()) {
    return status;
  }
  return profile;
}

}  // namespace overlap::sched
