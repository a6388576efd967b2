// LeaderElector: leader election on a coordination.k8s.io/v1 Lease, the way kube-scheduler
// (client-go leaderelection) does it, so that of several extender replicas only one decides.
//
// Contract:
//  * Every retry_period (x 1.0-1.2 jitter while following, as client-go) the elector reads the
//    Lease. Absent: it creates it holding it. Held by another identity whose record changed
//    less than leaseDurationSeconds ago (judged on our own clock from when we saw the record
//    change, never on the holder's timestamps): it waits, and wakes at the moment that record
//    expires on our clock if that comes before the next period. Otherwise (free, expired, or
//    ours) it writes itself in with the resourceVersion it read; a 409 means someone else
//    wrote first and it tries again next period.
//  * Take-over time after a leader dies: the follower sees the dead leader's last renewal up
//    to 1.2 x retry_period after it was written, and takes over lease_duration after seeing
//    it (plus one Lease GET and PUT): at most lease_duration + 1.2 x retry_period after the
//    last renewal (17.4 s with kube-scheduler's defaults 15 s / 2 s), see docs/failover.md.
//  * The leader renews every retry_period. It stops leading at once when it sees another
//    holder, and when no renewal succeeded for renew_deadline (< lease_duration, so it steps
//    down before any follower may take over). on_change(false) is called right then.
//  * Stop() releases a held lease (holder cleared) so a follower takes over without waiting
//    for expiry, then calls on_change(false).
//  * Fencing (issue 12): LeaseValid() says whether this replica may still write as the leader,
//    judged on its own clock: until the start of its last successful acquisition or renewal
//    (the renewTime that write carried, taken before its GET and PUT were sent) plus
//    renew_deadline. A follower takes over no earlier than lease_duration after it *saw* that
//    write, which came after its start, and lease_duration > renew_deadline; so while
//    LeaseValid() is true no other replica can hold the Lease (up to clock-rate drift within
//    the lease_duration - renew_deadline margin). It turns false at once when the elector
//    steps down (another holder, renewals failing), before it releases the Lease in Stop(),
//    and never turns true again before a new successful write. The leader steps down at the
//    same instant the validity ends. Writes that must not outlive the leadership (binds:
//    kube/api_binder.h) check it immediately before they are sent.
//  * It reports who leads as far as it can see (holder(): the Lease's holderIdentity while
//    that record is unexpired on our clock, "" otherwise), and counts its own transitions and
//    how long the lease had no live holder before each of its acquisitions (stats()).
//  * Thread-safe; callbacks run on the elector's thread and must not block for long.
//    LeaseValid() and lease_valid_until() take no lock (one atomic load and a clock read) and
//    may be called from any thread at any rate, callbacks included.
#ifndef GSE_KUBE_LEADER_ELECTION_H_
#define GSE_KUBE_LEADER_ELECTION_H_

#include <cstdint>
#include <functional>
#include <atomic>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace gse {

struct LeaderElectionOptions {
  std::string lease_name = "gpu-slice-extender";
  std::string lease_namespace = "gpu-slice-extender";
  std::string identity;  // empty: DefaultIdentity()
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  bool release_on_stop = true;
  std::function<void(bool leading)> on_change;
  // Called when holder() changes (after on_change when both change at once).
  std::function<void(const std::string& holder)> on_holder;
  std::function<void(const std::string& json_line)> log;  // default: stderr
};

// lease_duration > renew_deadline > retry_period > 0, names non-empty; errors name the flag.
absl::Status ValidateLeaderElectionOptions(const LeaderElectionOptions& options);
// "<hostname>_<random hex>", unique per process as client-go recommends.
std::string DefaultIdentity();
// RFC 3339 with microseconds, as metav1.MicroTime ("2026-11-29T10:00:00.000000Z").
std::string FormatMicroTime(absl::Time t);

// What an elector saw of its own leadership; the counters only grow.
struct LeadershipStats {
  int64_t acquisitions = 0;  // times it became leader
  int64_t losses = 0;        // times it stopped leading (lost the lease, renew deadline, stop)
  // At each acquisition that replaced another holder's record (expired or released): the time
  // from the last poll before the one that first showed that record's last change to the
  // acquisition. The previous holder's last renewal (or release) was written after that poll,
  // so this bounds from above how long no replica led, to within one poll period. Its sum,
  // and the last value.
  absl::Duration leaderless_total = absl::ZeroDuration();
  absl::Duration last_leaderless = absl::ZeroDuration();
  int64_t leaderless_measured = 0;  // acquisitions that contributed to leaderless_total
};

class LeaderElector {
 public:
  LeaderElector(KubeClient* client, LeaderElectionOptions options);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  void Stop();
  bool IsLeader() const;
  // True while the last successful acquisition or renewal started less than renew_deadline
  // ago on this replica's clock and the elector has not stepped down since (see Fencing).
  // Lock-free.
  bool LeaseValid() const;
  // The instant LeaseValid() turns false (InfinitePast when not leading). Lock-free.
  absl::Time lease_valid_until() const;
  const std::string& identity() const { return identity_; }
  // Times this elector became leader (tests, metrics).
  int64_t acquisitions() const;
  LeadershipStats stats() const;
  // The identity that holds an unexpired Lease as this elector last saw it (its own while it
  // leads); "" when the lease is free, expired on our clock, or not read yet.
  std::string holder() const;
  // Lease calls that failed (error answers other than a lost update race or a missing lease,
  // transport failures, a body that is not a Lease), for gse_api_errors_total{op="lease"}.
  int64_t lease_errors() const { return lease_errors_.load(); }

 private:
  enum class Outcome { kHeld, kHeldByOther, kFailed };
  void Run();
  Outcome TryAcquireOrRenew(bool leading);
  void Release();
  void SetLeading(bool leading);
  void SetValidUntil(absl::Time until);
  void SetHolder(const std::string& holder);
  void Log(const std::string& event, const std::string& detail) const;
  std::string LeasePath(bool collection) const;
  absl::Duration CallTimeout() const;

  KubeClient* const client_;
  const LeaderElectionOptions options_;
  const std::string identity_;

  // Observed record, for expiry on our own clock (only the elector thread uses these).
  std::string observed_record_;
  absl::Time observed_at_ = absl::InfinitePast();
  // The poll before the one at observed_at_: the record changed after it (leaderless bound).
  absl::Time observed_after_ = absl::InfinitePast();
  absl::Time last_poll_ = absl::InfinitePast();
  // When the record held by another identity expires on our clock (InfiniteFuture: none).
  absl::Time others_expiry_ = absl::InfiniteFuture();
  // Leaderless bound of the acquisition in progress (negative: not measured).
  absl::Duration pending_leaderless_ = -absl::InfiniteDuration();

  mutable absl::Mutex mu_;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  LeadershipStats stats_ ABSL_GUARDED_BY(mu_);
  std::string holder_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> lease_errors_{0};
  // lease_valid_until() in Unix nanoseconds; written only by the elector thread (Run), read
  // lock-free by any thread. INT64_MIN: not valid.
  std::atomic<int64_t> valid_until_ns_{INT64_MIN};
  // Start (renewTime) of the last successful write of the Lease (elector thread only).
  absl::Time last_write_start_ = absl::InfinitePast();
  std::thread thread_;
};

}  // namespace gse

#endif  // GSE_KUBE_LEADER_ELECTION_H_
