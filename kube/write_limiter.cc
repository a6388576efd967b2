// WriteLimiter: see write_limiter.h.
#include "kube/write_limiter.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace gse {

WriteLimiter::WriteLimiter(double qps, int burst)
    : qps_(qps), burst_(std::max(1, burst)), tokens_(std::max(1, burst)), last_(absl::InfinitePast()) {}

std::optional<absl::Time> WriteLimiter::Reserve(absl::Time now, absl::Time send_by) {
  if (qps_ <= 0) return now;
  absl::MutexLock lock(&mu_);
  if (last_ == absl::InfinitePast()) last_ = now;
  if (now > last_) {
    tokens_ = std::min<double>(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
  }
  // The token this caller takes; below 0 it is one that refills later.
  const double after = tokens_ - 1;
  const absl::Time slot =
      after >= 0 ? now : last_ + absl::Seconds(-after / qps_);
  if (slot > send_by) return std::nullopt;  // nothing taken: later callers are not delayed
  tokens_ = after;
  return std::max(slot, now);
}

WriteLimiter::Grant WriteLimiter::Acquire(absl::Time send_by) {
  const absl::Time now = absl::Now();
  std::optional<absl::Time> slot = Reserve(now, send_by);
  Grant grant;
  if (!slot.has_value()) return grant;
  grant.sent = true;
  grant.waited = *slot - now;
  if (grant.waited > absl::ZeroDuration()) absl::SleepFor(grant.waited);
  return grant;
}

}  // namespace gse
