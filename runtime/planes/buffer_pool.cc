// Reusable plan buffers (buffer_pool.h states the contract).
#include "runtime/planes/buffer_pool.h"

namespace overlap {

BufferPool::Buffer BufferPool::Take(int64_t slot, size_t bytes) {
  std::vector<Buffer>& kept = slots_[slot];
  for (const Buffer& buffer : kept) {
    // use_count() == 1: only the pool refers to it. The owner thread is the only one that copies
    // these shared_ptrs, so the count cannot rise between this test and the return.
    if (buffer.use_count() == 1 && buffer->size() == bytes) return buffer;
  }
  auto fresh = std::make_shared<std::vector<uint8_t>>(bytes);
  if (kept.size() < max_per_slot_) {
    kept.push_back(fresh);
    held_bytes_ += static_cast<int64_t>(bytes);
  }
  return fresh;
}

void BufferPool::Clear() {
  slots_.clear();
  held_bytes_ = 0;
}

}  // namespace overlap
