// Every collective x dtype x op on the ranks of this run, checked against references each rank
// computes on its own from the formula that generated every rank's input.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numeric/half.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);
const DataType kAllTypes[] = {DataType::kUint8,   DataType::kInt8,    DataType::kInt32,
                              DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat32, DataType::kFloat64};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};

// Element i of rank r's input, small enough that sums and products of every rank's values are
// exact in every dtype (products use only 1 and 2, at most 2^4 over four ranks; int8 keeps
// products of {-1, 1, 2} in range).
double InputValue(ReduceOp op, DataType dtype, int rank, int64_t i) {
  if (op == ReduceOp::kProduct) {
    const int v = static_cast<int>((rank + i) % 3);
    return dtype == DataType::kUint8 ? 1 + v % 2 : (v == 0 ? -1 : v);
  }
  const int v = static_cast<int>((rank * 7 + i * 3) % 11);
  return dtype == DataType::kUint8 ? v : v - 5;
}

double Expected(ReduceOp op, DataType dtype, int size, int64_t i) {
  double acc = op == ReduceOp::kProduct
                   ? 1
                   : (op == ReduceOp::kMin ? 1e300 : (op == ReduceOp::kMax ? -1e300 : 0));
  for (int r = 0; r < size; ++r) {
    const double v = InputValue(op, dtype, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kAdasum:  // not elementwise: tests/collectives/adasum_test.cc
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc = IsFloatingPoint(dtype) ? acc / size : std::trunc(acc / size);
  return acc;
}

// A buffer of any dtype, read and written as doubles.
struct Buffer {
  DataType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DataType d, int64_t n) : dtype(d), bytes(static_cast<size_t>(n) * DataTypeSize(d)) {}
  int64_t size() const { return static_cast<int64_t>(bytes.size() / DataTypeSize(dtype)); }
  Tensor tensor(std::vector<int64_t> shape) {
    return MakeTensor(bytes.data(), dtype, std::move(shape));
  }
  void Set(int64_t i, double v) {
    void* p = &bytes[static_cast<size_t>(i) * DataTypeSize(dtype)];
    switch (dtype) {
      case DataType::kUint8:
        *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
        break;
      case DataType::kInt8:
        *static_cast<int8_t*>(p) = static_cast<int8_t>(v);
        break;
      case DataType::kInt32:
        *static_cast<int32_t*>(p) = static_cast<int32_t>(v);
        break;
      case DataType::kInt64:
        *static_cast<int64_t*>(p) = static_cast<int64_t>(v);
        break;
      case DataType::kFloat16:
        *static_cast<uint16_t*>(p) = FloatToHalf(static_cast<float>(v));
        break;
      case DataType::kBFloat16:
        *static_cast<uint16_t*>(p) = FloatToBFloat16(static_cast<float>(v));
        break;
      case DataType::kFloat32:
        *static_cast<float*>(p) = static_cast<float>(v);
        break;
      case DataType::kFloat64:
        *static_cast<double*>(p) = v;
        break;
    }
  }
  double Get(int64_t i) const {
    const void* p = &bytes[static_cast<size_t>(i) * DataTypeSize(dtype)];
    switch (dtype) {
      case DataType::kUint8:
        return *static_cast<const uint8_t*>(p);
      case DataType::kInt8:
        return *static_cast<const int8_t*>(p);
      case DataType::kInt32:
        return *static_cast<const int32_t*>(p);
      case DataType::kInt64:
        return static_cast<double>(*static_cast<const int64_t*>(p));
      case DataType::kFloat16:
        return HalfToFloat(*static_cast<const uint16_t*>(p));
      case DataType::kBFloat16:
        return BFloat16ToFloat(*static_cast<const uint16_t*>(p));
      case DataType::kFloat32:
        return *static_cast<const float*>(p);
      case DataType::kFloat64:
        return *static_cast<const double*>(p);
    }
    return 0;
  }
};

// Counts elements that differ from `expected(i)`, so one CHECK reports a whole buffer.
template <typename F>
int64_t Mismatches(const Buffer& b, int64_t n, F expected) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += b.Get(i) != expected(i);
  return bad;
}

void WaitOk(const absl::StatusOr<Handle>& h) {
  REQUIRE(h.ok());
  const absl::Status s = h->Wait(kWait);
  INFO(s.message());
  REQUIRE(s.ok());
}

