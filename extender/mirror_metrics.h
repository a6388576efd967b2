// MirrorMetrics: gauges read off the mirror — inventory per offering, usage and quota per
// project, and the independent audit (ClusterState::Audit) whose oversubscription count must
// stay 0 — refreshed by Refresh(), which the service calls periodically (--audit-interval)
// from its own thread.
//
// Series are bounded by offerings x 4 states and projects x offerings; no node or pod labels.
// Pods that something else bound without our annotation are charged conservatively by the
// mirror (ClusterState::ApplyPod, HoldingSource::kCharged); gse_mirror_pods{source="charged"}
// counts them, so an operator sees that someone schedules GPU pods around the extender.
// Series of projects or offerings that disappear are removed, not left at stale values.
// Node agents' published inventories that disagree with allocatable (NodeOffering::
// inventory_problem; the mirror does not trust them) are counted in
// gse_agent_inventory_mismatches, and each (node, resource) newly flagged, or flagged for
// another reason, is logged once as a JSON line {"component":"extender",
// "event":"agent_inventory_mismatch","node":...,"resource":...,"problem":...} to `log`.
// DRA mode (docs/dra.md): disagreements between the catalog and the mirrored DeviceClasses
// (ClusterState::DraDrift) are counted in gse_dra_catalog_drift and each new one is logged
// once as {"component":"extender","event":"dra_catalog_drift","problem":...}; nodes with
// DRA-backed offerings are counted in gse_dra_nodes. Without DRA mode both stay 0.
// Thread-safe: Refresh() may run concurrently with scrapes (prometheus-cpp gauges are atomic;
// the set of series this class manages is guarded by mu_).
#ifndef GSE_EXTENDER_MIRROR_METRICS_H_
#define GSE_EXTENDER_MIRROR_METRICS_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "state/mirror.h"

namespace gse {

class MirrorMetrics {
 public:
  using LogSink = std::function<void(const std::string& json_line)>;
  // `log` receives the mismatch lines (default: stderr).
  MirrorMetrics(prometheus::Registry& registry, const Mirror* mirror, LogSink log = nullptr);

  // Reads the mirror (reader lock), runs the audit, updates every gauge. Returns the audit.
  AuditReport Refresh();

  // Set by the owner: the mirror holds a complete state (always true standalone), and this
  // replica may decide (leader, or no election configured).
  void SetSynced(bool synced) { synced_->Set(synced ? 1 : 0); }
  void SetLeader(bool leader) { leader_->Set(leader ? 1 : 0); }

 private:
  using LabelKey = std::pair<std::string, std::string>;
  void SetSeries(prometheus::Family<prometheus::Gauge>& family,
                 std::map<LabelKey, prometheus::Gauge*>& current,
                 std::map<LabelKey, double> values, const char* first_label,
                 const char* second_label) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Mirror* mirror_;
  prometheus::Family<prometheus::Gauge>& units_;
  prometheus::Family<prometheus::Gauge>& slots_;
  prometheus::Family<prometheus::Gauge>& slots_used_;
  prometheus::Family<prometheus::Gauge>& project_units_;
  prometheus::Family<prometheus::Gauge>& project_quota_;
  prometheus::Family<prometheus::Gauge>& pods_;  // by source, the three gauges below
  prometheus::Gauge* oversubscribed_;
  prometheus::Gauge* multi_owner_;
  prometheus::Gauge* over_quota_;
  prometheus::Gauge* nodes_;
  prometheus::Gauge* pods_reserved_;
  prometheus::Gauge* pods_confirmed_;
  prometheus::Gauge* pods_charged_;
  prometheus::Gauge* audit_seconds_;
  prometheus::Gauge* synced_;
  prometheus::Gauge* leader_;
  prometheus::Counter* audits_;
  prometheus::Gauge* inventory_mismatches_;
  prometheus::Gauge* dra_drift_;
  prometheus::Gauge* dra_nodes_;
  LogSink log_;

  absl::Mutex mu_;
  std::map<LabelKey, prometheus::Gauge*> unit_series_ ABSL_GUARDED_BY(mu_);
  std::map<LabelKey, prometheus::Gauge*> slot_series_ ABSL_GUARDED_BY(mu_);
  std::map<LabelKey, prometheus::Gauge*> slot_used_series_ ABSL_GUARDED_BY(mu_);
  std::map<LabelKey, prometheus::Gauge*> project_unit_series_ ABSL_GUARDED_BY(mu_);
  std::map<LabelKey, prometheus::Gauge*> project_quota_series_ ABSL_GUARDED_BY(mu_);
  // (node, resource) -> the inventory problem last logged for it.
  std::map<LabelKey, std::string> logged_mismatches_ ABSL_GUARDED_BY(mu_);
  // The catalog drift lines last logged (logged again only once gone and back).
  std::set<std::string> logged_drift_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse

#endif  // GSE_EXTENDER_MIRROR_METRICS_H_
