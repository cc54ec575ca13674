// What ranks tell each other during negotiation, and its byte encoding.
//
// A Request is one rank's description of one named operation; rank 0 compares the requests of
// all ranks for a name and answers with a Response (the agreed operation, or an error). Responses
// that succeed get a cache id: later submissions with an identical request are announced by
// setting bit <cache id> in a bit vector instead of resending the request.
#ifndef OVERLAP_RUNTIME_NEGOTIATION_MESSAGES_H_
#define OVERLAP_RUNTIME_NEGOTIATION_MESSAGES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/device.h"
#include "collectives/dtype.h"

namespace overlap {

enum class OpKind : int32_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kReduceScatter = 3,
  kAlltoall = 4,
  kBarrier = 5,
  kJoin = 6,
};

const char* OpKindName(OpKind kind);

struct TensorMeta {
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;

  int64_t NumElements() const;
  bool operator==(const TensorMeta& o) const { return dtype == o.dtype && shape == o.shape; }
};

struct Request {
  std::string name;
  OpKind kind = OpKind::kAllreduce;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  std::vector<TensorMeta> tensors;   // more than one for a grouped allreduce
  std::vector<int64_t> splits;       // alltoall: rows sent to each rank
  std::string compression = "none";  // allreduce: canonical compressor configuration
  // Where the tensors live (the kind only: rank r may use cuda:r). Every rank must agree, since
  // the kind picks the data plane and executor that move the bytes.
  DeviceKind device = DeviceKind::kCpu;
  // Allreduce with a delayed update or period (runtime/planes/delay_line.h): "delay d, period p, phase
  // f"; empty otherwise. Every rank must agree, or they would reduce different steps together.
  std::string update_schedule;
  // Allreduce: a gradient a delayed plan may deliver late (AllreduceOptions::plan_may_delay).
  // Every rank must agree, or one rank's plan would delay what another's program reads at once.
  bool plan_may_delay = false;

  bool operator==(const Request& o) const;
};

struct Response {
  std::string name;
  int32_t cache_id = -1;  // -1 when not cached (errors, barriers)
  std::string error;      // non-empty: the operation failed on every rank that submitted it
  Request request;        // the agreed operation (rank 0's copy)
  // Allgather: every rank's first dimension. Alltoall: the size x size matrix of rows sent,
  // row-major by sending rank.
  std::vector<int64_t> rank_rows;
};

// Byte encoding, little-endian as laid out in memory (every rank runs the same binary).
class ByteWriter {
 public:
  void PutI32(int32_t v) { PutRaw(&v, sizeof(v)); }
  void PutI64(int64_t v) { PutRaw(&v, sizeof(v)); }
  void PutF64(double v) { PutRaw(&v, sizeof(v)); }
  void PutString(absl::string_view s);
  void PutI64s(const std::vector<int64_t>& v);
  void PutRaw(const void* data, size_t size);
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

// Reads what ByteWriter wrote; every getter fails with DataLoss instead of reading past the end.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view bytes) : bytes_(bytes) {}
  absl::Status GetI32(int32_t* v) { return GetRaw(v, sizeof(*v)); }
  absl::Status GetI64(int64_t* v) { return GetRaw(v, sizeof(*v)); }
  absl::Status GetF64(double* v) { return GetRaw(v, sizeof(*v)); }
  absl::Status GetString(std::string* s);
  absl::Status GetI64s(std::vector<int64_t>* v);
  absl::Status GetRaw(void* out, size_t size);
  bool done() const { return pos_ == bytes_.size(); }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  absl::string_view bytes_;
  size_t pos_ = 0;
};

void EncodeRequest(const Request& request, ByteWriter* out);
absl::Status DecodeRequest(ByteReader* in, Request* request);
void EncodeResponse(const Response& response, ByteWriter* out);
absl::Status DecodeResponse(ByteReader* in, Response* response);

// "[128,784]".
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_NEGOTIATION_MESSAGES_H_
