// LiveCluster: runs the extender against a real Kubernetes API server — client configuration
// (kubeconfig or in-cluster service account), the reflector that keeps the Mirror in sync, the
// ApiBinder that binds through the API, optional leader election, and the take-over requeue —
// and keeps the service's readiness equal to "mirror synced and (leader or no election)",
// telling why when it is not (ExtenderService::SetReadiness): not synced; synced but not the
// leader, and which replica leads as the Lease says; shutting down.
//
// A take-over decides only on a fresh mirror: each time this replica gains the Lease it asks
// the reflector for a relist and stays not ready ("not synced", Readiness::TakingOver) until
// a list sent after the acquisition has been applied, as client-go controllers wait for
// their informers to sync after OnStartedLeading. A follower's watch may lag behind the API
// server (a slow watch cache, a stalled stream): without this, a new leader could hand out
// units that its predecessor bound moments before (issue 12). The cost is one full LIST per
// take-over (at start-up a second one when the Lease is gained during the initial list).
//
// Fencing (--leader-elect): the ApiBinder sends a binding POST (first or retry) only while
// the elector's Lease is valid on this replica's own clock (LeaderElector::LeaseValid, checked
// lock-free right before the send), so a leader that stalled or stepped down never binds
// after a new leader may have relisted; such a bind is answered not bound (lease_lost).
//
// Each time the service becomes ready (start-up or take-over) the PodRequeuer touches the
// pending GPU pods so that kube-scheduler retries the ones it parked meanwhile
// (kube/pod_requeue.h); losing readiness cancels it.
//
// Use (main.cc):
//   auto live = LiveCluster::Connect(*LiveClusterOptionsFromFlags(), &mirror);  // errors: exit 2
//   ExtenderService service(&mirror, policy, live->binder(), ...);
//   live->Start(&service);  // not ready until the first full list is applied (and leading)
//   ... serve ...
//   live->Stop();  // not ready at once; waits for the binds in flight, then releases the
//                  // lease and stops the watches
// Thread-safe after Connect; Start and Stop are called once each from the owner.
#ifndef GSE_EXTENDER_LIVE_CLUSTER_H_
#define GSE_EXTENDER_LIVE_CLUSTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/api_binder.h"
#include "extender/extender_service.h"
#include "kube/leader_election.h"
#include "kube/kube_client.h"
#include "kube/pod_requeue.h"
#include "kube/agent_leases.h"
#include "kube/kube_reflector.h"
#include "state/mirror.h"

ABSL_DECLARE_FLAG(std::string, kubeconfig);
ABSL_DECLARE_FLAG(std::string, kube_context);
ABSL_DECLARE_FLAG(std::string, in_cluster);
ABSL_DECLARE_FLAG(double, api_qps);
ABSL_DECLARE_FLAG(int32_t, api_burst);
ABSL_DECLARE_FLAG(absl::Duration, api_timeout);
ABSL_DECLARE_FLAG(absl::Duration, bind_timeout);
ABSL_DECLARE_FLAG(absl::Duration, resync_period);
ABSL_DECLARE_FLAG(absl::Duration, watch_timeout);
ABSL_DECLARE_FLAG(bool, leader_elect);
ABSL_DECLARE_FLAG(absl::Duration, leader_elect_lease_duration);
ABSL_DECLARE_FLAG(absl::Duration, leader_elect_renew_deadline);
ABSL_DECLARE_FLAG(absl::Duration, leader_elect_retry_period);
ABSL_DECLARE_FLAG(std::string, leader_elect_resource_name);
ABSL_DECLARE_FLAG(std::string, leader_elect_resource_namespace);
ABSL_DECLARE_FLAG(bool, takeover_requeue);
ABSL_DECLARE_FLAG(double, takeover_requeue_qps);
ABSL_DECLARE_FLAG(absl::Duration, takeover_requeue_settle);
ABSL_DECLARE_FLAG(std::string, agent_lease_namespace);
ABSL_DECLARE_FLAG(absl::Duration, agent_heartbeat_timeout);
ABSL_DECLARE_FLAG(std::string, dra_mode);

