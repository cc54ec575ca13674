// The 161 trainable parameters of ResNet-50 (torchvision.models.resnet50), in the order of
// named_parameters(): the order forward meets them; backward produces gradients in reverse.
//
// Source: the torchvision architecture (He et al., "Deep Residual Learning", 2016): a 7x7 stem
// convolution and batch norm, then four stages of 3, 4, 6 and 3 bottleneck blocks (1x1, 3x3, 1x1
// convolutions, each followed by a batch norm with weight and bias, output width 4x the block's
// width; the first block of each stage has a 1x1 convolution plus batch norm on its shortcut),
// then a 2048 x 1000 linear layer with bias. Convolutions have no bias. The total, 25,557,032
// elements (102,228,128 fp32 bytes), equals the sum of parameter_size over the 107 layers of
// ../shared/profiles/pipedream/resnet50.txt (PipeDream's measured profile), checked below.
#ifndef OVERLAP_BENCH_RESNET50_TENSORS_H_
#define OVERLAP_BENCH_RESNET50_TENSORS_H_

#include <array>
#include <cstdint>

namespace overlap {
namespace bench {

struct ParameterShape {
  const char* name;
  int64_t dims[4];
  int rank;

  constexpr int64_t NumElements() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
};

inline constexpr std::array<ParameterShape, 161> kResNet50Parameters = {{
    {"conv1.weight", {64, 3, 7, 7}, 4},
    {"bn1.weight", {64}, 1},
    {"bn1.bias", {64}, 1},
    {"layer1.0.conv1.weight", {64, 64, 1, 1}, 4},
    {"layer1.0.bn1.weight", {64}, 1},
    {"layer1.0.bn1.bias", {64}, 1},
    {"layer1.0.conv2.weight", {64, 64, 3, 3}, 4},
    {"layer1.0.bn2.weight", {64}, 1},
    {"layer1.0.bn2.bias", {64}, 1},
    {"layer1.0.conv3.weight", {256, 64, 1, 1}, 4},
    {"layer1.0.bn3.weight", {256}, 1},
    {"layer1.0.bn3.bias", {256}, 1},
    {"layer1.0.downsample.0.weight", {256, 64, 1, 1}, 4},
    {"layer1.0.downsample.1.weight", {256}, 1},
    {"layer1.0.downsample.1.bias", {256}, 1},
    {"layer1.1.conv1.weight", {64, 256, 1, 1}, 4},
    {"layer1.1.bn1.weight", {64}, 1},
    {"layer1.1.bn1.bias", {64}, 1},
    {"layer1.1.conv2.weight", {64, 64, 3, 3}, 4},
    {"layer1.1.bn2.weight", {64}, 1},
    {"layer1.1.bn2.bias", {64}, 1},
    {"layer1.1.conv3.weight", {256, 64, 1, 1}, 4},
    {"layer1.1.bn3.weight", {256}, 1},
    {"layer1.1.bn3.bias", {256}, 1},
    {"layer1.2.conv1.weight", {64, 256, 1, 1}, 4},
    {"layer1.2.bn1.weight", {64}, 1},
    {"layer1.2.bn1.bias", {64}, 1},
    {"layer1.2.conv2.weight", {64, 64, 3, 3}, 4},
    {"layer1.2.bn2.weight", {64}, 1},
    {"layer1.2.bn2.bias", {64}, 1},
    {"layer1.2.conv3.weight", {256, 64, 1, 1}, 4},
    {"layer1.2.bn3.weight", {256}, 1},
    {"layer1.2.bn3.bias", {256}, 1},
    {"layer2.0.conv1.weight", {128, 256, 1, 1}, 4},
    {"layer2.0.bn1.weight", {128}, 1},
    {"layer2.0.bn1.bias", {128}, 1},
    {"layer2.0.conv2.weight", {128, 128, 3, 3}, 4},
    {"layer2.0.bn2.weight", {128}, 1},
    {"layer2.0.bn2.bias", {128}, 1},
    {"layer2.0.conv3.weight", {512, 128, 1, 1}, 4},
    {"layer2.0.bn3.weight", {512}, 1},
    {"layer2.0.bn3.bias", {512}, 1},
    {"layer2.0.downsample.0.weight", {512, 256, 1, 1}, 4},
    {"layer2.0.downsample.1.weight", {512}, 1},
    {"layer2.0.downsample.1.bias", {512}, 1},
    {"layer2.1.conv1.weight", {128, 512, 1, 1}, 4},
    {"layer2.1.bn1.weight", {128}, 1},
    {"layer2.1.bn1.bias", {128}, 1},
    {"layer2.1.conv2.weight", {128, 128, 3, 3}, 4},
    {"layer2.1.bn2.weight", {128}, 1},
    {"layer2.1.bn2.bias", {128}, 1},
    {"layer2.1.conv3.weight", {512, 128, 1, 1}, 4},
    {"layer2.1.bn3.weight", {512}, 1},
    {"layer2.1.bn3.bias", {512}, 1},
    {"layer2.2.conv1.weight", {128, 512, 1, 1}, 4},
    {"layer2.2.bn1.weight", {128}, 1},
    {"layer2.2.bn1.bias", {128}, 1},
    {"layer2.2.conv2.weight", {128, 128, 3, 3}, 4},
    {"layer2.2.bn2.weight", {128}, 1},
    {"layer2.2.bn2.bias", {128}, 1},
    {"layer2.2.conv3.weight", {512, 128, 1, 1}, 4},
    {"layer2.2.bn3.weight", {512}, 1},
    {"layer2.2.bn3.bias", {512}, 1},
    {"layer2.3.conv1.weight", {128, 512, 1, 1}, 4},
    {"layer2.3.bn1.weight", {128}, 1},
    {"layer2.3.bn1.bias", {128}, 1},
    {"layer2.3.conv2.weight", {128, 128, 3, 3}, 4},
    {"layer2.3.bn2.weight", {128}, 1},
    {"layer2.3.bn2.bias", {128}, 1},
    {"layer2.3.conv3.weight", {512, 128, 1, 1}, 4},
    {"layer2.3.bn3.weight", {512}, 1},
    {"layer2.3.bn3.bias", {512}, 1},
    {"layer3.0.conv1.weight", {256, 512, 1, 1}, 4},
    {"layer3.0.bn1.weight", {256}, 1},
    {"layer3.0.bn1.bias", {256}, 1},
    {"layer3.0.conv2.weight", {256, 256, 3, 3}, 4},
    {"layer3.0.bn2.weight", {256}, 1},
    {"layer3.0.bn2.bias", {256}, 1},
    {"layer3.0.conv3.weight", {1024, 256, 1, 1}, 4},
    {"layer3.0.bn3.weight", {1024}, 1},
    {"layer3.0.bn3.bias", {1024}, 1},
    {"layer3.0.downsample.0.weight", {1024, 512, 1, 1}, 4},
    {"layer3.0.downsample.1.weight", {1024}, 1},
    {"layer3.0.downsample.1.bias", {1024}, 1},
    {"layer3.1.conv1.weight", {256, 1024, 1, 1}, 4},
    {"layer3.1.bn1.weight", {256}, 1},
    {"layer3.1.bn1.bias", {256}, 1},
    {"layer3.1.conv2.weight", {256, 256, 3, 3}, 4},
    {"layer3.1.bn2.weight", {256}, 1},
    {"layer3.1.bn2.bias", {256}, 1},
    {"layer3.1.conv3.weight", {1024, 256, 1, 1}, 4},
    {"layer3.1.bn3.weight", {1024}, 1},
    {"layer3.1.bn3.bias", {1024}, 1},
    {"layer3.2.conv1.weight", {256, 1024, 1, 1}, 4},
    {"layer3.2.bn1.weight", {256}, 1},
    {"layer3.2.bn1.bias", {256}, 1},
    {"layer3.2.conv2.weight", {256, 256, 3, 3}, 4},
    {"layer3.2.bn2.weight", {256}, 1},
    {"layer3.2.bn2.bias", {256}, 1},
    {"layer3.2.conv3.weight", {1024, 256, 1, 1}, 4},
    {"layer3.2.bn3.weight", {1024}, 1},
    {"layer3.2.bn3.bias", {1024}, 1},
    {"layer3.3.conv1.weight", {256, 1024, 1, 1}, 4},
    {"layer3.3.bn1.weight", {256}, 1},
    {"layer3.3.bn1.bias", {256}, 1},
    {"layer3.3.conv2.weight", {256, 256, 3, 3}, 4},
    {"layer3.3.bn2.weight", {256}, 1},
    {"layer3.3.bn2.bias", {256}, 1},
    {"layer3.3.conv3.weight", {1024, 256, 1, 1}, 4},
    {"layer3.3.bn3.weight", {1024}, 1},
    {"layer3.3.bn3.bias", {1024}, 1},
    {"layer3.4.conv1.weight", {256, 1024, 1, 1}, 4},
    {"layer3.4.bn1.weight", {256}, 1},
    {"layer3.4.bn1.bias", {256}, 1},
    {"layer3.4.conv2.weight", {256, 256, 3, 3}, 4},
    {"layer3.4.bn2.weight", {256}, 1},
    {"layer3.4.bn2.bias", {256}, 1},
    {"layer3.4.conv3.weight", {1024, 256, 1, 1}, 4},
    {"layer3.4.bn3.weight", {1024}, 1},
    {"layer3.4.bn3.bias", {1024}, 1},
    {"layer3.5.conv1.weight", {256, 1024, 1, 1}, 4},
    {"layer3.5.bn1.weight", {256}, 1},
    {"layer3.5.bn1.bias", {256}, 1},
    {"layer3.5.conv2.weight", {256, 256, 3, 3}, 4},
    {"layer3.5.bn2.weight", {256}, 1},
    {"layer3.5.bn2.bias", {256}, 1},
    {"layer3.5.conv3.weight", {1024, 256, 1, 1}, 4},
    {"layer3.5.bn3.weight", {1024}, 1},
    {"layer3.5.bn3.bias", {1024}, 1},
    {"layer4.0.conv1.weight", {512, 1024, 1, 1}, 4},
    {"layer4.0.bn1.weight", {512}, 1},
    {"layer4.0.bn1.bias", {512}, 1},
    {"layer4.0.conv2.weight", {512, 512, 3, 3}, 4},
    {"layer4.0.bn2.weight", {512}, 1},
    {"layer4.0.bn2.bias", {512}, 1},
    {"layer4.0.conv3.weight", {2048, 512, 1, 1}, 4},
    {"layer4.0.bn3.weight", {2048}, 1},
    {"layer4.0.bn3.bias", {2048}, 1},
    {"layer4.0.downsample.0.weight", {2048, 1024, 1, 1}, 4},
    {"layer4.0.downsample.1.weight", {2048}, 1},
    {"layer4.0.downsample.1.bias", {2048}, 1},
    {"layer4.1.conv1.weight", {512, 2048, 1, 1}, 4},
    {"layer4.1.bn1.weight", {512}, 1},
    {"layer4.1.bn1.bias", {512}, 1},
    {"layer4.1.conv2.weight", {512, 512, 3, 3}, 4},
    {"layer4.1.bn2.weight", {512}, 1},
    {"layer4.1.bn2.bias", {512}, 1},
    {"layer4.1.conv3.weight", {2048, 512, 1, 1}, 4},
    {"layer4.1.bn3.weight", {2048}, 1},
    {"layer4.1.bn3.bias", {2048}, 1},
    {"layer4.2.conv1.weight", {512, 2048, 1, 1}, 4},
    {"layer4.2.bn1.weight", {512}, 1},
    {"layer4.2.bn1.bias", {512}, 1},
    {"layer4.2.conv2.weight", {512, 512, 3, 3}, 4},
    {"layer4.2.bn2.weight", {512}, 1},
    {"layer4.2.bn2.bias", {512}, 1},
    {"layer4.2.conv3.weight", {2048, 512, 1, 1}, 4},
    {"layer4.2.bn3.weight", {2048}, 1},
    {"layer4.2.bn3.bias", {2048}, 1},
    {"fc.weight", {1000, 2048}, 2},
    {"fc.bias", {1000}, 1},
}};

constexpr int64_t TotalElements() {
  int64_t total = 0;
  for (const ParameterShape& p : kResNet50Parameters) total += p.NumElements();
  return total;
}

inline constexpr int64_t kResNet50TotalElements = TotalElements();
static_assert(kResNet50TotalElements == 25557032,
              "ResNet-50 has 25,557,032 parameters (torchvision; PipeDream profile total)");

}  // namespace bench
}  // namespace overlap

#endif  // OVERLAP_BENCH_RESNET50_TENSORS_H_
