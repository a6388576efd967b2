#include "extender/mirror_metrics.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse {
namespace {

prometheus::Gauge* SingleGauge(prometheus::Registry& registry, const char* name,
                               const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

MirrorMetrics::MirrorMetrics(prometheus::Registry& registry, const Mirror* mirror, LogSink log)
    : mirror_(mirror),
      units_(prometheus::BuildGauge()
                 .Name("gse_inventory_units")
                 .Help("GPU units (whole GPUs or MIG slices) per offering and state: free (no "
                       "holder), partial (shared unit with free tickets or shares), full, draining "
                       "(held beyond what the node advertises)")
                 .Register(registry)),
      slots_(prometheus::BuildGauge()
                 .Name("gse_inventory_slots")
                 .Help("Capacity per offering in slots: units (exclusive), tickets (time-sliced) "
                       "or shares (mps), excluding draining units")
                 .Register(registry)),
      slots_used_(prometheus::BuildGauge()
                      .Name("gse_inventory_slots_used")
                      .Help("Slots held per offering (units, tickets or shares)")
                      .Register(registry)),
      project_units_(prometheus::BuildGauge()
                         .Name("gse_project_units")
                         .Help("What a project's quota is charged per offering: units held "
                               "(exclusive), tickets of the slices it owns (time-sliced) or "
                               "shares held (mps)")
                         .Register(registry)),
      project_quota_(prometheus::BuildGauge()
                         .Name("gse_project_quota_units")
                         .Help("A project's quota per offering, in the unit of gse_project_units "
                               "(no series: unlimited)")
                         .Register(registry)),
      pods_(prometheus::BuildGauge()
                .Name("gse_mirror_pods")
                .Help("Pods holding GPU units in the mirror, by source: reserved (bind in "
                      "flight), confirmed (bound with our assignment), charged (bound by "
                      "something else without one: whole units charged conservatively)")
                .Register(registry)),
      oversubscribed_(SingleGauge(registry, "gse_audit_oversubscribed_units",
                                  "Units over capacity found by the last independent audit of "
                                  "the mirror (must be 0)")),
      multi_owner_(SingleGauge(registry, "gse_audit_multi_owner_units",
                               "Single-project units held by two or more projects in the last "
                               "audit (must be 0)")),
      over_quota_(SingleGauge(registry, "gse_audit_over_quota",
                              "(project, offering) pairs over quota in the last audit")),
      nodes_(SingleGauge(registry, "gse_mirror_nodes", "Nodes in the mirror")),
      pods_reserved_(&pods_.Add({{"source", "reserved"}})),
      pods_confirmed_(&pods_.Add({{"source", "confirmed"}})),
      pods_charged_(&pods_.Add({{"source", "charged"}})),
      audit_seconds_(SingleGauge(registry, "gse_audit_duration_seconds",
                                 "How long the last refresh of these gauges and the audit took "
                                 "(mostly under the mirror's reader lock)")),
      synced_(SingleGauge(registry, "gse_mirror_synced",
                          "1 when the mirror holds a complete state and decisions are served")),
      leader_(SingleGauge(registry, "gse_leader",
                          "1 on the replica that makes decisions (the lease holder, or any "
                          "replica running without leader election)")),
      audits_(&prometheus::BuildCounter()
                   .Name("gse_audit_runs_total")
                   .Help("Independent audits of the mirror run")
                   .Register(registry)
                   .Add({})),
      inventory_mismatches_(SingleGauge(
          registry, "gse_agent_inventory_mismatches",
          "(node, offering) pairs whose node agent's published inventory "
          "(gpu.themelio.io/inventory) disagrees with the node's allocatable or replicas: "
          "not trusted (no UUIDs or health from it)")),
      dra_drift_(SingleGauge(registry, "gse_dra_catalog_drift",
                             "DRA mode: disagreements between the catalog and the cluster's "
                             "DeviceClasses (missing class, other name or selector; "
                             "/debug/state lists them)")),
      dra_nodes_(SingleGauge(registry, "gse_dra_nodes",
                             "DRA mode: nodes with an offering backed by DRA devices (KEP-5004's "
                             "per-node rule)")),
      log_(log ? std::move(log) : [](const std::string& line) {
        std::fputs(line.c_str(), stderr);
        std::fflush(stderr);
      }) {}

void MirrorMetrics::SetSeries(prometheus::Family<prometheus::Gauge>& family,
                              std::map<LabelKey, prometheus::Gauge*>& current,
                              std::map<LabelKey, double> values, const char* first_label,
                              const char* second_label) {
  // Drop series whose labels vanished so that dashboards do not show stale values.
  for (auto it = current.begin(); it != current.end();) {
    if (values.count(it->first) == 0) {
      family.Remove(it->second);
      it = current.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [key, value] : values) {
    auto it = current.find(key);
    if (it == current.end()) {
      prometheus::Labels labels{{first_label, key.first}};
      if (second_label != nullptr) labels.emplace(second_label, key.second);
      it = current.emplace(key, &family.Add(labels)).first;
    }
    it->second->Set(value);
  }
}

AuditReport MirrorMetrics::Refresh() {
  const auto started = std::chrono::steady_clock::now();
  std::map<LabelKey, double> units, slots, used, project_units, project_quota;
  std::map<LabelKey, std::string> mismatches;  // (node, resource) -> problem
  std::vector<std::string> drift;
  int64_t dra_nodes = 0;
  AuditReport report = mirror_->Read([&](const ClusterState& state) {
    if (state.options().dra) drift = state.DraDrift();
    const Catalog& catalog = state.catalog();
    // Every offering gets all four states (0 when empty) so panels and alerts always have data.
    for (const Offering& offering : catalog.offerings()) {
      for (const char* s : {"free", "partial", "full", "draining"}) units[{offering.resource, s}] = 0;
      slots[{offering.resource, ""}] = 0;
      used[{offering.resource, ""}] = 0;
    }
    for (const auto& [name, node] : state.nodes()) {
      dra_nodes += std::any_of(node->offerings.begin(), node->offerings.end(),
                               [](const NodeOffering& no) { return no.dra; });
      for (const NodeOffering& no : node->offerings) {
        const std::string& resource = catalog.Get(no.offering).resource;
        if (!no.inventory_problem.empty()) mismatches[{name, resource}] = no.inventory_problem;
        for (const Unit& unit : no.units) {
          const char* s = unit.TakesNoNewHolders() ? "draining"
                          : unit.used == 0         ? "free"
                          : unit.used >= unit.capacity ? "full"
                                                   : "partial";
          units[{resource, s}] += 1;
          if (!unit.TakesNoNewHolders() && no.unusable_reason.empty()) {
            slots[{resource, ""}] += unit.capacity;
          }
          used[{resource, ""}] += unit.used;
        }
      }
    }
    for (size_t p = 0; p < state.project_count(); ++p) {
      const ProjectState& project = state.project(static_cast<ProjectId>(p));
      for (const Offering& offering : catalog.offerings()) {
        int64_t usage = state.Usage(static_cast<ProjectId>(p), offering.id);
        int64_t quota = state.Quota(static_cast<ProjectId>(p), offering.id);
        // Projects with neither usage nor a quota for an offering add no series.
        if (usage > 0 || quota >= 0) {
          project_units[{project.name, offering.resource}] = static_cast<double>(usage);
        }
        if (quota >= 0) project_quota[{project.name, offering.resource}] = static_cast<double>(quota);
      }
    }
    nodes_->Set(static_cast<double>(state.nodes().size()));
    int64_t by_source[3] = {0, 0, 0};
    for (const auto& [key, pod] : state.pods()) ++by_source[static_cast<int>(pod.source)];
    pods_reserved_->Set(static_cast<double>(by_source[static_cast<int>(HoldingSource::kReserved)]));
    pods_confirmed_->Set(
        static_cast<double>(by_source[static_cast<int>(HoldingSource::kConfirmed)]));
    pods_charged_->Set(static_cast<double>(by_source[static_cast<int>(HoldingSource::kCharged)]));
    return state.Audit();
  });
  oversubscribed_->Set(static_cast<double>(report.oversubscribed_units));
  multi_owner_->Set(static_cast<double>(report.multi_owner_units));
  over_quota_->Set(static_cast<double>(report.over_quota_projects));
  audits_->Increment();
  audit_seconds_->Set(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());

  inventory_mismatches_->Set(static_cast<double>(mismatches.size()));
  dra_drift_->Set(static_cast<double>(drift.size()));
  dra_nodes_->Set(static_cast<double>(dra_nodes));

  absl::MutexLock lock(&mu_);
  std::set<std::string> drift_now(drift.begin(), drift.end());
  for (const std::string& problem : drift_now) {
    if (logged_drift_.count(problem) != 0) continue;
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.String(problem.c_str(), static_cast<rapidjson::SizeType>(problem.size()));
    log_(absl::StrCat(R"({"component":"extender","event":"dra_catalog_drift","problem":)",
                      absl::string_view(buf.GetString(), buf.GetSize()), "}\n"));
  }
  logged_drift_ = std::move(drift_now);
  for (const auto& [key, problem] : mismatches) {
    auto it = logged_mismatches_.find(key);
    if (it != logged_mismatches_.end() && it->second == problem) continue;
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    for (const auto& [k, v] : {std::pair<const char*, const std::string*>{"node", &key.first},
                               {"resource", &key.second}, {"problem", &problem}}) {
      w.Key(k);
      w.String(v->c_str(), static_cast<rapidjson::SizeType>(v->size()));
    }
    w.EndObject();
    // The fixed fields first, as the other JSON lines of the extender.
    std::string line = absl::StrCat(R"({"component":"extender","event":"agent_inventory_mismatch",)",
                                    absl::string_view(buf.GetString() + 1, buf.GetSize() - 1), "\n");
    log_(line);
    logged_mismatches_[key] = problem;
  }
  for (auto it = logged_mismatches_.begin(); it != logged_mismatches_.end();) {
    it = mismatches.count(it->first) == 0 ? logged_mismatches_.erase(it) : std::next(it);
  }
  SetSeries(units_, unit_series_, std::move(units), "offering", "state");
  SetSeries(slots_, slot_series_, std::move(slots), "offering", nullptr);
  SetSeries(slots_used_, slot_used_series_, std::move(used), "offering", nullptr);
  SetSeries(project_units_, project_unit_series_, std::move(project_units), "project", "offering");
  SetSeries(project_quota_, project_quota_series_, std::move(project_quota), "project", "offering");
  return report;
}

}  // namespace gse
