// Sections guarded by absl::Mutex and handed over through absl::CondVar and Mutex::Await are not
// races. Under --config=tsan with Debian's uninstrumented Abseil, TSan reported each of these
// until third_party/system/absl_tsan_annotations.cc told it about the mutex; this test is what
// shows the annotations work (tools/sanitize.sh tsan runs it). Uninstrumented it checks the
// counts only.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

TEST_CASE("a counter under MutexLock, from four threads") {
  absl::Mutex mu;
  long counter = 0;  // guarded by mu
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        absl::MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&mu);
  CHECK(counter == 40000);
}

TEST_CASE("a value handed over by CondVar, Await and the timed waits") {
  absl::Mutex mu;
  absl::CondVar cv;
  std::vector<int> data;  // guarded by mu
  int stage = 0;          // guarded by mu
  std::thread producer([&] {
    for (int round = 1; round <= 200; ++round) {
      absl::MutexLock lock(&mu);
      data.push_back(round);
      stage = round;
      cv.SignalAll();
    }
  });
  {
    absl::MutexLock lock(&mu);
    while (stage < 100) cv.WaitWithTimeout(&mu, absl::Seconds(10));
    CHECK(data.size() >= 100);
    mu.AwaitWithTimeout(absl::Condition(+[](int* s) { return *s == 200; }, &stage),
                        absl::Seconds(10));
    CHECK(data.size() == 200);
    CHECK(data.back() == 200);
  }
  producer.join();
  std::thread reader([&] {
    mu.ReaderLock();
    CHECK(data.front() == 1);
    mu.ReaderUnlock();
  });
  {
    absl::MutexLock lock(&mu);
    data.push_back(201);
  }
  reader.join();
  CHECK(mu.TryLock());
  CHECK(data.size() == 201);
  mu.Unlock();
}

}  // namespace
