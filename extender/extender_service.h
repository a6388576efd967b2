// ExtenderService: kube-scheduler's extender v1 verbs (filter, prioritize, bind, preempt) as
// functions from a request body to a response, over the Mirror and a PlacementPolicy.
//
// No HTTP here (extender/http_server.h serves it), so every verb is testable with the
// captured kube-scheduler bodies directly. Wire format: shared/protocol/PROTOCOL.md —
// capitalised keys, `null` for empty fields, prioritize answers a bare array, preempt always
// answers NodeNameToMetaVictims, protocol errors go in `Error` with HTTP 200.
// Thread-safe: any number of threads may call any verb at once; decisions read the Mirror
// under its reader lock and bind commits under its writer lock (mirror.h).
#ifndef GSE_EXTENDER_EXTENDER_SERVICE_H_
#define GSE_EXTENDER_EXTENDER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "extender/decision_log.h"
#include "extender/metrics.h"
#include "kube/binder.h"
#include "scoring/pod_request.h"
#include "scoring/policies.h"
#include "state/dra_objects.h"
#include "state/mirror.h"

namespace gse {

// What the HTTP layer sends back. status is 200 for every protocol answer (including those
// with an `Error`), 400 for malformed or mistyped bodies (JSON body naming the problem).
struct VerbResult {
  int status = 200;
  std::string body;
  // Outcome label for metrics: "ok", "error" (protocol Error), "bad_request".
  std::string outcome = "ok";
};

struct ServiceOptions {
  // Pending pods remembered from filter/prioritize for bind (bind carries only names).
  size_t max_pending_pods = 100000;
  // Where decisions are counted; may be null (tests, replay).
  ExtenderMetrics* metrics = nullptr;
  // Where each bind decision is logged (one JSON line); null = DecisionLog::Default(), the
  // binary's stderr log at the --decision-log level. Embedders that want silence pass a
  // DecisionLog with DecisionLogLevel::kOff.
  DecisionLog* decision_log = nullptr;
  // DRA mode (docs/dra.md): reads a pod's status.extendedResourceClaimStatus.resourceClaimName
  // from the API (one GET; LiveCluster::DraClaimNameReader). Bind on a DRA node verifies that
  // claim, not an older one of a failed attempt the mirror may still hold. Empty: the mirror's
  // only live claim of the pod is taken.
  std::function<absl::StatusOr<std::string>(absl::string_view ns, absl::string_view pod)>
      dra_claim_name;
  // DRA mode: reads a ResourceClaim from the API (one GET; LiveCluster::DraClaimReader). Bind
  // calls it when the claim the pod's status names has not reached the mirror within
  // kDraClaimWait (a lagging claim watch), and verifies the claim as read
  // (DraAllocatedUnits). Empty: bind refuses then, and kube-scheduler retries the pod.
  std::function<absl::StatusOr<DraResourceClaim>(absl::string_view ns, absl::string_view name)>
      dra_claim_read;
  // Prioritize lets the policy score pods that ask for no catalog resource (--score-all-pods;
  // docs/fgd.md): kube-scheduler sends them when the extender entry has no managedResources.
  // fgd scores how their cpu/memory change the fragmentation of each node's idle GPUs, every
  // other policy scores 0. false: such pods score 0 on every node. Filter passes them on
  // every node and bind binds them without units either way (I6). fgd then also names its
  // best node outright (DecisionCore::Options::every_pod).
  bool score_pods_without_offering = false;
};

// Whether a replica decides, and if not, what it tells kube-scheduler and operators: the
// filter/bind Error text, prioritize's 503 body and /readyz say the same.
struct Readiness {
  enum class State { kReady, kNotSynced, kNotLeader, kStopping };
  State state = State::kReady;
  std::string message;  // "" when ready
  std::string leader;   // kNotLeader: the identity holding the Lease as last seen, "" if none
  bool ready() const { return state == State::kReady; }
  // "ready", "not_synced", "not_leader", "stopping": /readyz's `reason`. A refused bind is
  // counted with outcome not_synced or not_leader (stopping: the replica gives its lease up).
  const char* label() const;

