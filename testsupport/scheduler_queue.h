// SchedulerQueueSim: kube-scheduler 1.26's scheduling queue and loop, as far as what happens to
// a pod depends on an extender — a test peer that decides when a pending pod is tried again.
//
// The rules are those of pkg/scheduler/internal/queue/scheduling_queue.go,
// pkg/scheduler/schedule_one.go and pkg/scheduler/eventhandlers.go at v1.26 (read in the vendored
// copy of kubernetes-sigs/scheduler-plugins' release-1.26 branch, k8s.io/kubernetes v1.26.7):
//  * three queues: active (FIFO here: every pod has the same priority), backoff, and the
//    unschedulable pods; Pop() takes the head of active and counts an attempt and a cycle.
//  * a failed scheduling cycle — an extender filter error (a transport failure or a protocol
//    Error alike: extender.go returns both as errors, and a non-ignorable extender's error fails
//    the cycle) or no node passing — calls AddUnschedulableIfNotPresent: into the backoff queue
//    if a move request came during the cycle (moveRequestCycle >= the pod's cycle), else into
//    the unschedulable pods, with a fresh timestamp. A pod that the informer shows bound is not
//    re-added (handleSchedulingFailure).
//  * a failed bind (extender bind Error) is handleBindingCycleError: MoveAllToActiveOrBackoffQueue
//    (AssignedPodDelete) first, then the failure handler, so the pod lands in backoff.
//  * backoff: initial 1 s, doubled per attempt, at most 10 s, from the last timestamp;
//    flushBackoffQCompleted every 1 s; flushUnschedulablePodsLeftover every 30 s moves pods that
//    stayed longer than podMaxInUnschedulablePodsDuration (5 min) to backoff or active.
//  * pod informer (eventhandlers.go): an unassigned pod's add is Add (active); an update with a
//    new resourceVersion, unless the pod is assumed, is Update: in active or backoff it is
//    updated in place; in the unschedulable pods it moves (to backoff while backing off, else to
//    active) if isPodUpdated — the pod differs after dropping resourceVersion, generation,
//    status, managedFields and finalizers — and stays otherwise; in no queue (in flight) it is
//    added to active. An unassigned pod that becomes assigned or is deleted leaves the queues;
//    an assigned pod's deletion is MoveAllToActiveOrBackoffQueue(AssignedPodDelete).
//  * the extender is reached through a Service: only endpoints whose /readyz answered 200 at
//    the last probe receive calls (kubelet's readiness probe and the endpoints controller,
//    collapsed into one probe every readiness_period); with none, the call fails as a
//    connection to a Service without endpoints does.
// Left out, because nothing here depends on them: priorities and preemption (PostFilter),
// plugins and their cluster-event hints (every failure here has no UnschedulablePlugins, which
// 1.26 moves on every event), node events (the test cluster's nodes do not change), PreEnqueue
// gates, the PodScheduled condition written on failure (a status-only update, which
// isPodUpdated ignores), and the asynchronous binding cycle (binds run in the loop).
//
// Thread-safe; Start() spawns the informer, loop, flush and probe threads; Stop() joins them.
#ifndef GSE_TESTSUPPORT_SCHEDULER_QUEUE_H_
#define GSE_TESTSUPPORT_SCHEDULER_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace gse::testing {

struct SchedulerQueueOptions {
  std::string api_url;                 // the (fake) API server the informer lists and watches
  std::string token = "test-token";
  std::vector<std::string> extenders;  // endpoint base URLs behind the extender's Service
  std::vector<std::string> nodes;      // candidate node names sent to filter
  std::string scheduler_name = "default-scheduler";
  absl::Duration readiness_period = absl::Milliseconds(200);
  absl::Duration http_timeout = absl::Seconds(5);  // the extender's httpTimeout
  // kube-scheduler 1.26's defaults.
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(10);
  absl::Duration max_in_unschedulable = absl::Minutes(5);
  absl::Duration backoff_flush_period = absl::Seconds(1);
  absl::Duration unschedulable_flush_period = absl::Seconds(30);
};

// Where a pod is. kAssumed: bound by this scheduler, the informer has not shown it yet.
enum class PodQueue { kNone, kActive, kBackoff, kUnschedulable, kInFlight, kAssumed, kBound };
const char* PodQueueName(PodQueue q);

// One move of a pod, with kube-scheduler's event names: PodAdd, PodUpdate, BackoffComplete,
// UnschedulableTimeout, AssignedPodDelete, ScheduleAttemptFailure, Pop, Bound, Deleted.
struct QueueMove {
  absl::Time at;
  std::string pod;  // namespace/name
  PodQueue from;
  PodQueue to;
  std::string cause;
  std::string detail;  // the extender's error, for failures
};

class SchedulerQueueSim {
 public:
  explicit SchedulerQueueSim(SchedulerQueueOptions options);
  ~SchedulerQueueSim();
  SchedulerQueueSim(const SchedulerQueueSim&) = delete;
  SchedulerQueueSim& operator=(const SchedulerQueueSim&) = delete;

  // Lists the pods (initial informer sync), probes every extender endpoint once (a Service's
  // endpoints are known before kube-scheduler starts scheduling), then starts every thread.
  absl::Status Start();
  void Stop();

  PodQueue QueueOf(const std::string& pod) const;
  int Attempts(const std::string& pod) const;
  std::vector<QueueMove> Moves(const std::string& pod = "") const;
  // The endpoint that received the last call, "" if none was ready.
  std::string LastEndpoint() const;

 private:
  struct Queued {
    std::string json;  // the pod as the informer last saw it
    std::string resource_version;
    std::string uid;
    int attempts = 0;
    absl::Time timestamp;  // last (re-)queue, for backoff and the leftover flush
    PodQueue where = PodQueue::kNone;
    int64_t cycle = 0;  // scheduling cycle of its last Pop
  };
  struct Cycle;

  void InformerLoop(std::string resource_version);
  void HandlePodEvent(const std::string& type, const std::string& object_json);
  void LoopOnce();
  void FlushLoop();
  void ProbeLoop();
  void ProbeOnce();
  // The extender calls of one cycle; returns the failure ("" when bound) and whether it
  // failed in binding (handled as handleBindingCycleError).
  std::string RunCycle(const std::string& key, const std::string& pod_json, bool* bind_failed);
  std::string ReadyEndpoint();

  void MoveLocked(Queued& q, const std::string& key, PodQueue to, const std::string& cause,
                  const std::string& detail = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool BackingOffLocked(const Queued& q, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddUnschedulableIfNotPresentLocked(const std::string& key, int64_t cycle,
                                          const std::string& detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MoveAllLocked(const std::string& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Stopping() const;

  const SchedulerQueueOptions options_;
  std::unique_ptr<KubeClient> client_;
  WatchStopper stopper_;
  std::vector<std::thread> threads_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Queued> pods_ ABSL_GUARDED_BY(mu_);  // unassigned pods, by key
  std::set<std::string> bound_ ABSL_GUARDED_BY(mu_);          // assigned pods seen
  std::deque<std::string> active_ ABSL_GUARDED_BY(mu_);
  int64_t scheduling_cycle_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t move_request_cycle_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<QueueMove> moves_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> endpoint_ready_ ABSL_GUARDED_BY(mu_);
  std::string last_endpoint_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse::testing

#endif  // GSE_TESTSUPPORT_SCHEDULER_QUEUE_H_
