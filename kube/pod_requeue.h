// PodRequeuer: after a take-over, makes kube-scheduler retry the GPU pods it parked while no
// replica could decide, by touching them: one JSON merge patch that sets the annotation
// gpu.themelio.io/requeue on each pending pod that requests a catalog resource.
//
// Why a touch (docs/failover.md has the citations): kube-scheduler 1.26 puts a pod whose
// scheduling cycle failed, with an extender error as with a "fits nowhere" answer, into its
// unschedulable pods (AddUnschedulableIfNotPresent), and only three things take it out again:
// a cluster event that may help it (node added or changed, an assigned pod deleted, ...), the
// pod's own update that isPodUpdated() counts (anything but resourceVersion, generation,
// status, managedFields and finalizers: an annotation counts), or the 5-minute leftover flush
// (podMaxInUnschedulablePodsDuration). The extender's own return cannot cause the first, and
// the third is the five-minute stall. An annotation change is the second: Update() moves the
// pod to the backoff queue if its backoff (1 s doubling to 10 s) has not run out, else to the
// active queue.
//
// Contract:
//  * Trigger(term) runs `passes` passes, the first at once, the next ones `settle` apart (pods
//    refused by a replica that kube-scheduler still reached after the first pass, while the
//    Service's endpoints caught up, are parked after it). A pass lists pods with
//    fieldSelector spec.nodeName= (pending, not yet bound), and patches each one that is not
//    terminating, not finished, and `wants` (requests a catalog resource), unless it carries
//    this pass's value already (idempotent). The value is "<term>/<pass>", so each pass is a
//    change kube-scheduler sees.
//  * Only the pod as listed is patched: the patch carries the listed metadata.resourceVersion
//    as a precondition, so a pod bound, deleted or otherwise changed since is never touched
//    (409 Conflict: read again, patched only if still pending and wanted, once; 404: gone).
//  * Bounded rate: at most `qps` patches per second, each also through the client's write
//    limiter (shared with binds and the Lease: keep qps well below --api-qps).
//  * Cancel() stops the passes at once (leadership lost); a later Trigger starts afresh.
//  * Counters only grow; they feed gse_takeover_requeue_* (docs/metrics.md).
// Thread-safe: Trigger/Cancel/counters from any thread; Start/Stop once each by the owner.
#ifndef GSE_KUBE_POD_REQUEUE_H_
#define GSE_KUBE_POD_REQUEUE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"
#include "state/k8s_objects.h"

namespace gse {

// The annotation the requeue sets on pending pods (the value names the take-over and pass).
inline constexpr char kRequeueAnnotation[] = "gpu.themelio.io/requeue";

struct PodRequeueOptions {
  double qps = 20;  // patches per second at most
  int passes = 2;
  absl::Duration settle = absl::Seconds(10);  // between passes
  absl::Duration call_timeout = absl::Seconds(5);
  // Pods to touch among the pending ones: those requesting a catalog resource. Required.
  std::function<bool(const PodObject& pod)> wants;
  std::function<void(const std::string& json_line)> log;  // default: stderr
};

struct PodRequeueCounters {
  int64_t passes = 0;           // passes completed (listed and worked through)
  int64_t passes_failed = 0;    // passes whose list failed (retried at the next pass)
  int64_t passes_cancelled = 0;
  int64_t touched = 0;          // pods patched
  int64_t already = 0;          // pending pods that carried this pass's value already
  int64_t changed = 0;          // bound, deleted or changed before the patch: not touched
  int64_t failed = 0;           // patches that failed otherwise (API errors)
};

class PodRequeuer {
 public:
  PodRequeuer(KubeClient* client, PodRequeueOptions options);
  ~PodRequeuer();
  PodRequeuer(const PodRequeuer&) = delete;
  PodRequeuer& operator=(const PodRequeuer&) = delete;

  void Start();
  void Stop();
  // Starts the passes of a new term (replacing any not yet run). `term` names the take-over,
  // e.g. "<identity>/<acquisition>"; it must be a valid annotation value prefix.
  void Trigger(const std::string& term);
  void Cancel();
  PodRequeueCounters counters() const;
  // Tests: blocks until `n` passes have ended (completed, failed or cancelled), false on timeout.
  bool WaitForPasses(int64_t n, absl::Duration timeout) const;

 private:
  // Outcome of one pod.
  enum class Touch { kTouched, kAlready, kChanged, kFailed, kSkipped };
  enum class PassEnd { kCompleted, kListFailed, kCancelled };
  void Run();
  PassEnd RunPass(const std::string& value, uint64_t generation);
  Touch TouchPod(const PodObject& listed, const std::string& value);
  bool Cancelled(uint64_t generation) const;
  void Log(const std::string& event, const std::string& detail) const;

  KubeClient* const client_;
  const PodRequeueOptions options_;

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Each Trigger and Cancel starts a new generation; a pass of an older one stops.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string term_ ABSL_GUARDED_BY(mu_);
  int next_pass_ ABSL_GUARDED_BY(mu_) = 0;  // 1-based; 0 = nothing to do
  absl::Time next_pass_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  PodRequeueCounters counters_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gse

#endif  // GSE_KUBE_POD_REQUEUE_H_
