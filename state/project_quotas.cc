// ClusterState, projects: the project of a namespace, and each project's quota.
//
// Quotas: within a namespace every ResourceQuota applies (the tightest wins); a project's
// quota is the sum over its namespaces; the static quota file names projects directly, and
// where both apply the tighter one counts.
#include "state/cluster_state.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gse {
namespace {

// The quota of one ResourceQuota object for one offering, in the currency of usage; -1 when the object
// has no key for the offering. Kubernetes enforces requests.<name> for the name a pod uses,
// so the quota key, the canonical name and every alias count; the tightest one applies.
int64_t QuotaOfObject(const Offering& offering, const ResourceQuotaObject& quota) {
  std::vector<std::string> keys;
  keys.push_back(offering.quota_key.empty() ? absl::StrCat("requests.", offering.resource)
                                            : offering.quota_key);
  keys.push_back(absl::StrCat("requests.", offering.resource));
  for (const std::string& alias : offering.aliases) keys.push_back(absl::StrCat("requests.", alias));
  int64_t best = -1;
  for (const std::string& key : keys) {
    auto it = quota.hard_milli.find(key);
    if (it == quota.hard_milli.end()) continue;
    // Already in the currency of usage (quota_charge.h): units, tickets (time-sliced: how
    // many slices that buys depends on each slice's real ticket count) or shares.
    const int64_t units = std::max<int64_t>(0, it->second) / 1000;
    best = best < 0 ? units : std::min(best, units);
  }
  return best;
}

}  // namespace

std::string ClusterState::ProjectOfNamespace(absl::string_view namespace_name) const {
  auto it = namespace_labels_.find(namespace_name);
  if (it != namespace_labels_.end()) {
    auto label = it->second.find(options_.project_label);
    if (label != it->second.end() && !label->second.empty()) return label->second;
  }
  return std::string(namespace_name);
}

void ClusterState::ApplyNamespace(const NamespaceObject& ns) {
  const std::string before = ProjectOfNamespace(ns.name);
  // Only the project label matters to the mirror.
  std::map<std::string, std::string> kept;
  auto label = ns.labels.find(options_.project_label);
  if (label != ns.labels.end()) kept.emplace(label->first, label->second);
  namespace_labels_[ns.name] = std::move(kept);
  if (ProjectOfNamespace(ns.name) != before) RecomputeQuotas();
}

void ClusterState::RemoveNamespace(absl::string_view name) {
  const std::string before = ProjectOfNamespace(name);
  namespace_labels_.erase(name);
  if (ProjectOfNamespace(name) != before) RecomputeQuotas();
}

void ClusterState::ApplyQuota(const ResourceQuotaObject& quota) {
  quotas_[absl::StrCat(quota.namespace_name, "/", quota.name)] = quota;
  RecomputeQuotas();
}

void ClusterState::RemoveQuota(absl::string_view namespace_name, absl::string_view name) {
  if (quotas_.erase(absl::StrCat(namespace_name, "/", name)) != 0) RecomputeQuotas();
}

void ClusterState::RecomputeQuotas() {
  for (ProjectState& p : projects_) p.quota.clear();
  // Kubernetes enforces every ResourceQuota of a namespace, so within a namespace the tightest
  // object applies; a project spanning several namespaces gets the sum of theirs.
  std::map<std::string, absl::flat_hash_map<OfferingId, int64_t>> per_namespace;
  for (const auto& [key, quota] : quotas_) {
    auto& limits = per_namespace[quota.namespace_name];
    for (const Offering& offering : catalog_->offerings()) {
      const int64_t units = QuotaOfObject(offering, quota);
      if (units < 0) continue;
      auto [it, inserted] = limits.emplace(offering.id, units);
      if (!inserted) it->second = std::min(it->second, units);
    }
  }
  for (const auto& [ns, limits] : per_namespace) {
    if (limits.empty()) continue;
    const ProjectId id = InternProject(ProjectOfNamespace(ns));
    for (const auto& [offering, units] : limits) {
      projects_[static_cast<size_t>(id)].quota[offering] += units;
    }
  }
  // The static quota file names projects directly; where a ResourceQuota also limits the
  // project, both apply, so the tighter one counts.
  for (const auto& [project, hard] : options_.static_quotas) {
    ResourceQuotaObject object;
    object.hard_milli = hard;
    const ProjectId id = InternProject(project);
    auto& quota = projects_[static_cast<size_t>(id)].quota;
    for (const Offering& offering : catalog_->offerings()) {
      const int64_t units = QuotaOfObject(offering, object);
      if (units < 0) continue;
      auto [it, inserted] = quota.emplace(offering.id, units);
      if (!inserted) it->second = std::min(it->second, units);
    }
  }
}

ProjectId ClusterState::InternProject(absl::string_view name) {
  auto it = project_ids_.find(name);
  if (it != project_ids_.end()) return it->second;
  const ProjectId id = static_cast<ProjectId>(projects_.size());
  ProjectState p;
  p.name = std::string(name);
  projects_.push_back(std::move(p));
  project_ids_.emplace(std::string(name), id);
  return id;
}

ProjectId ClusterState::FindProject(absl::string_view name) const {
  auto it = project_ids_.find(name);
  return it == project_ids_.end() ? kNoProject : it->second;
}

int64_t ClusterState::Usage(ProjectId project, OfferingId offering) const {
  if (project < 0 || static_cast<size_t>(project) >= projects_.size()) return 0;
  const auto& usage = projects_[static_cast<size_t>(project)].usage;
  auto it = usage.find(offering);
  return it == usage.end() ? 0 : it->second;
}

int64_t ClusterState::Quota(ProjectId project, OfferingId offering) const {
  if (project >= 0 && static_cast<size_t>(project) < projects_.size()) {
    const auto& quota = projects_[static_cast<size_t>(project)].quota;
    auto it = quota.find(offering);
    if (it != quota.end()) return it->second;
  }
  return options_.unlimited_without_quota ? -1 : 0;
}

}  // namespace gse
