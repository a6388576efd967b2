// NodeAgent: assembly, start and stop; see node_agent.h.
#include "agent/node_agent.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/agent_log.h"

namespace gse::agent {

// Metrics for every decision; a successful Allocate also asks the audit loop to confirm it.
class NodeAgent::Observer : public PluginObserver {
 public:
  Observer(AgentMetrics* metrics, AuditLoop* audit) : metrics_(metrics), audit_(audit) {}
  void OnAllocate(const std::string& resource, const AdmissionResult& result) override {
    metrics_->OnAllocate(resource, result);
    LogEvent(result.status.ok() ? "allocated" : "allocate_refused",
             {{"resource", resource},
              {"outcome", AdmissionOutcomeName(result.outcome)},
              {"pod", result.pod_key},
              {"message", std::string(result.status.message())}});
    if (result.status.ok()) audit_->Kick();
  }
  void OnPreStart(const std::string& resource, const AdmissionResult& result) override {
    metrics_->OnPreStart(resource, result);
    if (!result.status.ok()) {
      LogEvent("prestart_refused", {{"resource", resource},
                                    {"pod", result.pod_key},
                                    {"message", std::string(result.status.message())}});
    }
  }

 private:
  AgentMetrics* metrics_;
  AuditLoop* audit_;
};

absl::StatusOr<std::unique_ptr<NodeAgent>> NodeAgent::Create(const Catalog* catalog,
                                                             KubeClient* client,
                                                             Inventory inventory,
                                                             std::unique_ptr<NvmlLibrary> nvml,
                                                             NodeAgentOptions options) {
  if (options.node.empty()) return absl::InvalidArgumentError("node name: empty");
  absl::StatusOr<UnitMap> units = UnitMap::Build(inventory, *catalog, options.served);
  if (!units.ok()) return units.status();
  return std::unique_ptr<NodeAgent>(new NodeAgent(catalog, client, std::move(inventory),
                                                  *std::move(units), std::move(nvml),
                                                  std::move(options)));
}

NodeAgent::NodeAgent(const Catalog* catalog, KubeClient* client, Inventory inventory,
                     UnitMap units, std::unique_ptr<NvmlLibrary> nvml, NodeAgentOptions options)
    : catalog_(catalog),
      client_(client),
      inventory_(std::move(inventory)),
      units_(std::move(units)),
      nvml_(std::move(nvml)),
      options_(std::move(options)) {
  options_.admission.node = options_.node;
  options_.audit.node = options_.node;
  options_.pods.node = options_.node;
  options_.heartbeat.node = options_.node;
  heartbeat_ = std::make_unique<Heartbeat>(client_, options_.heartbeat);
  metrics_ = std::make_unique<AgentMetrics>(units_);
  pods_ = std::make_unique<ApiPodSource>(client_, options_.pods);
  pod_resources_ = std::make_unique<PodResourcesClient>(options_.pod_resources_socket);
  guard_ = std::make_unique<AdmissionGuard>(catalog_, pods_.get(), pod_resources_.get(),
                                            options_.admission);
  writer_ = std::make_unique<ApiWriter>(client_, options_.node);
  audit_ = std::make_unique<AuditLoop>(&units_, catalog_, pods_.get(), pod_resources_.get(),
                                       guard_.get(), &health_, metrics_.get(), writer_.get(),
                                       options_.audit);
  observer_ = std::make_unique<Observer>(metrics_.get(), audit_.get());
  registrar_ = std::make_unique<PluginRegistrar>(&units_, guard_.get(), &health_,
                                                 options_.plugin, observer_.get(),
                                                 options_.registrar);
  if (nvml_ != nullptr) {
    health_monitor_ = std::make_unique<HealthMonitor>(
        nvml_.get(), inventory_, &health_,
        [this](const std::string&, const std::string&) { audit_->Kick(); });
  }
}

NodeAgent::~NodeAgent() { Stop(); }

absl::Status NodeAgent::Start() {
  // First: the extender refuses a node whose agent inventory is there but whose heartbeat is
  // not (docs/agent.md "Agent liveness").
  heartbeat_->Start();
  pods_->Start();
  if (!pods_->WaitForSync(options_.initial_sync_timeout)) {
    LogEvent("pods_not_synced", {{"node", options_.node},
                                 {"waited", absl::FormatDuration(options_.initial_sync_timeout)},
                                 {"effect", "serving kubelet anyway; unattributable calls are refused"}});
  }
  if (absl::Status s = registrar_->Start(); !s.ok()) {
    pods_->Stop();
    heartbeat_->Stop();
    return s;
  }
  audit_->Start();
  if (health_monitor_ != nullptr) {
    absl::StatusOr<int> supported = health_monitor_->Start();
    if (!supported.ok()) {
      LogEvent("nvml_health_unavailable", {{"error", std::string(supported.status().message())}});
    } else {
      metrics_->SetHealthEventsSupported(*supported);
    }
  }
  started_.store(true);
  std::vector<std::string> served;
  for (const ServedOffering& o : units_.offerings()) {
    served.push_back(absl::StrCat(o.resource(), "=", o.units().size(), "x", o.replicas()));
  }
  LogEvent("started", {{"node", options_.node}, {"served", absl::StrJoin(served, ",")}});
  return absl::OkStatus();
}

void NodeAgent::Stop() {
  if (health_monitor_ != nullptr) health_monitor_->Stop();
  // kubelet first: no new calls reach a guard whose sources are going away.
  registrar_->Stop();
  audit_->Stop();
  pods_->Stop();
  heartbeat_->Stop();  // from here on the extender sees the node's agent go stale
  if (started_.exchange(false)) LogEvent("stopped", {{"node", options_.node}});
}

void NodeAgent::RefreshGauges() {
  const PodSourceCounters now = pods_->counters();
  metrics_->SetPodsSynced(now.synced);
  metrics_->SetPluginsRegistered(registrar_->registered());
  absl::MutexLock lock(&gauges_mu_);
  // List and watch failures (corrupt lines count as watch failures) since the last scrape.
  metrics_->OnApiError("pod_list", now.list_errors - reported_pod_counters_.list_errors);
  metrics_->OnApiError("pod_watch", now.watch_errors - reported_pod_counters_.watch_errors);
  reported_pod_counters_ = now;
  const int64_t heartbeat_failures = heartbeat_->counters().failures;
  metrics_->OnApiError("lease", heartbeat_failures - reported_heartbeat_failures_);
  reported_heartbeat_failures_ = heartbeat_failures;
}

std::string NodeAgent::MetricsText() {
  RefreshGauges();
  return metrics_->Serialize();
}

bool NodeAgent::Healthy(std::string* why) const {
  std::vector<std::string> missing;
  if (!pods_->counters().synced) missing.push_back("the node's pods were never listed");
  if (!started_.load()) missing.push_back("not started");
  if (why != nullptr) {
    *why = missing.empty() ? (registrar_->registered() ? "ok" : "ok (registering with kubelet)")
                           : absl::StrJoin(missing, "; ");
  }
  return missing.empty();
}

}  // namespace gse::agent
