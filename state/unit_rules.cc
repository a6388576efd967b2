// Unit rules (unit_rules.h).
#include "state/unit_rules.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "state/quota_charge.h"

namespace gse {

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
