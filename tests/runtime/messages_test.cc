#include "runtime/negotiation/messages.h"

#include <catch2/catch.hpp>

#include "runtime/negotiation/matcher.h"

namespace overlap {
namespace {

Request MakeRequest(const std::string& name, std::vector<int64_t> shape) {
  Request r;
  r.name = name;
  r.kind = OpKind::kAllreduce;
  r.op = ReduceOp::kAverage;
  r.prescale = 0.5;
  r.tensors.push_back(TensorMeta{DataType::kBFloat16, std::move(shape)});
  return r;
}

TEST_CASE("requests and responses survive encoding", "[messages]") {
  Response response;
  response.name = "layer.weight";
  response.cache_id = 17;
  response.request = MakeRequest("layer.weight", {3, 4});
  response.request.splits = {1, 2};
  response.request.plan_may_delay = true;
  response.rank_rows = {5, 6, 7};
  ByteWriter out;
  EncodeResponse(response, &out);
  ByteReader in(out.bytes());
  Response back;
  REQUIRE(DecodeResponse(&in, &back).ok());
  CHECK(in.done());
  CHECK(back.name == response.name);
  CHECK(back.cache_id == 17);
  CHECK(back.request == response.request);
  CHECK(back.rank_rows == response.rank_rows);
}

TEST_CASE("truncated or corrupt messages are data loss, never a crash", "[messages]") {
  ByteWriter out;
  EncodeRequest(MakeRequest("x", {2}), &out);
  const std::string bytes = out.bytes();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    ByteReader in(absl::string_view(bytes).substr(0, cut));
    Request r;
    CHECK(DecodeRequest(&in, &r).code() == absl::StatusCode::kDataLoss);
  }
  std::string huge_length = bytes;
  huge_length[0] = '\x7f';  // string length far beyond the message
  ByteReader in(huge_length);
  Request r;
  CHECK(DecodeRequest(&in, &r).code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("a tensor count the message cannot hold is refused before allocating", "[messages]") {
  // Found by tests/fuzz/messages_fuzz: 2^24 tensors announced in a few dozen bytes made rank 0
  // allocate half a gigabyte before failing.
  ByteWriter out;
  out.PutString("x");
  out.PutI32(0);
  out.PutI32(0);
  out.PutF64(1.0);
  out.PutF64(1.0);
  out.PutI32(0);
  out.PutI64(int64_t{1} << 24);
  out.PutI32(0);
  ByteReader in(out.bytes());
  Request r;
  absl::Status s = DecodeRequest(&in, &r);
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK(s.message() == "negotiation message has 16777216 tensors");
  CHECK(r.tensors.empty());
}

TEST_CASE("a negative dimension or an element count past int64 is corrupt", "[messages]") {
  // Found by tests/fuzz/plan_checkpoint_fuzz: a checkpointed tensor of shape
  // [131073, 109951162777600] overflowed NumElements().
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{131073, 109951162777600}, std::vector<int64_t>{4, -1}}) {
    ByteWriter out;
    EncodeRequest(MakeRequest("x", shape), &out);
    ByteReader in(out.bytes());
    Request r;
    absl::Status s = DecodeRequest(&in, &r);
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK(s.message() == "negotiation message has shape " + ShapeString(shape));
  }
  ByteWriter out;
  EncodeRequest(MakeRequest("x", {0, int64_t{1} << 62, 3}), &out);  // zero elements: fine
  ByteReader in(out.bytes());
  Request r;
  CHECK(DecodeRequest(&in, &r).ok());
}

TEST_CASE("matching names the first disagreement", "[matcher]") {
  const Request a = MakeRequest("w", {2, 3});
  Request b = MakeRequest("w", {2, 3});
  CHECK(MatchRequests({&a, &b}).error.empty());
  b.tensors[0].shape = {3, 2};
  CHECK(MatchRequests({&a, &b}).error ==
        "allreduce 'w': shape mismatch: rank 0 submitted [2,3], rank 1 submitted [3,2]");
  b = a;
  b.postscale = 2;
  CHECK(MatchRequests({&a, &a, &b}).error ==
        "allreduce 'w': scale mismatch: rank 0 submitted prescale 0.5 postscale 1, rank 2 "
        "submitted prescale 0.5 postscale 2");
  b = a;
  b.plan_may_delay = true;
  CHECK(MatchRequests({&a, &b}).error ==
        "allreduce 'w': plan_may_delay mismatch: rank 0 submitted a tensor it reads at once (no "
        "plan_may_delay), rank 1 submitted a gradient a delayed plan may deliver late "
        "(plan_may_delay)");
}

TEST_CASE("allgather matches ragged first dimensions and records them", "[matcher]") {
  Request a = MakeRequest("g", {2, 3});
  a.kind = OpKind::kAllgather;
  Request b = a;
  b.tensors[0].shape = {5, 3};
  const Response ok = MatchRequests({&a, &b});
  CHECK(ok.error.empty());
  CHECK(ok.rank_rows == std::vector<int64_t>{2, 5});
  b.tensors[0].shape = {5, 4};
  CHECK(MatchRequests({&a, &b}).error ==
        "allgather 'g': shape mismatch beyond the first dimension: rank 0 submitted [2,3], rank 1 "
        "submitted [5,4]");
}

TEST_CASE("an allgather without a tensor, or of a scalar, is refused, not indexed", "[matcher]") {
  // Bytes from a peer can say this (messages_fuzz found it: UBSan, reference to null); the API
  // itself never submits it.
  Request a = MakeRequest("g", {});
  a.kind = OpKind::kAllgather;
  CHECK(
      MatchRequests({&a, &a}).error ==
      "allgather 'g': allgather needs one tensor of at least one dimension; rank 0 sent a scalar");
  a.tensors.clear();
  CHECK(
      MatchRequests({&a, &a}).error ==
      "allgather 'g': allgather needs one tensor of at least one dimension; rank 0 sent 0 tensors");
}

TEST_CASE("joined ranks may only sit out allreduces", "[matcher]") {
  const Request a = MakeRequest("w", {4});
  CHECK(MatchRequests({&a, nullptr}).error.empty());
  Request g = a;
  g.kind = OpKind::kAllgather;
  CHECK(MatchRequests({nullptr, &g, nullptr}).error ==
        "allgather 'w': only allreduce can run while ranks have joined; joined ranks: 0,2");
}

}  // namespace
}  // namespace overlap
