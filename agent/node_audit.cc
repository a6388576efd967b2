// NodeAudit: pod-resources against annotations.
#include "agent/node_audit.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/entitlement.h"
#include "state/assignment.h"

namespace gse::agent {

AuditReport AuditNode(absl::string_view node, const UnitMap& units, const Catalog& catalog,
                      const std::vector<NodePod>& pods,
                      const std::vector<ContainerDeviceIds>& view) {
  AuditReport report;
  std::map<std::string, const NodePod*> by_key;
  for (const NodePod& p : pods) by_key[p.Key()] = &p;
  for (const ServedOffering& o : units.offerings()) {
    std::map<std::string, std::set<std::string>> ids_of;  // pod -> IDs of R
    for (const ContainerDeviceIds& c : view) {
      if (c.resource != o.resource()) continue;
      auto pod = by_key.find(c.PodKey());
      if (pod == by_key.end() || pod->second->Terminal()) continue;  // gone: kubelet frees it
      ++report.containers_checked;
      ids_of[c.PodKey()].insert(c.ids.begin(), c.ids.end());
    }
    std::map<std::string, std::vector<std::string>> holders_of_id;
    std::map<int32_t, std::set<std::string>> projects_of_unit;
    std::map<int32_t, std::vector<std::string>> pods_of_unit;
    std::set<std::string> bad_pods;
    for (const auto& [key, ids] : ids_of) {
      const NodePod& pod = *by_key[key];
      std::optional<Entitlement> e = EntitlementFor(pod, node, o, catalog);
      const std::string project = e.has_value() ? e->project : pod.namespace_name;
      for (const std::string& id : ids) {
        holders_of_id[id].push_back(key);
        std::optional<DeviceRef> ref = o.Find(id);
        if (!ref.has_value()) {
          report.findings.push_back({key, o.resource(), absl::StrCat("device ", id, " is not a device of ",
                                                                     o.resource(), " on this node")});
          bad_pods.insert(key);
          continue;
        }
        projects_of_unit[ref->unit].insert(project);
        pods_of_unit[ref->unit].push_back(key);
        if (e.has_value() && e->annotated) {
          const bool inside = e->error.empty() &&
                              std::find(e->units.begin(), e->units.end(), ref->unit) != e->units.end();
          if (!inside) {
            report.findings.push_back(
                {key, o.resource(),
                 absl::StrCat("holds ", id, " (unit ", ref->unit, ", ", o.units()[ref->unit].uuid,
                              ") but is annotated with ",
                              e->error.empty() ? absl::StrCat("unit(s) ", absl::StrJoin(e->units, ","))
                                               : absl::StrCat("an unusable unit: ", e->error))});
            bad_pods.insert(key);
          }
        }
      }
    }
    for (const auto& [id, holders] : holders_of_id) {
      if (holders.size() < 2) continue;
      for (const std::string& key : holders) {
        report.findings.push_back({key, o.resource(),
                                   absl::StrCat("device ", id, " is held by ", holders.size(),
                                                " pods: ", absl::StrJoin(holders, ", "))});
        bad_pods.insert(key);
      }
    }
    if (o.sharing() == Sharing::kTimeSliced) {
      for (const auto& [unit, projects] : projects_of_unit) {
        if (projects.size() < 2) continue;
        for (const std::string& key : pods_of_unit[unit]) {
          report.findings.push_back(
              {key, o.resource(),
               absl::StrCat("unit ", unit, " (", o.units()[unit].uuid, ") serves projects ",
                            absl::StrJoin(projects, ", "))});
          bad_pods.insert(key);
        }
      }
    }
    for (const auto& [key, ids] : ids_of) {
      if (bad_pods.count(key) != 0) continue;
      const NodePod& pod = *by_key[key];
      if (pod.annotations.count(std::string(kAnnotationUnit)) == 0) continue;
      const std::string value = absl::StrJoin(ids, ",");
      auto have = pod.annotations.find(std::string(kAnnotationAllocated));
      if (have != pod.annotations.end() && have->second == value) continue;
      report.confirmations.push_back({key, o.resource(), value});
    }
  }
  return report;
}

}  // namespace gse::agent
