// Tells ThreadSanitizer about absl::Mutex and absl::CondVar when Abseil itself is not instrumented
// (Debian's libabsl_synchronization.so is built without -fsanitize=thread, so TSan saw neither
// acquire nor release, and reported every section one absl::Mutex guards as a race).
//
// Linked into every binary only under --config=tsan (third_party/system/BUILD). Each function
// below has the same name as Abseil's, so the binary's calls bind here instead of to the shared
// library; it forwards to the library's definition (dlsym RTLD_NEXT) between TSan's mutex
// annotations, the calls an instrumented Abseil makes itself (ABSL_TSAN_MUTEX_PRE_LOCK and the
// rest). Between a pre and a post annotation TSan ignores memory accesses, so the library's own
// work, including the Condition callbacks it runs, is neither checked nor reported.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

#define OVERLAP_STR2(x) #x
#define OVERLAP_STR(x) OVERLAP_STR2(x)

// Itanium mangling of absl::<inline namespace>::<cls>::<rest>, e.g. Mangled("5Mutex", "4LockEv").
std::string Mangled(const char* cls, const char* rest) {
  const std::string ns = OVERLAP_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return "_ZN4absl" + std::to_string(ns.size()) + ns + cls + rest;
}

// The shared library's definition of the function this binary overrides.
template <typename Fn>
Fn Real(const char* cls, const char* rest) {
  const std::string name = Mangled(cls, rest);
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "absl_tsan_annotations: %s not found in Abseil: %s\n", name.c_str(),
                 dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

// Abseil's functions call each other through the PLT (AwaitWithTimeout tail-calls
// AwaitWithDeadline), which binds to the overrides here too: only the outermost call on a thread
// is annotated.
thread_local int depth = 0;

struct Outermost {
  Outermost() : outer(depth++ == 0) {}
  ~Outermost() { --depth; }
  const bool outer;
};

constexpr unsigned kRead = __tsan_mutex_read_lock;
constexpr unsigned kTry = __tsan_mutex_try_lock;
constexpr unsigned kTryFailed = __tsan_mutex_try_lock_failed;

// A blocking lock: `real` returns with the mutex held.
template <typename Call>
void Acquire(void* mu, unsigned flags, Call real) {
  Outermost call;
  if (!call.outer) return real();
  __tsan_mutex_pre_lock(mu, flags);
  real();
  __tsan_mutex_post_lock(mu, flags, 0);
}

template <typename Call>
bool TryAcquire(void* mu, unsigned flags, Call real) {
  Outermost call;
  if (!call.outer) return real();
  __tsan_mutex_pre_lock(mu, flags | kTry);
  const bool locked = real();
  __tsan_mutex_post_lock(mu, flags | kTry | (locked ? 0 : kTryFailed), 0);
  return locked;
}

template <typename Call>
void Release(void* mu, unsigned flags, Call real) {
  Outermost call;
  if (!call.outer) return real();
  __tsan_mutex_pre_unlock(mu, flags);
  real();
  __tsan_mutex_post_unlock(mu, flags);
}

// A call entered and left with the mutex held that releases it while it waits (Await, CondVar).
template <typename Result, typename Call>
Result ReleaseAndReacquire(void* mu, Call real) {
  Outermost call;
  if (!call.outer) return real();
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
  Result r = real();
  __tsan_mutex_post_lock(mu, 0, 0);
  return r;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex", "D2Ev");
  if (depth == 0) __tsan_mutex_destroy(this, 0);
  real(this);
}

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex", "4LockEv");
  Acquire(this, 0, [&] { real(this); });
}

void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex", "10ReaderLockEv");
  Acquire(this, kRead, [&] { real(this); });
}

bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex", "7TryLockEv");
  return TryAcquire(this, 0, [&] { return real(this); });
}

bool Mutex::ReaderTryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex", "13ReaderTryLockEv");
  return TryAcquire(this, kRead, [&] { return real(this); });
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex", "6UnlockEv");
  Release(this, 0, [&] { real(this); });
}

void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex", "12ReaderUnlockEv");
  Release(this, kRead, [&] { real(this); });
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>("5Mutex", "8LockWhenERKNS0_9ConditionE");
  Acquire(this, 0, [&] { real(this, cond); });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex", "14ReaderLockWhenERKNS0_9ConditionE");
  Acquire(this, kRead, [&] { real(this, cond); });
}

// The timed forms return with the mutex held whether or not the condition became true.
bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex", "19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool r = false;
  Acquire(this, 0, [&] { r = real(this, cond, timeout); });
  return r;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex", "20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  bool r = false;
  Acquire(this, 0, [&] { r = real(this, cond, deadline); });
  return r;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex", "25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool r = false;
  Acquire(this, kRead, [&] { r = real(this, cond, timeout); });
  return r;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex", "26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  bool r = false;
  Acquire(this, kRead, [&] { r = real(this, cond, deadline); });
  return r;
}

void Mutex::Await(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>("5Mutex", "5AwaitERKNS0_9ConditionE");
  ReleaseAndReacquire<int>(this, [&] {
    real(this, cond);
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex", "16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return ReleaseAndReacquire<bool>(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex", "17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return ReleaseAndReacquire<bool>(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>("7CondVar", "4WaitEPNS0_5MutexE");
  ReleaseAndReacquire<int>(mu, [&] {
    real(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      "7CondVar", "15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return ReleaseAndReacquire<bool>(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, absl::Time)>(
      "7CondVar", "16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return ReleaseAndReacquire<bool>(mu, [&] { return real(this, mu, deadline); });
}

ABSL_NAMESPACE_END
}  // namespace absl
