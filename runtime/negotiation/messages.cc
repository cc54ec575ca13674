#include "runtime/negotiation/messages.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap {

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce:
      return "allreduce";
    case OpKind::kAllgather:
      return "allgather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduceScatter:
      return "reducescatter";
    case OpKind::kAlltoall:
      return "alltoall";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kJoin:
      return "join";
  }
  return "unknown";
}

int64_t TensorMeta::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Request::operator==(const Request& o) const {
  return name == o.name && kind == o.kind && op == o.op && prescale == o.prescale &&
         postscale == o.postscale && root == o.root && tensors == o.tensors && splits == o.splits &&
         compression == o.compression && device == o.device &&
         update_schedule == o.update_schedule && plan_may_delay == o.plan_may_delay;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

void ByteWriter::PutRaw(const void* data, size_t size) {
  if (size == 0) return;  // an empty vector's data() may be null, which append must not get
  bytes_.append(static_cast<const char*>(data), size);
}

void ByteWriter::PutString(absl::string_view s) {
  PutI64(static_cast<int64_t>(s.size()));
  PutRaw(s.data(), s.size());
}

void ByteWriter::PutI64s(const std::vector<int64_t>& v) {
  PutI64(static_cast<int64_t>(v.size()));
  PutRaw(v.data(), v.size() * sizeof(int64_t));
}

absl::Status ByteReader::GetRaw(void* out, size_t size) {
  if (bytes_.size() - pos_ < size) {
    return absl::DataLossError(absl::StrCat("negotiation message truncated: need ", size,
                                            " bytes at offset ", pos_, " of ", bytes_.size()));
  }
  if (size == 0) return absl::OkStatus();  // `out` may be an empty vector's null data()
  std::memcpy(out, bytes_.data() + pos_, size);
  pos_ += size;
  return absl::OkStatus();
}

absl::Status ByteReader::GetString(std::string* s) {
  int64_t size = 0;
  absl::Status status = GetI64(&size);
  if (!status.ok()) return status;
  if (size < 0 || static_cast<uint64_t>(size) > bytes_.size() - pos_) {
    return absl::DataLossError(absl::StrCat("negotiation message has a bad string length ", size));
  }
  s->assign(bytes_.data() + pos_, static_cast<size_t>(size));
  pos_ += static_cast<size_t>(size);
  return absl::OkStatus();
}

absl::Status ByteReader::GetI64s(std::vector<int64_t>* v) {
  int64_t size = 0;
  absl::Status status = GetI64(&size);
  if (!status.ok()) return status;
  if (size < 0 || static_cast<uint64_t>(size) > (bytes_.size() - pos_) / sizeof(int64_t)) {
    return absl::DataLossError(absl::StrCat("negotiation message has a bad array length ", size));
  }
  v->resize(static_cast<size_t>(size));
  return GetRaw(v->data(), v->size() * sizeof(int64_t));
}

void EncodeRequest(const Request& r, ByteWriter* out) {
  out->PutString(r.name);
  out->PutI32(static_cast<int32_t>(r.kind));
  out->PutI32(static_cast<int32_t>(r.op));
  out->PutF64(r.prescale);
  out->PutF64(r.postscale);
  out->PutI32(r.root);
  out->PutI64(static_cast<int64_t>(r.tensors.size()));
  for (const TensorMeta& t : r.tensors) {
    out->PutI32(static_cast<int32_t>(t.dtype));
    out->PutI64s(t.shape);
  }
  out->PutI64s(r.splits);
  out->PutString(r.compression);
  out->PutI32(static_cast<int32_t>(r.device));
  out->PutString(r.update_schedule);
  out->PutI32(r.plan_may_delay ? 1 : 0);
}

absl::Status DecodeRequest(ByteReader* in, Request* r) {
  int32_t kind = 0, op = 0;
  int64_t num_tensors = 0;
  absl::Status s = in->GetString(&r->name);
  if (s.ok()) s = in->GetI32(&kind);
  if (s.ok()) s = in->GetI32(&op);
  if (s.ok()) s = in->GetF64(&r->prescale);
  if (s.ok()) s = in->GetF64(&r->postscale);
  if (s.ok()) s = in->GetI32(&r->root);
  if (s.ok()) s = in->GetI64(&num_tensors);
  if (!s.ok()) return s;
  // Each tensor takes at least a dtype and a shape length: a count the remaining bytes cannot
  // hold is corrupt, and must not make this rank allocate for it first.
  constexpr size_t kMinTensorBytes = sizeof(int32_t) + sizeof(int64_t);
  if (num_tensors < 0 || num_tensors > (int64_t{1} << 24) ||
      static_cast<uint64_t>(num_tensors) > in->remaining() / kMinTensorBytes) {
    return absl::DataLossError(absl::StrCat("negotiation message has ", num_tensors, " tensors"));
  }
  r->kind = static_cast<OpKind>(kind);
  r->op = static_cast<ReduceOp>(op);
  r->tensors.resize(static_cast<size_t>(num_tensors));
  for (TensorMeta& t : r->tensors) {
    int32_t dtype = 0;
    s = in->GetI32(&dtype);
    if (s.ok()) s = in->GetI64s(&t.shape);
    if (!s.ok()) return s;
    t.dtype = static_cast<DataType>(dtype);
    // No rank submits a negative dimension or more elements than int64 counts: such a shape is
    // corrupt (and NumElements must never overflow on it).
    int64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || (d > 0 && elements > std::numeric_limits<int64_t>::max() / d)) {
        return absl::DataLossError(
            absl::StrCat("negotiation message has shape ", ShapeString(t.shape)));
      }
      elements *= d;
    }
  }
  s = in->GetI64s(&r->splits);
  if (s.ok()) s = in->GetString(&r->compression);
  int32_t device = 0;
  if (s.ok()) s = in->GetI32(&device);
  if (s.ok() && device != static_cast<int32_t>(DeviceKind::kCpu) &&
      device != static_cast<int32_t>(DeviceKind::kCuda)) {
    return absl::DataLossError(absl::StrCat("negotiation message has device kind ", device));
  }
  r->device = static_cast<DeviceKind>(device);
  if (s.ok()) s = in->GetString(&r->update_schedule);
  int32_t plan_may_delay = 0;
  if (s.ok()) s = in->GetI32(&plan_may_delay);
  if (s.ok() && plan_may_delay != 0 && plan_may_delay != 1) {
    return absl::DataLossError(
        absl::StrCat("negotiation message has plan_may_delay ", plan_may_delay));
  }
  r->plan_may_delay = plan_may_delay == 1;
  return s;
}

void EncodeResponse(const Response& r, ByteWriter* out) {
  out->PutString(r.name);
  out->PutI32(r.cache_id);
  out->PutString(r.error);
  EncodeRequest(r.request, out);
  out->PutI64s(r.rank_rows);
}

absl::Status DecodeResponse(ByteReader* in, Response* r) {
  absl::Status s = in->GetString(&r->name);
  if (s.ok()) s = in->GetI32(&r->cache_id);
  if (s.ok()) s = in->GetString(&r->error);
  if (s.ok()) s = DecodeRequest(in, &r->request);
  if (s.ok()) s = in->GetI64s(&r->rank_rows);
  return s;
}

}  // namespace overlap
