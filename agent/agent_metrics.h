// AgentMetrics: the node agent's Prometheus metrics (prometheus-cpp registry, served as text
// on /metrics). Labels are bounded: resource (served offerings, a handful), outcome and
// reason (fixed sets).
//   gse_agent_units{resource}                            units advertised per offering
//   gse_agent_unhealthy_units{resource}                  of those, unhealthy
//   gse_agent_allocations_total{resource,outcome}        Allocate answers: allocated,
//                                                        no_candidate, ambiguous, refused
//   gse_agent_identification_failures_total{resource,reason}  no_candidate | ambiguous
//   gse_agent_prestart_checks_total{resource,outcome}    ok | refused | unavailable
//   gse_agent_audit_mismatches_total{resource}           audit findings
//   gse_agent_nvml_health_events_supported               GPUs with NVML health events
//   gse_agent_confirmations_total                        gpu.themelio.io/allocated patches
//   gse_agent_api_errors_total{call}                     failed calls: pod_list, pod_watch,
//                                                        patch_pod, patch_node, event,
//                                                        pod_resources
//   gse_agent_pods_synced                                1 once the node's pods were listed
//   gse_agent_plugins_registered                         1 while every plugin is registered
// Thread-safe (prometheus-cpp metrics are atomic; families are created up front).
#ifndef GSE_AGENT_AGENT_METRICS_H_
#define GSE_AGENT_AGENT_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include "agent/device_plugin_service.h"
#include "agent/unit_map.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace gse::agent {

class AgentMetrics : public PluginObserver {
 public:
  explicit AgentMetrics(const UnitMap& units);

  void OnAllocate(const std::string& resource, const AdmissionResult& result) override;
  void OnPreStart(const std::string& resource, const AdmissionResult& result) override;
  void OnAuditMismatch(const std::string& resource);
  void SetUnhealthyUnits(const std::string& resource, int count);
  void SetHealthEventsSupported(int gpus);
  void OnConfirmation();
  // `call` is one of the fixed set above; `n` failures at once (counters only grow).
  void OnApiError(const std::string& call, int64_t n = 1);
  void SetPodsSynced(bool synced);
  void SetPluginsRegistered(bool registered);

  // The text exposition format of every metric.
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& units_;
  prometheus::Family<prometheus::Gauge>& unhealthy_;
  prometheus::Family<prometheus::Counter>& allocations_;
  prometheus::Family<prometheus::Counter>& identification_;
  prometheus::Family<prometheus::Counter>& prestart_;
  prometheus::Family<prometheus::Counter>& audit_;
  prometheus::Gauge& health_supported_;
  prometheus::Counter& confirmations_;
  prometheus::Family<prometheus::Counter>& api_errors_;
  prometheus::Gauge& pods_synced_;
  prometheus::Gauge& plugins_registered_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_AGENT_METRICS_H_
