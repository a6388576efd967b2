// AgentMetrics: families, observer callbacks, text serialisation.
#include "agent/agent_metrics.h"

#include <sstream>

#include "prometheus/text_serializer.h"

namespace gse::agent {
namespace {
constexpr const char* kApiCalls[] = {"pod_list", "pod_watch", "patch_pod", "patch_node", "event",
                                     "pod_resources", "lease"};
}  // namespace

AgentMetrics::AgentMetrics(const UnitMap& units)
    : registry_(std::make_shared<prometheus::Registry>()),
      units_(prometheus::BuildGauge().Name("gse_agent_units")
                 .Help("Units advertised per served offering").Register(*registry_)),
      unhealthy_(prometheus::BuildGauge().Name("gse_agent_unhealthy_units")
                     .Help("Advertised units that are unhealthy").Register(*registry_)),
      allocations_(prometheus::BuildCounter().Name("gse_agent_allocations_total")
                       .Help("Allocate answers by outcome").Register(*registry_)),
      identification_(prometheus::BuildCounter().Name("gse_agent_identification_failures_total")
                          .Help("Allocate calls whose pod could not be identified")
                          .Register(*registry_)),
      prestart_(prometheus::BuildCounter().Name("gse_agent_prestart_checks_total")
                    .Help("PreStartContainer verifications by outcome").Register(*registry_)),
      audit_(prometheus::BuildCounter().Name("gse_agent_audit_mismatches_total")
                 .Help("Audit findings: devices outside the annotated unit, shared tickets, "
                       "units serving two projects").Register(*registry_)),
      health_supported_(prometheus::BuildGauge().Name("gse_agent_nvml_health_events_supported")
                            .Help("GPUs that deliver NVML health events").Register(*registry_)
                            .Add({})),
      confirmations_(prometheus::BuildCounter().Name("gse_agent_confirmations_total")
                         .Help("Pods whose allocation was confirmed with the "
                               "gpu.themelio.io/allocated annotation")
                         .Register(*registry_).Add({})),
      api_errors_(prometheus::BuildCounter().Name("gse_agent_api_errors_total")
                      .Help("Failed calls to the API server and to kubelet's pod-resources")
                      .Register(*registry_)),
      pods_synced_(prometheus::BuildGauge().Name("gse_agent_pods_synced")
                       .Help("1 once the node's pods were listed from the API server")
                       .Register(*registry_).Add({})),
      plugins_registered_(prometheus::BuildGauge().Name("gse_agent_plugins_registered")
                              .Help("1 while every device plugin is registered with kubelet")
                              .Register(*registry_).Add({})) {
  for (const char* call : kApiCalls) api_errors_.Add({{"call", call}});
  for (const ServedOffering& o : units.offerings()) {
    units_.Add({{"resource", o.resource()}}).Set(static_cast<double>(o.units().size()));
    unhealthy_.Add({{"resource", o.resource()}}).Set(0);
    for (const char* outcome : {"allocated", "no_candidate", "ambiguous", "refused"}) {
      allocations_.Add({{"resource", o.resource()}, {"outcome", outcome}});
    }
    for (const char* reason : {"no_candidate", "ambiguous"}) {
      identification_.Add({{"resource", o.resource()}, {"reason", reason}});
    }
    for (const char* outcome : {"ok", "refused", "unavailable"}) {
      prestart_.Add({{"resource", o.resource()}, {"outcome", outcome}});
    }
    audit_.Add({{"resource", o.resource()}});
  }
}

void AgentMetrics::OnAllocate(const std::string& resource, const AdmissionResult& result) {
  const char* outcome = AdmissionOutcomeName(result.outcome);
  allocations_.Add({{"resource", resource}, {"outcome", outcome}}).Increment();
  if (result.outcome == AdmissionOutcome::kNoCandidate ||
      result.outcome == AdmissionOutcome::kAmbiguous) {
    identification_.Add({{"resource", resource}, {"reason", outcome}}).Increment();
  }
}

void AgentMetrics::OnPreStart(const std::string& resource, const AdmissionResult& result) {
  const char* outcome = result.status.ok()                 ? "ok"
                        : absl::IsUnavailable(result.status) ? "unavailable"
                                                             : "refused";
  prestart_.Add({{"resource", resource}, {"outcome", outcome}}).Increment();
}

void AgentMetrics::OnAuditMismatch(const std::string& resource) {
  audit_.Add({{"resource", resource}}).Increment();
}

void AgentMetrics::SetUnhealthyUnits(const std::string& resource, int count) {
  unhealthy_.Add({{"resource", resource}}).Set(count);
}

void AgentMetrics::SetHealthEventsSupported(int gpus) { health_supported_.Set(gpus); }

void AgentMetrics::OnConfirmation() { confirmations_.Increment(); }

void AgentMetrics::OnApiError(const std::string& call, int64_t n) {
  if (n <= 0) return;
  for (const char* known : kApiCalls) {
    if (call == known) {
      api_errors_.Add({{"call", call}}).Increment(static_cast<double>(n));
      return;
    }
  }
}

void AgentMetrics::SetPodsSynced(bool synced) { pods_synced_.Set(synced ? 1 : 0); }

void AgentMetrics::SetPluginsRegistered(bool registered) {
  plugins_registered_.Set(registered ? 1 : 0);
}

std::string AgentMetrics::Serialize() const {
  prometheus::TextSerializer serializer;
  std::ostringstream out;
  serializer.Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace gse::agent
