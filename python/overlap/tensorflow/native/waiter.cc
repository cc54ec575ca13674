#include "waiter.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace overlap_tf {
namespace {

constexpr int kKeptIdleThreads = 4;
constexpr auto kIdleExit = std::chrono::seconds(30);
constexpr auto kReapEvery = std::chrono::seconds(1);
constexpr int kDeadlineExceeded = 4;  // absl::StatusCode::kDeadlineExceeded

struct Job {
  overlap_handle* handle;
  std::string what;
  std::vector<tensorflow::Tensor> keep;
  Continuation then;
};

// A test's bound on every wait, in seconds; 0: the core's (overlap_wait_bound).
std::atomic<double> bound_override{0};

double WaitBoundSeconds() {
  const double override_s = bound_override.load();
  if (override_s > 0) return override_s;
  double bound_s = 0;
  overlap_wait_bound(&bound_s, nullptr, nullptr);
  return bound_s;
}

// Holds the handles (and tensors) of waits that gave up until their operations end; one thread
// polls them, and exits when none is left.
class Reaper {
 public:
  void Add(Job job) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    if (!running_) {
      running_ = true;
      std::thread([this] { Loop(); }).detach();
    }
  }

  int Count() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(jobs_.size());
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!jobs_.empty()) {
      lock.unlock();
      std::this_thread::sleep_for(kReapEvery);
      lock.lock();
      for (auto it = jobs_.begin(); it != jobs_.end();) {
        if (overlap_handle_poll(it->handle)) {
          overlap_handle_free(it->handle);
          it = jobs_.erase(it);  // and with it the last references to its tensors
        } else {
          ++it;
        }
      }
    }
    running_ = false;
  }

  std::mutex mu_;
  std::deque<Job> jobs_;
  bool running_ = false;
};

Reaper* TheReaper() {
  static Reaper* reaper = new Reaper();  // never destroyed, as the pool
  return reaper;
}

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
      Run(std::move(job));
      lock.lock();
    }
  }

  static void Run(Job job) {
    const auto start = std::chrono::steady_clock::now();
    // overlap_last_error() is per thread: read it here, on the thread that waited.
    int rc = overlap_handle_wait(job.handle, WaitBoundSeconds());
    if (rc == kDeadlineExceeded) {
      if (!overlap_handle_poll(job.handle)) {
        // The reaper holds the handle and tensors before the kernel is done, so that whoever
        // sees the kernel's error also sees them held (overlap_tf_abandoned_waits).
        Continuation then = std::move(job.then);
        const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
        const absl::Status gave_up =
            CoreError(overlap_wait_expired(job.what.c_str(), waited.count()));
        TheReaper()->Add(std::move(job));
        then(nullptr, gave_up);
        return;
      }
      // It ended between the timeout and the poll: ask again for its own status.
      rc = overlap_handle_wait(job.handle, 0.0);
    }
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

void WhenDone(overlap_handle* handle, std::string what, std::vector<tensorflow::Tensor> keep,
              Continuation then) {
  static WaiterPool* pool = new WaiterPool();  // never destroyed: see waiter.h
  pool->Add(Job{handle, std::move(what), std::move(keep), std::move(then)});
}

absl::Status CoreError(int code) {
  // The core returns absl::StatusCode values, which are TensorFlow's error codes too.
  return absl::Status(static_cast<absl::StatusCode>(code), overlap_last_error());
}

}  // namespace overlap_tf

extern "C" void overlap_tf_override_wait_bound(double bound_s) {
  overlap_tf::bound_override.store(bound_s > 0 ? bound_s : 0);
}

extern "C" int overlap_tf_abandoned_waits(void) { return overlap_tf::TheReaper()->Count(); }