TEST_CASE("allreduce: every dtype x op, in place and out of place", "[allreduce]") {
  const int rank = Rank(), size = Size();
  const int64_t n = 1037;  // not a multiple of anything MPI might chunk by
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (bool in_place : {true, false}) {
        Buffer in(dtype, n), out(dtype, n);
        for (int64_t i = 0; i < n; ++i) in.Set(i, InputValue(op, dtype, rank, i));
        const std::string name =
            absl::StrCat("ar.", DataTypeName(dtype), ".", ReduceOpName(op), in_place);
        AllreduceOptions options;
        options.op = op;
        Buffer& result = in_place ? in : out;
        WaitOk(Allreduce(name, in.tensor({n}), result.tensor({n}), options));
        INFO(name);
        CHECK(Mismatches(result, n, [&](int64_t i) { return Expected(op, dtype, size, i); }) == 0);
      }
    }
  }
}

TEST_CASE("allreduce: prescale and postscale on floats", "[allreduce]") {
  const int size = Size();
  for (DataType dtype :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    Buffer x(dtype, 64);
    for (int64_t i = 0; i < 64; ++i) x.Set(i, 1.0);
    AllreduceOptions options;
    options.op = ReduceOp::kSum;
    options.prescale = 2.0;
    options.postscale = 0.25;
    WaitOk(Allreduce(absl::StrCat("scaled.", DataTypeName(dtype)), x.tensor({8, 8}),
                     x.tensor({8, 8}), options));
    CHECK(Mismatches(x, 64, [&](int64_t) { return size * 0.5; }) == 0);
  }
}

TEST_CASE("allreduce: fp16 and bf16 rounding stays within the fp32 reference bound",
          "[allreduce]") {
  const int rank = Rank(), size = Size();
  const int64_t n = 4096;
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    // Machine epsilon of the format: each pairwise step of the reduction rounds once.
    const double eps = dtype == DataType::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    Buffer x(dtype, n);
    std::vector<double> reference(static_cast<size_t>(n), 0.0),
        magnitude(static_cast<size_t>(n), 0.0);
    for (int r = 0; r < size; ++r) {
      std::mt19937 gen(1234 + r);
      std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
      for (int64_t i = 0; i < n; ++i) {
        // Every rank derives rank r's rounded input the same way.
        Buffer one(dtype, 1);
        one.Set(0, dist(gen));
        reference[static_cast<size_t>(i)] += one.Get(0);
        magnitude[static_cast<size_t>(i)] += std::fabs(one.Get(0));
        if (r == rank) x.Set(i, one.Get(0));
      }
    }
    AllreduceOptions options;
    options.op = ReduceOp::kSum;
    WaitOk(Allreduce(absl::StrCat("round.", DataTypeName(dtype)), x.tensor({n}), x.tensor({n}),
                     options));
    int64_t outside = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double err = std::fabs(x.Get(i) - reference[static_cast<size_t>(i)]);
      const double bound = size * eps * magnitude[static_cast<size_t>(i)] + 1e-12;
      outside += err > bound;
      worst = std::max(worst, err / bound);
    }
    INFO(DataTypeName(dtype) << " worst error / bound = " << worst);
    CHECK(outside == 0);
    CHECK(worst > 0);  // the test would be vacuous if nothing ever rounded
  }
}