  static Readiness Ready();
  static Readiness NotSynced();  // "extender cache not synced yet"
  // Not synced, for a replica that has just gained the Lease: its mirror may lag behind what
  // the previous leader bound (a follower's watch can lag), so it decides only once a list
  // sent after the take-over is applied. "extender cache not synced yet: ...".
  static Readiness TakingOver();
  // "not the leader; <leader> leads (Lease <lease>)", or when no live holder is known "not the
  // leader; no replica holds the Lease <lease> right now (a take-over is under way)".
  static Readiness NotLeader(const std::string& leader, const std::string& lease);
  static Readiness Stopping();   // "extender is shutting down"
};

class ExtenderService {
 public:
  ExtenderService(Mirror* mirror, std::unique_ptr<PlacementPolicy> policy, Binder* binder,
                  ServiceOptions options = {});
  ~ExtenderService();

  // Bodies are taken by value so that they can be parsed in place.
  VerbResult Filter(std::string body);
  VerbResult Prioritize(std::string body);
  VerbResult Bind(std::string body);
  // A bind answered without being attempted (the HTTP server's --max-concurrent-binds was
  // reached): nothing is reserved or sent; counted in gse_bind_total{offering="none"} with
  // `outcome` and logged like any bind decision, naming the pod when the body says which.
  VerbResult RefuseBind(std::string body, absl::string_view outcome, absl::string_view message);
  VerbResult Preempt(std::string body);
  // GET /debug/state: every unit and project, for operators and external audits.
  std::string DebugStateJson() const;

  // Not ready until the mirror holds a complete initial state and this replica leads (set by
  // the owner, LiveCluster). While not ready, filter and bind answer the protocol Error with
  // the readiness message (why: not synced, not the leader and who leads, shutting down);
  // prioritize, which has no Error field, answers HTTP 503 with it (kube-scheduler ignores
  // prioritize errors); preempt answers an empty NodeNameToMetaVictims (no preemption).
  // SetReady(false) is SetReadiness(NotSynced()).
  void SetReady(bool ready);
  void SetReadiness(Readiness readiness);
  Readiness readiness() const;
  bool Ready() const { return ready_.load(); }
  // Binds between their readiness check and their answer (the Binder call included). A bind
  // counts itself before it reads readiness, so once SetReadiness(not ready) has returned,
  // every bind that may still commit is counted here until it has answered.
  int64_t BindsInFlight() const { return binds_in_flight_.load(); }
  // Blocks until BindsInFlight() is 0 (true) or `timeout` has passed (false). For shutdown:
  // LiveCluster releases the Lease only after the binds this replica started have answered.
  bool WaitForBindsToFinish(absl::Duration timeout) const;

  const PlacementPolicy& policy() const { return *policy_; }

 private:
  struct Impl;
  // readiness() for an answer that refuses (never "ready").
  Readiness WhyNotReady() const;
  // Bind on a DRA node with ServiceOptions::dra_claim_name: "namespace/name" of the pod's
  // extended-resource claim as its status names it (one GET), FailedPrecondition when it
  // cannot be read or names none; "" elsewhere or without the hook.
  absl::StatusOr<std::string> DraClaimKey(const BindTarget& target,
                                          const PodRequest& request) const;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<PlacementPolicy> policy_;
  // ready_ is the verbs' fast check; readiness_ says why not (read only when not ready).
  std::atomic<bool> ready_{true};
  mutable absl::Mutex readiness_mu_;
  Readiness readiness_ ABSL_GUARDED_BY(readiness_mu_);
  std::atomic<int64_t> binds_in_flight_{0};
};

}  // namespace gse

#endif  // GSE_EXTENDER_EXTENDER_SERVICE_H_
