#include "scheduler/profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "scheduler/json_util.h"

namespace overlap::sched {

using nlohmann::json;

void Profile::AddLayer(absl::string_view name, double fwd_ms, double bwd_ms,
                       const std::vector<std::pair<std::string, int64_t>>& new_tensors) {
  LayerInfo layer;
  layer.name = std::string(name);
  layer.forward_ms = fwd_ms;
  layer.backward_ms = bwd_ms;
  for (const auto& [tensor_name, bytes] : new_tensors) {
    TensorInfo tensor;
    tensor.name = tensor_name;
    tensor.bytes = bytes;
    tensor.layer = static_cast<int>(layers.size());
    layer.tensors.push_back(static_cast<int>(tensors.size()));
    tensors.push_back(std::move(tensor));
  }
  layers.push_back(std::move(layer));
}

namespace {

bool ValidTime(double ms) { return std::isfinite(ms) && ms >= 0; }

}  // namespace

absl::Status Profile::Finalize() {
  if (!ValidTime(update_ms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile '", model, "': update_ms must be finite and >= 0, got ", update_ms));
  }
  if (!ValidTime(optimizer_ms)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile '", model, "': optimizer_ms must be finite and >= 0, got ", optimizer_ms));
  }
  if (tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile '", model, "' has no tensors: nothing to communicate"));
  }
  std::set<std::string> names;
  forward_ms = 0;
  backward_ms = 0;
  total_bytes = 0;
  std::vector<double> first_use(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerInfo& layer = layers[i];
    if (!ValidTime(layer.forward_ms) || !ValidTime(layer.backward_ms)) {
      return absl::InvalidArgumentError(
          absl::StrCat("profile '", model, "' layers[", i, "] '", layer.name,
                       "': forward_ms and backward_ms must be finite and >= 0"));
    }
    first_use[i] = forward_ms;
    forward_ms += layer.forward_ms;
    backward_ms += layer.backward_ms;
  }
  // Backward runs in reverse, so layer i's gradient is ready after layers n-1..i.
  std::vector<double> ready(layers.size());
  double t = 0;
  for (size_t i = layers.size(); i-- > 0;) {
    t += layers[i].backward_ms;
    ready[i] = t;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorInfo& tensor = tensors[i];
    const std::string where =
        absl::StrCat("profile '", model, "' tensors[", i, "] '", tensor.name, "'");
    if (tensor.name.empty()) {
      return absl::InvalidArgumentError(where + ": empty name");
    }
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(where + ": duplicate tensor name");
    }
    if (tensor.layer < 0 || tensor.layer >= static_cast<int>(layers.size())) {
      return absl::InvalidArgumentError(where + ": layer index out of range");
    }
    const int64_t elem = static_cast<int64_t>(DataTypeSize(tensor.dtype));
    if (elem == 0) {
      return absl::InvalidArgumentError(where + ": unknown dtype");
    }
    if (tensor.bytes <= 0 || tensor.bytes % elem != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": bytes must be > 0 and a multiple of ", elem, " (",
                       DataTypeName(tensor.dtype), "), got ", tensor.bytes));
    }
    tensor.ready_ms = ready[tensor.layer];
    tensor.first_use_ms = first_use[tensor.layer];
    total_bytes += tensor.bytes;
  }
  return absl::OkStatus();
}

