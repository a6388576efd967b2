// Unit rules (unit_rules.h).
#include "state/unit_rules.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "state/quota_charge.h"

namespace gse {

std::map<OfferingId, int64_t> PodCatalogDemand(const Catalog& catalog, const PodObject& pod,
                                               std::set<OfferingId>* fractional) {
  // Hostile specs may carry huge quantities: every sum saturates, far above any amount a pod
  // may ask (kMaxUnitsPerPod, the shares of one unit).
  static constexpr int64_t kMaxMilli = int64_t{1} << 62;
  static constexpr int64_t kMilli = 1000;
  // Each container's own demand, computed once: app containers first, then init containers.
  auto own_demand = [&](const ContainerResources& c) {
    std::map<OfferingId, int64_t> out;
    auto take = [&](const std::string& key, int64_t milli) {
      const Offering* o = catalog.Find(key);
      if (o == nullptr) return;  // cpu, memory, other vendors' resources: not ours
      if (milli % kMilli != 0 && fractional != nullptr) fractional->insert(o->id);
      int64_t& sum = out[o->id];
      sum = SaturatingAddUpTo(sum, milli, kMaxMilli);
    };
    for (const auto& [key, milli] : c.requests_milli) take(key, milli);
    for (const auto& [key, milli] : c.limits_milli) {
      if (c.requests_milli.count(key) == 0) take(key, milli);
    }
    return out;
  };
  std::map<const ContainerResources*, std::map<OfferingId, int64_t>, std::less<>> per_container;
  std::map<OfferingId, int64_t> demand;
  for (const auto* list : {&pod.containers, &pod.init_containers}) {
    for (const ContainerResources& c : *list) {
      const std::map<OfferingId, int64_t>& own = per_container[&c] = own_demand(c);
      for (const auto& entry : own) demand[entry.first] = 0;
    }
  }
  for (auto& [id, milli] : demand) {
    const OfferingId offering = id;
    milli = AggregatePodRequest(
        pod,
        [&](const ContainerResources& c) {
          const std::map<OfferingId, int64_t>& own = per_container.at(&c);
          auto it = own.find(offering);
          return it == own.end() ? int64_t{0} : it->second;
        },
        kMaxMilli);
  }
  return demand;
}

bool OneProjectPerUnit(const Offering& offering) {
  return offering.sharing != Sharing::kMps || offering.mps_single_project;
}

bool UnitAdmits(const Offering& offering, bool empty, ProjectId owner, ProjectId project) {
  if (empty) return true;
  if (offering.sharing == Sharing::kExclusive) return false;
  if (!OneProjectPerUnit(offering)) return true;
  return project != kNoProject && owner == project;
}

ProjectHold HoldOf(const Unit& unit, ProjectId project,
                   absl::FunctionRef<ProjectId(const Holding&)> project_of) {
  ProjectHold held;
  if (project == kNoProject) return held;
  for (const Holding& h : unit.holders) {
    if (project_of(h) != project) continue;
    ++held.holdings;
    held.amount += h.amount;
  }
  return held;
}

int64_t JoinCharge(const Offering& offering, const Unit& unit, const ProjectHold& held,
                   int64_t amount) {
  return QuotaCharge(offering, unit, held.holdings + 1, held.amount + amount) -
         QuotaCharge(offering, unit, held.holdings, held.amount);
}

double UnitGpuFraction(const Offering& offering) {
  if (offering.unit == UnitKind::kGpu) return 1.0;
  int g = 0;
  const absl::string_view profile = offering.mig_profile;
  const size_t pos = profile.find('g');
  if (pos == absl::string_view::npos || !absl::SimpleAtoi(profile.substr(0, pos), &g) || g <= 0) {
    return 1.0 / 7.0;
  }
  return std::min(1.0, g / 7.0);
}

}  // namespace gse
