// Heartbeat: the node agent's liveness signal to the extender (docs/agent.md "Agent
// liveness"). Every `interval` it renews coordination.k8s.io/v1 Lease gse-agent-<node> in its
// namespace (kube/agent_leases.h): a PUT conditional on the resourceVersion of the Lease its
// previous write returned (one request per renewal), or, after a 409 (someone else wrote it)
// or a failure, GET then PUT; POST when the Lease does not exist.
// holderIdentity "<node>/<pod>", renewTime the agent's clock (the extender dates renewals
// with its own receive time), leaseDurationSeconds 3 x interval (informational: the
// extender's --agent-heartbeat-timeout decides).
//
// The loop's first renewal goes out as soon as Start runs (NodeAgent starts it before the pod
// list and kubelet), so a freshly started agent is normally live before it publishes its
// inventory. A failed renewal is logged and counted
// (gse_agent_api_errors_total{call="lease"}) and retried at the next tick; the agent keeps
// serving kubelet (the extender, not the agent, decides what a missed heartbeat means).
// Thread-safe; one thread; Start/Stop from the owner.
#ifndef GSE_AGENT_HEARTBEAT_H_
#define GSE_AGENT_HEARTBEAT_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace gse::agent {

struct HeartbeatOptions {
  std::string node;                              // set from NodeAgentOptions::node
  std::string lease_namespace = "gpu-slice-agent";  // empty: no heartbeat at all
  std::string holder;                            // empty: the node name
  absl::Duration interval = absl::Seconds(20);   // --heartbeat-interval
};

struct HeartbeatCounters {
  int64_t renewals = 0;  // successful PUTs or POSTs
  int64_t failures = 0;  // rounds that wrote nothing
  absl::Time last_renewal = absl::InfinitePast();
};

class Heartbeat {
 public:
  Heartbeat(KubeClient* client, HeartbeatOptions options);
  ~Heartbeat();
  // Starts the loop (which renews at once). No-op without a namespace.
  void Start();
  void Stop();
  // One renewal now (the loop's step; tests).
  absl::Status RenewOnce();
  HeartbeatCounters counters() const;

 private:
  void Run();
  std::string Path(bool collection) const;

  KubeClient* const client_;
  const HeartbeatOptions options_;
  mutable absl::Mutex mu_;
  HeartbeatCounters counters_ ABSL_GUARDED_BY(mu_);
  // The Lease as our last successful write returned it ("" : none, or it may be stale):
  // the next renewal PUTs from it without a GET.
  std::string last_written_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_HEARTBEAT_H_
