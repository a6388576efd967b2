// NodeAgent: one node's agent assembled from its parts, as the gpu-slice-agent binary runs it
// and as end-to-end tests run it in-process (several per process, one per node).
//
//   inventory ─► UnitMap ─► PluginRegistrar (one DevicePluginService per offering, kubelet)
//                               │ Allocate/PreStart
//   ApiPodSource ─────────► AdmissionGuard ◄── PodResourcesClient (kubelet's pod-resources)
//        │                      │ bookings
//        └──────────────► AuditLoop ─► ApiWriter (allocated annotations, Events, Node inventory)
//   NVML (optional) ─► HealthMonitor ─► DeviceHealth ─► ListAndWatch, inventory, metrics
//
// Start order: the pod source lists first (bounded wait: an agent whose API server is late
// still serves kubelet, and refuses what it cannot attribute), then the plugins are served and
// registered, then the audit loop and the health monitor run. Stop reverses it.
// Thread-safety: Create/Start/Stop from one thread; Healthy(), metrics() and the accessors
// from any thread.
#ifndef GSE_AGENT_NODE_AGENT_H_
#define GSE_AGENT_NODE_AGENT_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "agent/admission_guard.h"
#include "agent/agent_metrics.h"
#include "agent/api_pod_source.h"
#include "agent/api_writer.h"
#include "agent/audit_loop.h"
#include "agent/device_health.h"
#include "agent/device_plugin_service.h"
#include "agent/health_monitor.h"
#include "agent/heartbeat.h"
#include "agent/inventory.h"
#include "agent/nvml_library.h"
#include "agent/plugin_registrar.h"
#include "agent/pod_resources.h"
#include "agent/unit_map.h"
#include "kube/kube_client.h"
#include "state/catalog.h"

namespace gse::agent {

struct NodeAgentOptions {
  std::string node;
  std::vector<ServedSpec> served;
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  RegistrarOptions registrar;
  PluginOptions plugin;
  AdmissionOptions admission;  // .node is set from `node`
  AuditLoopOptions audit;      // .node is set from `node`
  ApiPodSourceOptions pods;    // .node is set from `node`
  HeartbeatOptions heartbeat;  // .node is set from `node`
  // How long Start waits for the first list of the node's pods before serving kubelet.
  absl::Duration initial_sync_timeout = absl::Seconds(5);
};

class NodeAgent {
 public:
  // Builds the unit map from `inventory` (errors: see UnitMap::Build). `nvml` (may be null)
  // delivers health events; `catalog` and `client` must outlive the agent.
  static absl::StatusOr<std::unique_ptr<NodeAgent>> Create(const Catalog* catalog,
                                                           KubeClient* client,
                                                           Inventory inventory,
                                                           std::unique_ptr<NvmlLibrary> nvml,
                                                           NodeAgentOptions options);
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Errors: the plugin sockets cannot be served (device-plugins directory missing or not
  // writable). Kubelet or the API server being unavailable is not an error: both are retried.
  absl::Status Start();
  void Stop();

  // Liveness: the pod source has listed once and every plugin is being served; `why` (may be
  // null) says what is missing. Registration with kubelet is reported, not required: kubelet
  // restarts are normal and the agent re-registers by itself.
  bool Healthy(std::string* why) const;
  std::string MetricsText();

  const UnitMap& units() const { return units_; }
  DeviceHealth& health() { return health_; }
  AdmissionGuard& guard() { return *guard_; }
  AuditLoop& audit() { return *audit_; }
  ApiPodSource& pods() { return *pods_; }
  PluginRegistrar& registrar() { return *registrar_; }
  AgentMetrics& metrics() { return *metrics_; }

 private:
  class Observer;
  NodeAgent(const Catalog* catalog, KubeClient* client, Inventory inventory, UnitMap units,
            std::unique_ptr<NvmlLibrary> nvml, NodeAgentOptions options);
  // Copies the pod source's and registrar's state into the gauges.
  void RefreshGauges();

  const Catalog* catalog_;
  KubeClient* client_;
  const Inventory inventory_;
  const UnitMap units_;
  std::unique_ptr<NvmlLibrary> nvml_;
  NodeAgentOptions options_;

  DeviceHealth health_;
  std::unique_ptr<AgentMetrics> metrics_;
  std::unique_ptr<Observer> observer_;
  std::unique_ptr<ApiPodSource> pods_;
  std::unique_ptr<PodResourcesClient> pod_resources_;
  std::unique_ptr<AdmissionGuard> guard_;
  std::unique_ptr<ApiWriter> writer_;
  std::unique_ptr<AuditLoop> audit_;
  std::unique_ptr<PluginRegistrar> registrar_;
  std::unique_ptr<HealthMonitor> health_monitor_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::atomic<bool> started_{false};
  absl::Mutex gauges_mu_;
  // What the metrics already show of the pod source's counters (they only grow).
  PodSourceCounters reported_pod_counters_ ABSL_GUARDED_BY(gauges_mu_);
  int64_t reported_heartbeat_failures_ ABSL_GUARDED_BY(gauges_mu_) = 0;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_NODE_AGENT_H_