TEST_CASE("allreduce: each rank submits in its own random order", "[allreduce][order]") {
  const int rank = Rank(), size = Size();
  constexpr int kTensors = 64;
  std::vector<std::vector<float>> data(kTensors);
  std::vector<int> order(kTensors);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(99 + rank));
  for (int step = 0; step < 3; ++step) {
    std::vector<Handle> handles;
    for (int t : order) {
      data[t].assign(static_cast<size_t>(16 + t * 37), static_cast<float>(rank + t + step));
      absl::StatusOr<Handle> h = Allreduce(
          absl::StrCat("order.", t),
          MakeTensor(data[t].data(), {static_cast<int64_t>(data[t].size())}),
          MakeTensor(data[t].data(), {static_cast<int64_t>(data[t].size())}), {ReduceOp::kSum});
      REQUIRE(h.ok());
      handles.push_back(*h);
    }
    for (const Handle& h : handles) REQUIRE(h.Wait(kWait).ok());
    int bad = 0;
    for (int t = 0; t < kTensors; ++t) {
      const float want = static_cast<float>(size * (t + step) + size * (size - 1) / 2);
      for (float v : data[t]) bad += v != want;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("allreduce: 1,000 small tensors in one step", "[allreduce][many]") {
  const int rank = Rank(), size = Size();
  constexpr int kTensors = 1000;
  std::vector<std::vector<double>> data(kTensors);
  for (int step = 0; step < 2; ++step) {
    std::vector<Handle> handles;
    for (int t = 0; t < kTensors; ++t) {
      data[t].assign(static_cast<size_t>(1 + t % 7), rank * 1000.0 + t);
      absl::StatusOr<Handle> h = Allreduce(
          absl::StrCat("many.", t),
          MakeTensor(data[t].data(), {static_cast<int64_t>(data[t].size())}),
          MakeTensor(data[t].data(), {static_cast<int64_t>(data[t].size())}), {ReduceOp::kAverage});
      REQUIRE(h.ok());
      handles.push_back(*h);
    }
    for (const Handle& h : handles) REQUIRE(h.Wait(kWait).ok());
    int bad = 0;
    for (int t = 0; t < kTensors; ++t) {
      const double want = 1000.0 * (size - 1) / 2.0 + t;
      for (double v : data[t]) bad += std::fabs(v - want) > 1e-9;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("allreduce: a 256 MiB tensor", "[allreduce][large]") {
  const int rank = Rank(), size = Size();
  const int64_t n = (int64_t{256} << 20) / 4;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i % 1024) + rank);
  WaitOk(
      Allreduce("large", MakeTensor(x.data(), {n}), MakeTensor(x.data(), {n}), {ReduceOp::kSum}));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad +=
        x[static_cast<size_t>(i)] != static_cast<float>(size * (i % 1024) + size * (size - 1) / 2);
  }
  CHECK(bad == 0);
}

TEST_CASE("grouped allreduce completes all tensors together", "[allreduce][grouped]") {
  const int rank = Rank(), size = Size();
  std::vector<float> a(100, rank + 1.0f), b(7, 2.0f * rank);
  std::vector<Tensor> tensors = {MakeTensor(a.data(), {10, 10}), MakeTensor(b.data(), {7})};
  bool callback_ran = false;
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.on_done = [&](const absl::Status& s) { callback_ran = s.ok(); };
  WaitOk(GroupedAllreduce({"group.a", "group.b"}, tensors, tensors, options));
  CHECK(callback_ran);
  CHECK(std::count(a.begin(), a.end(), size * (size + 1) / 2.0f) == 100);
  CHECK(std::count(b.begin(), b.end(), static_cast<float>(size * (size - 1))) == 7);
}

TEST_CASE("allgather: ragged first dimension, every dtype", "[allgather]") {
  const int rank = Rank(), size = Size();
  for (DataType dtype : kAllTypes) {
    const int64_t rows = rank + 1, cols = 3;
    Buffer in(dtype, rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) in.Set(i, (rank * 10 + i) % 100);
    absl::StatusOr<Handle> h =
        Allgather(absl::StrCat("gather.", DataTypeName(dtype)), in.tensor({rows, cols}));
    WaitOk(h);
    const Tensor& out = h->output();
    const int64_t total_rows = size * (size + 1) / 2;
    REQUIRE(out.shape == std::vector<int64_t>{total_rows, cols});
    REQUIRE(out.dtype == dtype);
    Buffer got(dtype, total_rows * cols);
    std::memcpy(got.bytes.data(), out.data, got.bytes.size());
    int64_t bad = 0, offset = 0;
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < (r + 1) * cols; ++i) bad += got.Get(offset + i) != (r * 10 + i) % 100;
      offset += (r + 1) * cols;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("broadcast: every root and dtype, in place and out of place", "[broadcast]") {
  const int rank = Rank(), size = Size();
  for (DataType dtype : kAllTypes) {
    for (int root = 0; root < size; ++root) {
      Buffer in(dtype, 50), out(dtype, 50);
      for (int64_t i = 0; i < 50; ++i) in.Set(i, rank == root ? (i + root) % 60 : 99);
      BroadcastOptions options;
      options.root = root;
      WaitOk(Broadcast(absl::StrCat("bcast.", DataTypeName(dtype), root), in.tensor({5, 10}),
                       in.tensor({5, 10}), options));
      WaitOk(Broadcast(absl::StrCat("bcast.oop.", DataTypeName(dtype), root), in.tensor({5, 10}),
                       out.tensor({5, 10}), options));
      CHECK(Mismatches(in, 50, [&](int64_t i) { return (i + root) % 60; }) == 0);
      CHECK(Mismatches(out, 50, [&](int64_t i) { return (i + root) % 60; }) == 0);
    }
  }
}

TEST_CASE("reducescatter: uneven rows, every dtype and op", "[reducescatter]") {
  const int rank = Rank(), size = Size();
  const int64_t rows = 2 * size + 1, cols = 3;
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      Buffer in(dtype, rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) in.Set(i, InputValue(op, dtype, rank, i));
      ReduceScatterOptions options;
      options.op = op;
      absl::StatusOr<Handle> h =
          ReduceScatter(absl::StrCat("rs.", DataTypeName(dtype), ReduceOpName(op)),
                        in.tensor({rows, cols}), options);
      WaitOk(h);
      const int64_t my_rows = rows / size + (rank < rows % size ? 1 : 0);
      const int64_t first_row = rank * (rows / size) + std::min<int64_t>(rank, rows % size);
      REQUIRE(h->output().shape == std::vector<int64_t>{my_rows, cols});
      Buffer got(dtype, my_rows * cols);
      std::memcpy(got.bytes.data(), h->output().data, got.bytes.size());
      INFO(DataTypeName(dtype) << " " << ReduceOpName(op));
      CHECK(Mismatches(got, my_rows * cols, [&](int64_t i) {
              return Expected(op, dtype, size, first_row * cols + i);
            }) == 0);
    }
  }
}

TEST_CASE("alltoall: uneven splits, every dtype", "[alltoall]") {
  const int rank = Rank(), size = Size();
  auto rows_sent = [](int from, int to) { return static_cast<int64_t>((from + 2 * to) % 3); };
  // Row k sent from `from` to `to` holds (from * 10 + to, k): small enough for every dtype.
  auto value = [](int from, int to, int64_t k, int col) {
    return col == 0 ? from * 10 + to : static_cast<double>(k);
  };
  for (DataType dtype : kAllTypes) {
    AlltoallOptions options;
    int64_t total = 0;
    for (int to = 0; to < size; ++to) {
      options.splits.push_back(rows_sent(rank, to));
      total += rows_sent(rank, to);
    }
    Buffer in(dtype, total * 2);
    int64_t row = 0;
    for (int to = 0; to < size; ++to) {
      for (int64_t k = 0; k < rows_sent(rank, to); ++k, ++row) {
        in.Set(row * 2, value(rank, to, k, 0));
        in.Set(row * 2 + 1, value(rank, to, k, 1));
      }
    }
    absl::StatusOr<Handle> h =
        Alltoall(absl::StrCat("a2a.", DataTypeName(dtype)), in.tensor({total, 2}), options);
    WaitOk(h);
    const Tensor& out = h->output();
    int64_t expect_rows = 0;
    for (int from = 0; from < size; ++from) expect_rows += rows_sent(from, rank);
    REQUIRE(out.shape == std::vector<int64_t>{expect_rows, 2});
    REQUIRE(out.dtype == dtype);
    Buffer got(dtype, expect_rows * 2);
    std::memcpy(got.bytes.data(), out.data, got.bytes.size());
    int64_t bad = 0;
    row = 0;
    for (int from = 0; from < size; ++from) {
      CHECK(h->received_splits()[static_cast<size_t>(from)] == rows_sent(from, rank));
      for (int64_t k = 0; k < rows_sent(from, rank); ++k, ++row) {
        bad += got.Get(row * 2) != value(from, rank, k, 0);
        bad += got.Get(row * 2 + 1) != value(from, rank, k, 1);
      }
    }
    INFO(DataTypeName(dtype));
    CHECK(bad == 0);
  }
}

TEST_CASE("barrier completes on every rank", "[barrier]") {
  for (int i = 0; i < 3; ++i) WaitOk(Barrier());
}

TEST_CASE("join: ranks with fewer batches contribute zeros", "[join]") {
  const int rank = Rank(), size = Size();
  // Rank r has r + 1 batches; in step s the ranks with r >= s still submit.
  for (int step = 0; step <= rank; ++step) {
    std::vector<float> g(33, 1.0f);
    WaitOk(Allreduce("join.grad", MakeTensor(g.data(), {33}), MakeTensor(g.data(), {33}),
                     {ReduceOp::kSum}));
    CHECK(std::count(g.begin(), g.end(), static_cast<float>(size - step)) == 33);
  }
  WaitOk(Join());
  // After everyone joined, normal collectives work again.
  std::vector<float> after(4, 1.0f);
  WaitOk(Allreduce("join.after", MakeTensor(after.data(), {4}), MakeTensor(after.data(), {4}),
                   {ReduceOp::kSum}));
  CHECK(after[0] == static_cast<float>(size));
}

TEST_CASE("a changed shape under a cached name renegotiates", "[cache]") {
  const int size = Size();
  for (int64_t n : {10, 10, 20, 20, 10}) {
    std::vector<float> x(static_cast<size_t>(n), 1.0f);
    WaitOk(Allreduce("reshaped", MakeTensor(x.data(), {n}), MakeTensor(x.data(), {n}),
                     {ReduceOp::kSum}));
    CHECK(std::count(x.begin(), x.end(), static_cast<float>(size)) == n);
  }
}

}  // namespace
}  // namespace overlap
