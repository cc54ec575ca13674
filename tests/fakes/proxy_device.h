// A proxy device for tests: it keeps its bytes in host memory but behaves like a GPU, so that the
// runtime's device code path (runtime/planes/device_backend.h: buffer ops on streams, a stream-ordered
// executor, fences, device-resident buffers) runs on machines without one.
//
// It reports itself as cuda:0. Work given to its buffer ops (copies, host transfers) and its
// executor's collectives is queued on a stream and runs only when something waits for it: a
// Fence's Test, a collective's Test (which runs its stream up to that collective), or a stream
// that WaitForStream joined to it. So a caller that reads a result before fencing the copy that
// writes it, or starts a collective on a buffer another stream is still packing without joining
// the streams, reads stale bytes and the test's values come out wrong. Fresh allocations are filled
// with a poison pattern (0xA5 bytes), so a buffer read before it is written shows too; and, as
// memory from cudaMallocAsync belongs to its stream from the allocation on, the allocating
// stream poisons it again when it reaches that point, so another stream that writes it without
// waiting for the allocating one loses what it wrote.
//
// With OVERLAP_TEST_PROXY_STAGED set, the backend's executor is the MPI executor staged through
// host memory (collectives/staging_executor.h), as for ranks sharing a GPU, on streams that reach
// a fence only every other time asked, at random, so copies finish in an order of their own.
//
// The executor wraps the MPI executor (one duplicated communicator per channel): each channel has
// a stream, and a collective queued there starts on MPI when its stream reaches it and finishes
// when MPI says so; the steps behind it wait, as on a GPU.
//
// Threading: the proxy's streams share one lock, so buffer ops may be used from any thread (the
// coordinator's, an adapter's), as the real ones may.
#ifndef OVERLAP_TESTS_FAKES_PROXY_DEVICE_H_
#define OVERLAP_TESTS_FAKES_PROXY_DEVICE_H_

#include <memory>

#include "runtime/planes/device_backend.h"

namespace overlap::fake {

// The proxy as a DeviceBackend, for InstallDeviceBackendForTesting.
std::unique_ptr<DeviceBackend> CreateProxyDeviceBackend();

// Buffer ops on the proxy device, on a stream of their own (for unit tests of device-neutral code).
std::unique_ptr<BufferOps> CreateProxyBufferOps();

// `inner` (a host executor) behind one proxy stream per channel: stream-ordered, as NCCL is.
std::unique_ptr<Executor> CreateProxyExecutor(std::unique_ptr<Executor> inner);

}  // namespace overlap::fake

#endif  // OVERLAP_TESTS_FAKES_PROXY_DEVICE_H_
