// LeaderElector: leader election on a coordination.k8s.io/v1 Lease, the way kube-scheduler
// (client-go leaderelection) does it, so that of several extender replicas only one decides.
//
// Contract:
//  * Every retry_period the elector reads the Lease. Absent: it creates it holding it. Held
//    by another identity whose record changed less than leaseDurationSeconds ago (judged on
//    our own clock from when we saw the record change, never on the holder's timestamps): it
//    waits. Otherwise (free, expired, or ours) it writes itself in with the resourceVersion it
//    read; a 409 means someone else wrote first and it tries again next period.
//  * The leader renews every retry_period. It stops leading at once when it sees another
//    holder, and when no renewal succeeded for renew_deadline (< lease_duration, so it steps
//    down before any follower may take over). on_change(false) is called right then.
//  * Stop() releases a held lease (holder cleared) so a follower takes over without waiting
//    for expiry, then calls on_change(false).
//  * Thread-safe; callbacks run on the elector's thread and must not block for long.
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
  std::function<void(const std::string& json_line)> log;  // default: stderr
};

// lease_duration > renew_deadline > retry_period > 0, names non-empty; errors name the flag.
absl::Status ValidateLeaderElectionOptions(const LeaderElectionOptions& options);
// "<hostname>_<random hex>", unique per process as client-go recommends.
std::string DefaultIdentity();
// RFC 3339 with microseconds, as metav1.MicroTime ("2026-11-29T10:00:00.000000Z").
std::string FormatMicroTime(absl::Time t);

class LeaderElector {
 public:
  LeaderElector(KubeClient* client, LeaderElectionOptions options);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  void Stop();
  bool IsLeader() const;
  const std::string& identity() const { return identity_; }
  // Times this elector became leader (tests, metrics).
  int64_t acquisitions() const;
  // Lease calls that failed (error answers other than a lost update race or a missing lease,
  // transport failures, a body that is not a Lease), for gse_api_errors_total{op="lease"}.
  int64_t lease_errors() const { return lease_errors_.load(); }

 private:
  enum class Outcome { kHeld, kHeldByOther, kFailed };
  void Run();
  Outcome TryAcquireOrRenew(bool leading);
  void Release();
  void SetLeading(bool leading);
  void Log(const std::string& event, const std::string& detail) const;
  std::string LeasePath(bool collection) const;
  absl::Duration CallTimeout() const;

  KubeClient* const client_;
  const LeaderElectionOptions options_;
  const std::string identity_;

  // Observed record, for expiry on our own clock (only the elector thread uses these).
  std::string observed_record_;
  absl::Time observed_at_ = absl::InfinitePast();

  mutable absl::Mutex mu_;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  int64_t acquisitions_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> lease_errors_{0};
  std::thread thread_;
};

}  // namespace gse

#endif  // GSE_KUBE_LEADER_ELECTION_H_
