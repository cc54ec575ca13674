#include "waiter.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace overlap_tf {
namespace {

constexpr int kKeptIdleThreads = 4;
constexpr auto kIdleExit = std::chrono::seconds(30);

struct Job {
  overlap_handle* handle;
  Continuation then;
};

class WaiterPool {
 public:
  void Add(Job job) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    // Every queued job needs a thread of its own: a job left waiting behind another could be
    // the one that other job's completion depends on (through the peers' order).
    if (jobs_.size() > static_cast<size_t>(idle_)) {
      ++threads_;
      std::thread([this] { Loop(); }).detach();
    } else {
      wake_.notify_one();
    }
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++idle_;
      bool timed_out = !wake_.wait_for(lock, kIdleExit, [this] { return !jobs_.empty(); });
      --idle_;
      if (timed_out && jobs_.empty()) {
        if (threads_ > kKeptIdleThreads) {
          --threads_;
          return;
        }
        continue;
      }
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      Run(job);
      lock.lock();
    }
  }

  static void Run(Job& job) {
    // overlap_last_error() is per thread: read it here, on the thread that waited.
    int rc = overlap_handle_wait(job.handle, -1.0);
    job.then(job.handle, rc == 0 ? absl::OkStatus() : CoreError(rc));
    overlap_handle_free(job.handle);
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  int idle_ = 0;
  int threads_ = 0;
};

}  // namespace

void WhenDone(overlap_handle* handle, Continuation then) {
  static WaiterPool* pool = new WaiterPool();  // never destroyed: see waiter.h
  pool->Add(Job{handle, std::move(then)});
}

absl::Status CoreError(int code) {
  // The core returns absl::StatusCode values, which are TensorFlow's error codes too.
  return absl::Status(static_cast<absl::StatusCode>(code), overlap_last_error());
}

}  // namespace overlap_tf
