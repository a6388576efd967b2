// ThreadSanitizer support for Debian's Abseil: libabsl_synchronization is not built with TSan,
// so TSan cannot see what absl::Mutex, absl::CondVar and absl::Notification do and reports
// races between threads that are in fact serialised by them.
//
// In -DGSE_SANITIZE=thread builds every executable links with -Wl,--wrap=<symbol> for the
// out-of-line entry points below (see cmake/Dependencies.cmake), so our calls reach these
// wrappers, which tell TSan what the real function did (__tsan_mutex_* annotations, the same
// ones Abseil itself emits when it is compiled with TSan) and then call it. The wrappers do
// not change behaviour; they only restore the happens-before edges TSan needs. They cover
// the calls made from our code; Abseil-internal uses of its own primitives are not ours.
#include <sanitizer/tsan_interface.h>

#include <type_traits>

#include "absl/time/time.h"

static_assert(std::is_trivially_copyable<absl::Duration>::value,
              "the CondVar::WaitWithTimeout wrapper passes absl::Duration in registers");

extern "C" {

// ---- absl::Mutex
void __real__ZN4absl7debian35Mutex4LockEv(void* mu);
void __real__ZN4absl7debian35Mutex6UnlockEv(void* mu);
void __real__ZN4absl7debian35Mutex10ReaderLockEv(void* mu);
void __real__ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu);
bool __real__ZN4absl7debian35Mutex7TryLockEv(void* mu);
bool __real__ZN4absl7debian35Mutex13ReaderTryLockEv(void* mu);
void __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(void* mu, const void* cond);
void __real__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(void* mu, const void* cond);
void __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(void* mu, const void* cond);

void __wrap__ZN4absl7debian35Mutex4LockEv(void* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex4LockEv(mu);
  __tsan_mutex_post_lock(mu, 0, 0);
}
void __wrap__ZN4absl7debian35Mutex6UnlockEv(void* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex6UnlockEv(mu);
  __tsan_mutex_post_unlock(mu, 0);
}
void __wrap__ZN4absl7debian35Mutex10ReaderLockEv(void* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex10ReaderLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}
void __wrap__ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}
bool __wrap__ZN4absl7debian35Mutex7TryLockEv(void* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  bool locked = __real__ZN4absl7debian35Mutex7TryLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}
bool __wrap__ZN4absl7debian35Mutex13ReaderTryLockEv(void* mu) {
  const unsigned flags = __tsan_mutex_read_lock | __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(mu, flags);
  bool locked = __real__ZN4absl7debian35Mutex13ReaderTryLockEv(mu);
  __tsan_mutex_post_lock(mu, flags | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}
void __wrap__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(void* mu, const void* cond) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(mu, cond);
  __tsan_mutex_post_lock(mu, 0, 0);
}
void __wrap__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(void* mu, const void* cond) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(mu, cond);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}
// Await releases and re-acquires the (writer-held) mutex while it waits.
void __wrap__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(void* mu, const void* cond) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(mu, cond);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
}

// ---- absl::CondVar: Wait releases and re-acquires the writer-held mutex.
void __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu);
void __wrap__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, mu);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
}

// WaitWithTimeout / WaitWithDeadline: the same, returning whether the time ran out.
// (absl::Duration is trivially copyable: passed by value exactly as the member function gets it.)
bool __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(void* cv, void* mu,
                                                                               absl::Duration d);
bool __wrap__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(void* cv, void* mu,
                                                                               absl::Duration d) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  const bool timed_out =
      __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(cv, mu, d);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return timed_out;
}

// ---- absl::Notification: Notify happens-before a wait that returns.
void __real__ZN4absl7debian312Notification6NotifyEv(void* n);
void __real__ZNK4absl7debian312Notification19WaitForNotificationEv(const void* n);
void __wrap__ZN4absl7debian312Notification6NotifyEv(void* n) {
  __tsan_release(n);
  __real__ZN4absl7debian312Notification6NotifyEv(n);
}
void __wrap__ZNK4absl7debian312Notification19WaitForNotificationEv(const void* n) {
  __real__ZNK4absl7debian312Notification19WaitForNotificationEv(n);
  __tsan_acquire(const_cast<void*>(n));
}

}  // extern "C"
