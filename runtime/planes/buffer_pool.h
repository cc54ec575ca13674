// BufferPool: host byte buffers that a frozen plan reuses step after step.
//
// A planned bucket packs its slices into a buffer of the same size every step. Allocating it
// afresh costs more than the copy into it: a new allocation of tens of MiB is zero-filled and
// page-faulted in, about three times the memcpy that follows, and it sits on the critical path
// between a bucket's last gradient and its collective. A pool keeps the buffers of each slot (a
// caller's key, e.g. a plan bucket) and hands one back out once nobody else holds it.
//
// Take() returns a buffer of exactly the requested size whose contents are unspecified. The pool
// keeps up to `max_per_slot` buffers per slot; past that (more in flight at once than expected),
// Take allocates one it does not keep. Buffers are shared_ptrs: a buffer is free when the pool's
// reference is the only one left, so callers release a buffer by dropping their references.
//
// Memory: the pool holds, per slot, as many buffers as were ever in use at once (at most
// max_per_slot), until Clear() or destruction; held_bytes() reports it.
//
// Threading: not thread-safe; one owner thread (the coordinator's). Buffers may be read and
// written by other threads while a caller holds a reference.
#ifndef OVERLAP_RUNTIME_PLANES_BUFFER_POOL_H_
#define OVERLAP_RUNTIME_PLANES_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace overlap {

class BufferPool {
 public:
  using Buffer = std::shared_ptr<std::vector<uint8_t>>;

  explicit BufferPool(size_t max_per_slot = 4) : max_per_slot_(max_per_slot) {}

  // A buffer of `bytes` bytes for `slot`, reused when one of that size is free.
  Buffer Take(int64_t slot, size_t bytes);

  // Forgets every kept buffer (those still referenced elsewhere stay valid until released).
  void Clear();

  // Bytes of the buffers the pool keeps, free or in use.
  int64_t held_bytes() const { return held_bytes_; }

 private:
  const size_t max_per_slot_;
  absl::flat_hash_map<int64_t, std::vector<Buffer>> slots_;
  int64_t held_bytes_ = 0;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_BUFFER_POOL_H_
