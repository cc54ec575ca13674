#include "scheduler/model_zoo.h"

#include <regex>

#include "absl/strings/str_cat.h"

namespace overlap::sched {

namespace {

// Forward FLOPs of a Conv2d or Linear PipeDream node; 0 for other layers.
double MatmulFlops(const PipeDreamNode& node, int batch) {
  static const std::regex conv(
      R"(Conv2d\((\d+), (\d+), kernel_size=\((\d+), (\d+)\)(.*groups=(\d+))?)");
  static const std::regex linear(R"(Linear\(in_features=(\d+), out_features=(\d+))");
  std::smatch m;
  if (std::regex_search(node.description, m, conv)) {
    const double in = std::stod(m[1]), out = std::stod(m[2]);
    const double k = std::stod(m[3]) * std::stod(m[4]);
    const double groups = m[6].matched ? std::stod(m[6]) : 1.0;
    const double output_pixels = node.activation_bytes / (4.0 * batch * out);
    return 2.0 * batch * output_pixels * out * (in / groups) * k;
  }
  if (std::regex_search(node.description, m, linear)) {
    return 2.0 * batch * std::stod(m[1]) * std::stod(m[2]);
  }
  return 0;
}

bool IsElementwise(const std::string& description) {
  for (const char* type : {"ReLU(", "BatchNorm2d(", "Add(", "Dropout("}) {
    if (description.rfind(type, 0) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<Calibration> CalibrateOnPipeDream(
    const std::vector<std::vector<PipeDreamNode>>& graphs, int batch) {
  double flops = 0, mm_fwd_ms = 0, mm_bwd_ms = 0;
  double ew_bytes = 0, ew_fwd_ms = 0, ew_bwd_ms = 0;
  for (const auto& graph : graphs) {
    for (const PipeDreamNode& node : graph) {
      const double f = MatmulFlops(node, batch);
      if (f > 0) {
        flops += f;
        mm_fwd_ms += node.forward_ms;
        mm_bwd_ms += node.backward_ms;
      } else if (IsElementwise(node.description)) {
        ew_bytes += node.activation_bytes;
        ew_fwd_ms += node.forward_ms;
        ew_bwd_ms += node.backward_ms;
      }
    }
  }
  if (flops == 0 || mm_fwd_ms == 0 || mm_bwd_ms == 0 || ew_bytes == 0) {
    return absl::InvalidArgumentError(
        "calibration needs Conv2d/Linear and ReLU/BatchNorm2d/Add/Dropout layers with times");
  }
  Calibration c;
  c.matmul_forward_tflops = flops / (mm_fwd_ms * 1e-3) / 1e12;
  c.matmul_backward_tflops = 2 * flops / (mm_bwd_ms * 1e-3) / 1e12;
  c.elementwise_forward_ms_per_gb = ew_fwd_ms / (ew_bytes * 1e-9);
  c.elementwise_backward_ms_per_gb = ew_bwd_ms / (ew_bytes * 1e-9);
  return c;
}

std::vector<TransformerConfig> TransformerPresets() {
  return {
      {"bert-base", true, 30522, 512, 768, 12, 12, 3072, 32, 128},
      {"bert-large", true, 30522, 512, 1024, 24, 16, 4096, 32, 128},
      {"gpt2-small", false, 50257, 1024, 768, 12, 12, 3072, 8, 1024},
      {"gpt2-medium", false, 50257, 1024, 1024, 24, 16, 4096, 8, 1024},
  };
}

namespace {

// Accumulates one layer's tensors and costs, then appends it to the profile.
class LayerBuilder {
 public:
  LayerBuilder(const Calibration& c, std::string name) : c_(c), name_(std::move(name)) {}
  LayerBuilder& Param(const std::string& tensor, int64_t elements) {
    tensors_.emplace_back(tensor, 4 * elements);
    return *this;
  }
  LayerBuilder& Matmul(double forward_flops) {
    flops_ += forward_flops;
    return *this;
  }
  LayerBuilder& Elementwise(double output_elements) {
    bytes_ += 4 * output_elements;
    return *this;
  }
  void AddTo(Profile* p) const {
    const double fwd = flops_ / (c_.matmul_forward_tflops * 1e12) * 1e3 +
                       bytes_ * 1e-9 * c_.elementwise_forward_ms_per_gb;
    const double bwd = 2 * flops_ / (c_.matmul_backward_tflops * 1e12) * 1e3 +
                       bytes_ * 1e-9 * c_.elementwise_backward_ms_per_gb;
    p->AddLayer(name_, fwd, bwd, tensors_);
  }

 private:
  const Calibration& c_;
  std::string name_;
  std::vector<std::pair<std::string, int64_t>> tensors_;
  double flops_ = 0, bytes_ = 0;
};

}  // namespace

absl::StatusOr<Profile> BuildTransformerProfile(const TransformerConfig& cfg,
                                                const Calibration& c) {
  if (cfg.hidden <= 0 || cfg.layers <= 0 || cfg.heads <= 0 || cfg.batch <= 0 || cfg.sequence <= 0 ||
      cfg.vocab <= 0 || c.matmul_forward_tflops <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer '", cfg.name, "': sizes and calibration must be positive"));
  }
  Profile p;
  p.model = cfg.name;
  const double tokens = static_cast<double>(cfg.batch * cfg.sequence);
  const int64_t h = cfg.hidden, ff = cfg.intermediate;
  const double scores = static_cast<double>(cfg.batch * cfg.heads * cfg.sequence * cfg.sequence);
  const std::string emb = cfg.encoder ? "bert.embeddings." : "transformer.";
  LayerBuilder embed(c, "embeddings");
  if (cfg.encoder) {
    embed.Param(emb + "word_embeddings.weight", cfg.vocab * h)
        .Param(emb + "position_embeddings.weight", cfg.positions * h)
        .Param(emb + "token_type_embeddings.weight", 2 * h)
        .Param(emb + "LayerNorm.weight", h)
        .Param(emb + "LayerNorm.bias", h)
        .Elementwise(4 * tokens * h);  // three lookups summed, LayerNorm, dropout
  } else {
    embed.Param(emb + "wte.weight", cfg.vocab * h)
        .Param(emb + "wpe.weight", cfg.positions * h)
        .Elementwise(2 * tokens * h);
  }
  embed.AddTo(&p);
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const std::string pre = cfg.encoder ? absl::StrCat("bert.encoder.layer.", l, ".")
                                        : absl::StrCat("transformer.h.", l, ".");
    LayerBuilder attn(c, absl::StrCat("block", l, ".attention"));
    LayerBuilder mlp(c, absl::StrCat("block", l, ".mlp"));
    // Attention: QKV and output projections, scores QK^T and context AV (2 x 2 x b x heads x
    // s x s x head_dim FLOPs), softmax and dropout on the scores, residual add and LayerNorm.
    attn.Matmul(2 * tokens * 4 * h * h + 4 * scores * (static_cast<double>(h) / cfg.heads))
        .Elementwise(2 * scores + 3 * tokens * h);
    mlp.Matmul(2 * tokens * 2 * h * ff).Elementwise(tokens * ff + 3 * tokens * h);
    if (cfg.encoder) {
      for (const char* m : {"query", "key", "value"}) {
        attn.Param(absl::StrCat(pre, "attention.self.", m, ".weight"), h * h)
            .Param(absl::StrCat(pre, "attention.self.", m, ".bias"), h);
      }
      attn.Param(pre + "attention.output.dense.weight", h * h)
          .Param(pre + "attention.output.dense.bias", h)
          .Param(pre + "attention.output.LayerNorm.weight", h)
          .Param(pre + "attention.output.LayerNorm.bias", h);
      mlp.Param(pre + "intermediate.dense.weight", h * ff)
          .Param(pre + "intermediate.dense.bias", ff)
          .Param(pre + "output.dense.weight", ff * h)
          .Param(pre + "output.dense.bias", h)
          .Param(pre + "output.LayerNorm.weight", h)
          .Param(pre + "output.LayerNorm.bias", h);
    } else {
      attn.Param(pre + "ln_1.weight", h)
          .Param(pre + "ln_1.bias", h)
          .Param(pre + "attn.c_attn.weight", h * 3 * h)
          .Param(pre + "attn.c_attn.bias", 3 * h)
          .Param(pre + "attn.c_proj.weight", h * h)
          .Param(pre + "attn.c_proj.bias", h);
      mlp.Param(pre + "ln_2.weight", h)
          .Param(pre + "ln_2.bias", h)
          .Param(pre + "mlp.c_fc.weight", h * ff)
          .Param(pre + "mlp.c_fc.bias", ff)
          .Param(pre + "mlp.c_proj.weight", ff * h)
          .Param(pre + "mlp.c_proj.bias", h);
    }
    attn.AddTo(&p);
    mlp.AddTo(&p);
  }
  // Head: the vocabulary projection reuses the (tied) embedding matrix, so its FLOPs are here
  // but its gradient belongs to the embedding tensor, which is ready last.
  LayerBuilder head(c, "head");
  head.Matmul(2 * tokens * h * cfg.vocab).Elementwise(2 * tokens * cfg.vocab);
  if (cfg.encoder) {
    head.Param("bert.pooler.dense.weight", h * h)
        .Param("bert.pooler.dense.bias", h)
        .Param("cls.predictions.transform.dense.weight", h * h)
        .Param("cls.predictions.transform.dense.bias", h)
        .Param("cls.predictions.transform.LayerNorm.weight", h)
        .Param("cls.predictions.transform.LayerNorm.bias", h)
        .Param("cls.predictions.bias", cfg.vocab)
        .Matmul(2 * tokens * h * h);
  } else {
    head.Param("transformer.ln_f.weight", h).Param("transformer.ln_f.bias", h);
  }
  head.AddTo(&p);
  absl::Status status = p.Finalize();
  if (!status.ok()) {
    return status;
  }
  p.update_ms = c.UpdateMs(p.total_bytes);
  return p;
}

}  // namespace overlap::sched
