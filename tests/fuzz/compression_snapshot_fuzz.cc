// Fuzzes CompressionStage::Restore, which reads checkpointed compression state (error-feedback
// residuals per compressor configuration) back from a file. A snapshot that restores must save
// to bytes that restore again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/planes/compression_stage.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string snapshot(reinterpret_cast<const char*>(data), size);
  overlap::CompressionStage stage(/*rank=*/0, /*size=*/2);
  if (!stage.Restore(snapshot).ok()) return 0;
  const absl::StatusOr<std::string> saved = stage.Save();
  if (!saved.ok()) std::abort();  // host residuals only: nothing to copy, so never an error
  overlap::CompressionStage again(0, 2);
  if (!again.Restore(*saved).ok()) std::abort();
  const absl::StatusOr<std::string> resaved = again.Save();
  if (!resaved.ok() || *resaved != *saved) std::abort();
  return 0;
}
