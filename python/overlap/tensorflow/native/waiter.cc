#include "waiter.h"

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

// The bound on one wait and the settings it comes from (overlap._core.wait_bound).
struct Bound {
  double seconds = 630;
  double stall_timeout_s = 300;
  double collective_timeout_s = 300;
};

std::mutex bound_mu;
Bound bound;

Bound CurrentBound() {
  std::lock_guard<std::mutex> lock(bound_mu);
  return bound;
}

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

absl::Status GaveUp(const Job& job, const Bound& b) {
  return absl::DeadlineExceededError(
      "rank " + std::to_string(overlap_rank()) + ": " + job.what + " did not end within " +
      Number(b.seconds) +
      " s of this kernel's wait: the runtime should have failed it (a stall after "
      "OVERLAP_STALL_TIMEOUT_S=" +
      Number(b.stall_timeout_s) +
      ", a lost peer or stuck collective after OVERLAP_COLLECTIVE_TIMEOUT_S=" +
      Number(b.collective_timeout_s) +
      ") and did not, so the kernel gives up (a bug in overlap: please report it with every "
      "rank's log); the operation may still run, so its tensors stay allocated until it ends");
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
    const Bound b = CurrentBound();
    // overlap_last_error() is per thread: read it here, on the thread that waited.
    int rc = overlap_handle_wait(job.handle, b.seconds);
    if (rc == kDeadlineExceeded) {
      if (!overlap_handle_poll(job.handle)) {
        // The reaper holds the handle and tensors before the kernel is done, so that whoever
        // sees the kernel's error also sees them held (overlap_tf_abandoned_waits).
        Continuation then = std::move(job.then);
        const absl::Status gave_up = GaveUp(job, b);
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

extern "C" void overlap_tf_set_wait_bound(double bound_s, double stall_timeout_s,
                                          double collective_timeout_s) {
  std::lock_guard<std::mutex> lock(overlap_tf::bound_mu);
  overlap_tf::bound = {bound_s, stall_timeout_s, collective_timeout_s};
}

extern "C" int overlap_tf_abandoned_waits(void) { return overlap_tf::TheReaper()->Count(); }