std::string Profile::ToJson() const {
  json out;
  out["model"] = model;
  out["update_ms"] = update_ms;
  if (optimizer_ms > 0) out["optimizer_ms"] = optimizer_ms;
  out["layers"] = json::array();
  for (const LayerInfo& layer : layers) {
    json l;
    l["name"] = layer.name;
    l["forward_ms"] = layer.forward_ms;
    l["backward_ms"] = layer.backward_ms;
    l["tensors"] = json::array();
    for (int t : layer.tensors) {
      json tj;
      tj["name"] = tensors[t].name;
      tj["bytes"] = tensors[t].bytes;
      if (tensors[t].dtype != DataType::kFloat32) {
        tj["dtype"] = DataTypeName(tensors[t].dtype);
      }
      if (!tensors[t].may_delay) tj["may_delay"] = false;
      if (tensors[t].looks_ahead) tj["looks_ahead"] = true;
      l["tensors"].push_back(tj);
    }
    out["layers"].push_back(l);
  }
  // Names are bytes from the program (or another rank): ones that are not UTF-8 are printed
  // with U+FFFD instead of making dump() throw.
  return out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

absl::StatusOr<Profile> ParseProfileJson(absl::string_view text, absl::string_view source) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not valid JSON (", JsonErrorLocation(text), ")"));
  }
  JsonReader reader(source);
  Profile profile;
  if (!root.is_object()) {
    return reader.Error("", "top level must be an object");
  }
  auto model = reader.String(root, "model");
  if (!model.ok()) {
    return model.status();
  }
  profile.model = *model;
  auto update = reader.Number(root, "update_ms");
  if (!update.ok()) {
    return update.status();
  }
  profile.update_ms = *update;
  if (root.contains("optimizer_ms")) {
    auto optimizer = reader.Number(root, "optimizer_ms");
    if (!optimizer.ok()) return optimizer.status();
    profile.optimizer_ms = *optimizer;
  }
  auto layers = reader.Array(root, "layers");
  if (!layers.ok()) {
    return layers.status();
  }
  for (size_t i = 0; i < (*layers)->size(); ++i) {
    const json& lj = (**layers)[i];
    const std::string lpath = absl::StrCat("layers[", i, "]");
    if (!lj.is_object()) {
      return reader.Error(lpath, "must be an object");
    }
    JsonReader lr(source, lpath);
    auto name = lr.String(lj, "name");
    if (!name.ok()) {
      return name.status();
    }
    auto fwd = lr.Number(lj, "forward_ms");
    if (!fwd.ok()) {
      return fwd.status();
    }
    auto bwd = lr.Number(lj, "backward_ms");
    if (!bwd.ok()) {
      return bwd.status();
    }
    auto tensors = lr.Array(lj, "tensors");
    if (!tensors.ok()) {
      return tensors.status();
    }
    std::vector<std::pair<std::string, int64_t>> list;
    std::vector<DataType> dtypes;
    std::vector<bool> may_delay, looks_ahead;
    for (size_t j = 0; j < (*tensors)->size(); ++j) {
      const json& tj = (**tensors)[j];
      const std::string tpath = absl::StrCat(lpath, ".tensors[", j, "]");
      if (!tj.is_object()) {
        return reader.Error(tpath, "must be an object");
      }
      JsonReader tr(source, tpath);
      auto tname = tr.String(tj, "name");
      if (!tname.ok()) {
        return tname.status();
      }
      auto bytes = tr.Integer(tj, "bytes");
      if (!bytes.ok()) {
        return bytes.status();
      }
      DataType dtype = DataType::kFloat32;
      if (tj.contains("dtype")) {
        auto dname = tr.String(tj, "dtype");
        if (!dname.ok()) {
          return dname.status();
        }
        absl::Status s = ParseDataType(*dname, &dtype);
        if (!s.ok()) {
          return tr.Error("dtype", s.message());
        }
      }
      for (const char* flag : {"may_delay", "looks_ahead"}) {
        if (tj.contains(flag) && !tj[flag].is_boolean()) {
          return tr.Error(flag, "must be true or false");
        }
      }
      list.emplace_back(*tname, *bytes);
      dtypes.push_back(dtype);
      may_delay.push_back(!tj.contains("may_delay") || tj["may_delay"].get<bool>());
      looks_ahead.push_back(tj.contains("looks_ahead") && tj["looks_ahead"].get<bool>());
    }
    const size_t first = profile.tensors.size();
    profile.AddLayer(*name, *fwd, *bwd, list);
    for (size_t j = 0; j < dtypes.size(); ++j) {
      profile.tensors[first + j].dtype = dtypes[j];
      profile.tensors[first + j].may_delay = may_delay[j];
      profile.tensors[first + j].looks_ahead = looks_ahead[j];
    }
  }
  absl::Status status = profile.Finalize();
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", status.message()));
  }
  return profile;
}

absl::StatusOr<Profile> LoadProfileJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open profile file"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseProfileJson(buffer.str(), path);
}

double SynchronousBoundMs(const Profile& profile, double comm_ms) {
  double last_first_use = 0;
  double first_ready = profile.backward_ms;
  for (const TensorInfo& t : profile.tensors) {
    last_first_use = std::max(last_first_use, t.first_use_ms);
    first_ready = std::min(first_ready, t.ready_ms);
  }
  const double unhidden = (profile.forward_ms - last_first_use) + first_ready;
  return std::max(profile.compute_ms(), comm_ms + unhidden);
}

}  // namespace overlap::sched