namespace gse {

// The flags above in --help order (for main.cc's usage text).
extern const char* const kLiveClusterFlags[];
extern const int kLiveClusterFlagCount;

// --dra-mode (docs/dra.md).
enum class DraMode { kOff, kOn, kAuto };
// The discovery path that --dra-mode=auto asks: served (2xx) -> on, 404 -> off.
inline constexpr absl::string_view kDraDiscoveryPath = "/apis/resource.k8s.io/v1";

struct LiveClusterOptions {
  std::string kubeconfig;  // a kubeconfig file, or empty for in-cluster
  std::string context;     // kubeconfig context; empty = current-context
  bool in_cluster = false;
  InClusterPaths in_cluster_paths;
  KubeClientOptions client;
  ReflectorOptions reflector;  // on_synced is set by LiveCluster
  ApiBinderOptions binder;
  bool leader_elect = false;
  LeaderElectionOptions election;  // on_change and on_holder are set by LiveCluster
  bool requeue = true;             // --takeover-requeue
  PodRequeueOptions requeue_options;  // `wants` is set by LiveCluster (catalog requests)
  // Longest wait in Stop() for the binds in flight before the lease is released; they are
  // bounded by binder.deadline (--bind-timeout), so that plus a margin.
  absl::Duration drain_timeout = absl::ZeroDuration();  // zero: binder.deadline + 1 s
  int connect_attempts = 5;        // start-up reachability check
  absl::Duration connect_backoff = absl::Seconds(1);
  // The node agents' heartbeat Leases (kube/agent_leases.h, docs/agent.md "Agent liveness"):
  // their namespace (empty: not watched, no node is ever judged stale) and how long a node
  // with an agent may go without a renewal before filter and bind refuse it.
  std::string agent_lease_namespace = "gpu-slice-agent";
  absl::Duration agent_heartbeat_timeout = absl::Seconds(60);
  // Called on every change of (synced, leader), e.g. for MirrorMetrics::SetSynced/SetLeader.
  std::function<void(bool synced, bool leader)> on_state;
  // Called for every write after the write limiter decided (op "bind" or "lease"), e.g. for
  // ExtenderMetrics::ObserveApiWrite. May be empty.
  std::function<void(absl::string_view op, bool sent, absl::Duration waited)> on_api_write;
  // --dra-mode; Connect resolves kAuto by discovery and sets reflector.dra and the mirror's
  // DRA mode (ClusterState::EnableDra) before anything is listed.
  DraMode dra_mode = DraMode::kOff;
};

// kOn/kOff as given; kAuto: whether `client`'s API server serves resource.k8s.io/v1 (a 404 of
// kDraDiscoveryPath says no), Unavailable when the discovery call fails otherwise.
absl::StatusOr<bool> ResolveDraMode(DraMode mode, KubeClient& client);

// True when the flags (or the environment) ask for a live cluster: --kubeconfig is set, or
// --in-cluster=true, or --in-cluster=auto (the default) inside a pod (KUBERNETES_SERVICE_HOST).
bool LiveClusterRequested();
// Options from the flags; an error names the flag and what is wrong with its value.
absl::StatusOr<LiveClusterOptions> LiveClusterOptionsFromFlags();
// The same checks without requiring an API: a standalone run (no --kubeconfig, not in a pod)
// calls it too, so that a bad value of a live-cluster flag (--dra-mode=maybe) is an error
// naming the flag rather than a setting silently ignored.
absl::StatusOr<LiveClusterOptions> ParseLiveClusterFlags();

class LiveCluster {
 public:
  // Loads the client configuration, creates the client and checks that the server answers
  // (retrying with backoff). Every error names the file, field or flag that is wrong.
  static absl::StatusOr<std::unique_ptr<LiveCluster>> Connect(LiveClusterOptions options,
                                                              Mirror* mirror);
  ~LiveCluster();

  Binder* binder() { return binder_.get(); }
  KubeClient* client() { return client_.get(); }
  const KubeClient* client() const { return client_.get(); }

  // Sets the service not ready, starts the reflector, the requeuer and (with --leader-elect)
  // the elector.
  void Start(ExtenderService* service);
  // Stops deciding at once (not ready: "shutting down"), waits until the binds in flight have
  // answered (at most drain_timeout) so that no bind of ours can still commit once another
  // replica may lead, then releases the lease and stops the watches.
  void Stop();

