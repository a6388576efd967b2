// WriteLimiter: the client-side pace of writes to the API server (binds, Lease updates), a
// token bucket of `qps` tokens per second holding at most `burst`.
//
// Contract:
//  * Callers are served in the order they ask (each reserves the next free send time; a
//    later caller never overtakes an earlier one), as golang.org/x/time/rate's Reserve does
//    for client-go.
//  * A caller names the latest moment its write may be sent (`send_by`, the bind's own
//    deadline less the time the POST needs). When the next free send time is later, nothing is
//    reserved and the caller learns it at once, instead of holding a thread to find out at the
//    deadline: the write is not sent (it is not refused for being paced; it could not be sent
//    in time). Otherwise the caller waits until its send time, then sends.
//  * qps <= 0: no limit (every write is sent at once).
// Thread-safe; Reserve never blocks, Acquire sleeps without holding the lock.
#ifndef GSE_KUBE_WRITE_LIMITER_H_
#define GSE_KUBE_WRITE_LIMITER_H_

#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gse {

class WriteLimiter {
 public:
  WriteLimiter(double qps, int burst);

  // When the caller may send, given the time `now`: `now` itself while tokens are left, else
  // the next free slot. nullopt, with nothing reserved, when that slot is after `send_by`.
  // (Exposed with an explicit `now` so that the pacing is tested without clocks.)
  std::optional<absl::Time> Reserve(absl::Time now, absl::Time send_by);

  // What a write went through: how long it waited, and whether it may be sent.
  struct Grant {
    bool sent = false;  // false: the next free slot was after send_by; nothing was reserved
    absl::Duration waited = absl::ZeroDuration();
  };
  // Reserve at absl::Now() and sleep until the slot.
  Grant Acquire(absl::Time send_by);

  double qps() const { return qps_; }
  int burst() const { return burst_; }

 private:
  const double qps_;
  const int burst_;
  absl::Mutex mu_;
  // Tokens at `last_`; negative when slots are reserved ahead (-n: n callers are waiting).
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse

#endif  // GSE_KUBE_WRITE_LIMITER_H_