  bool synced() const;
  bool leader() const;  // true without leader election
  bool dra() const { return options_.reflector.dra; }  // DRA mode as resolved by Connect
  // For ServiceOptions::dra_claim_name: GET of the pod, its
  // status.extendedResourceClaimStatus.resourceClaimName ("" when absent). Null without DRA
  // mode. Uses client(), so it must not outlive this LiveCluster.
  std::function<absl::StatusOr<std::string>(absl::string_view ns, absl::string_view pod)>
  DraClaimNameReader();
  // For ServiceOptions::dra_claim_read: GET of one ResourceClaim (resource.k8s.io/v1),
  // decoded as the watch decodes it. Null without DRA mode; must not outlive this LiveCluster.
  std::function<absl::StatusOr<DraResourceClaim>(absl::string_view ns, absl::string_view name)>
  DraClaimReader();
  // Leader election's view (all zero / "" without election).
  LeadershipStats leadership() const;
  std::string lease_holder() const;
  PodRequeueCounters requeue_counters() const;
  ReflectorCounters reflector_counters() const;
  // Failed API calls outside the reflector (they only grow), for gse_api_errors_total.
  struct ApiCallErrors {
    int64_t bind = 0;   // binding POSTs
    int64_t get = 0;    // reads of a pod after an ambiguous bind
    int64_t lease = 0;  // leader election
  };
  ApiCallErrors api_call_errors() const;
  const KubeReflector* reflector() const { return reflector_.get(); }
  // One liveness sweep (Mirror::SweepAgentLiveness) at `now` from the agent Lease table; the
  // stale nodes with an agent. Judges nothing (returns what the mirror shows) while the table
  // does not reflect the API server (not listed yet, or its watch failed): losing the Lease
  // stream must not make every node stale. Without agent_lease_namespace: 0.
  int SweepAgentLiveness(absl::Time now);
  const AgentLeaseTable* agent_leases() const { return agent_leases_.get(); }
  AgentLeaseCounters agent_lease_counters() const;

 private:
  LiveCluster(LiveClusterOptions options, Mirror* mirror, std::unique_ptr<KubeClient> client,
              std::unique_ptr<KubeClient> election_client);
  // Recomputes readiness from (stopped, synced, leader, take-over list applied, holder), tells
  // the service and
  // on_state, and starts or cancels the requeue when readiness turns on or off.
  void Update();
  std::string LeaseName() const;

  LiveClusterOptions options_;
  Mirror* const mirror_;
  std::unique_ptr<KubeClient> client_;
  // Lease calls have a client (and so a write limiter) of their own, as kube-scheduler's
  // leader election has: a renewal never waits behind a burst of binds. Null without
  // --leader-elect.
  std::unique_ptr<KubeClient> election_client_;
  std::unique_ptr<ApiBinder> binder_;
  std::unique_ptr<KubeReflector> reflector_;
  // Set by Start() before any thread of theirs (or the reflector's) runs, read-only after.
  std::unique_ptr<LeaderElector> elector_;
  // elector_ for the binder's fencing check (ApiBinderOptions::lease_valid), which bind
  // threads call lock-free; null until Start() created the elector, never reset after.
  std::atomic<const LeaderElector*> fence_{nullptr};
  std::unique_ptr<PodRequeuer> requeuer_;
  // Both null without agent_lease_namespace; created in the constructor, read-only after.
  std::unique_ptr<AgentLeaseTable> agent_leases_;
  std::unique_ptr<AgentLeaseWatcher> agent_lease_watcher_;
  // Names this process's take-overs in the requeue annotation: the elector's identity, or a
  // fresh one without election.
  std::string term_prefix_;

  mutable absl::Mutex mu_;
  ExtenderService* service_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  bool leader_ ABSL_GUARDED_BY(mu_) = false;
  // The reflector's number of the list a take-over waits for (0: none; without election), and
  // of the last list applied (KubeReflector::RequestResync, ReflectorOptions::on_listed).
  int64_t takeover_list_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_list_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time acquired_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string holder_ ABSL_GUARDED_BY(mu_);  // the Lease holder as the elector last saw it
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;   // what the service was last told
  int64_t terms_ ABSL_GUARDED_BY(mu_) = 0;    // times it became ready
};

}  // namespace gse

#endif  // GSE_EXTENDER_LIVE_CLUSTER_H_
