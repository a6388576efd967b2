// InvariantChecker: DESIGN.md's invariants from a ledger of our own (see the header).
#include "tests/testing/invariant_checker.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gse::testing {
namespace {

std::string UnitName(const std::string& node, const Catalog& catalog, OfferingId offering,
                     int32_t index) {
  return absl::StrCat(node, "/", catalog.Get(offering).resource, "/", index);
}

std::string Describe(const Assignment& a) {
  return absl::StrCat(a.node, " offering ", a.offering, " units [", absl::StrJoin(a.units, ","),
                      "] x", a.amount_per_unit);
}

}  // namespace

void InvariantChecker::SetNodeOffering(const std::string& node, OfferingId offering,
                                       int32_t units, int32_t capacity) {
  specs_[{node, offering}] = NodeOfferingSpec{units, capacity};
}

void InvariantChecker::SetQuotaHard(const std::string& project, OfferingId offering,
                                    int64_t hard) {
  quota_hard_[{project, offering}] = hard;
}

void InvariantChecker::ClearQuota(const std::string& project, OfferingId offering) {
  quota_hard_.erase({project, offering});
}

const InvariantChecker::NodeOfferingSpec* InvariantChecker::Spec(const std::string& node,
                                                                 OfferingId offering) const {
  auto it = specs_.find({node, offering});
  return it == specs_.end() ? nullptr : &it->second;
}

int32_t InvariantChecker::Capacity(const std::string& node, OfferingId offering) const {
  if (catalog_.Get(offering).sharing == Sharing::kExclusive) return 1;
  const NodeOfferingSpec* spec = Spec(node, offering);
  return spec == nullptr ? catalog_.Get(offering).replicas : spec->capacity;
}

const std::map<InvariantChecker::UnitKey, InvariantChecker::UnitLedger>& InvariantChecker::Units(
    const std::set<std::string>& evicted) const {
  // The ledger without evictions is asked for once per node per step: keep it until it changes.
  if (evicted.empty() && units_valid_) return units_;
  std::map<UnitKey, UnitLedger>& units = evicted.empty() ? units_ : evicted_units_;
  units.clear();
  for (const auto& [key, entry] : ledger_) {
    if (evicted.count(key) != 0) continue;
    for (int32_t index : entry.assignment.units) {
      UnitLedger& u = units[{entry.assignment.node, entry.assignment.offering, index}];
      u.used += entry.assignment.amount_per_unit;
      u.projects.insert(entry.project);
    }
  }
  if (evicted.empty()) units_valid_ = true;
  return units;
}

int64_t InvariantChecker::LedgerUsage(const std::string& project, OfferingId offering,
                                      const std::set<std::string>& evicted) const {
  const Sharing sharing = catalog_.Get(offering).sharing;
  if (sharing == Sharing::kTimeSliced) {
    // DESIGN.md I4: a project is charged the whole slices it owns (distinct units with at
    // least one of its tickets), each with the node's real ticket count.
    int64_t tickets = 0;
    for (const auto& [node, index] : OwnedSlices(project, offering, evicted)) {
      tickets += Capacity(node, offering);
    }
    return tickets;
  }
  int64_t usage = 0;  // units held (exclusive) or shares held (mps)
  for (const auto& [key, entry] : ledger_) {
    if (evicted.count(key) != 0 || entry.project != project ||
        entry.assignment.offering != offering) {
      continue;
    }
    usage += static_cast<int64_t>(entry.assignment.units.size()) *
             (sharing == Sharing::kMps ? entry.assignment.amount_per_unit : 1);
  }
  return usage;
}

std::set<std::pair<std::string, int32_t>> InvariantChecker::OwnedSlices(
    const std::string& project, OfferingId offering, const std::set<std::string>& evicted) const {
  std::set<std::pair<std::string, int32_t>> owned;
  for (const auto& [key, entry] : ledger_) {
    if (evicted.count(key) != 0 || entry.project != project ||
        entry.assignment.offering != offering) {
      continue;
    }
    for (int32_t index : entry.assignment.units) owned.insert({entry.assignment.node, index});
  }
  return owned;
}

int64_t InvariantChecker::QuotaUnits(const std::string& project, OfferingId offering) const {
  // The hard value as it is: units, tickets (time-sliced) or shares.
  auto it = quota_hard_.find({project, offering});
  return it == quota_hard_.end() ? -1 : it->second;
}

int64_t InvariantChecker::OverQuotaPairs() const {
  std::set<std::pair<std::string, OfferingId>> pairs;
  for (const auto& [key, entry] : ledger_) pairs.insert({entry.project, entry.assignment.offering});
  int64_t over = 0;
  for (const auto& [project, offering] : pairs) {
    const int64_t quota = QuotaUnits(project, offering);
    if (quota < 0) continue;
    const int64_t usage = LedgerUsage(project, offering);
    if (catalog_.Get(offering).sharing != Sharing::kTimeSliced) {
      if (usage > quota) ++over;
      continue;
    }
    // Time-sliced: over when even with its largest slice taken last the project would have
    // opened that slice with tickets >= quota already.
    int64_t largest = 0;
    for (const auto& [node, index] : OwnedSlices(project, offering, {})) {
      largest = std::max<int64_t>(largest, Capacity(node, offering));
    }
    if (usage > 0 && usage - largest >= quota) ++over;
  }
  return over;
}

bool InvariantChecker::Fits(const std::string& node, OfferingId offering, int64_t amount,
                            const std::string& project,
                            const std::set<std::string>& evicted) const {
  const NodeOfferingSpec* spec = Spec(node, offering);
  if (spec == nullptr) return false;
  const Offering& o = catalog_.Get(offering);
  const auto& units = Units(evicted);
  const int64_t quota = QuotaUnits(project, offering);
  auto quota_allows = [&](int64_t more) {
    if (quota < 0) return true;
    const int64_t usage = LedgerUsage(project, offering, evicted);
    // Time-sliced: a new slice while the owned slices hold fewer tickets than the quota.
    return o.sharing == Sharing::kTimeSliced ? usage < quota : usage + more <= quota;
  };
  auto ledger_of = [&](int32_t index) -> UnitLedger {
    auto it = units.find({node, offering, index});
    return it == units.end() ? UnitLedger{} : it->second;
  };
  const int32_t capacity = Capacity(node, offering);
  // Only units below the advertised count take new holders (the rest are draining).
  switch (o.sharing) {
    case Sharing::kExclusive: {
      int64_t free = 0;
      for (int32_t i = 0; i < spec->units; ++i) {
        if (ledger_of(i).used == 0) ++free;
      }
      return free >= amount && quota_allows(amount);
    }
    case Sharing::kTimeSliced: {
      if (amount != 1) return false;
      bool empty = false;
      for (int32_t i = 0; i < spec->units; ++i) {
        const UnitLedger u = ledger_of(i);
        if (u.used == 0) {
          empty = true;
        } else if (u.projects == std::set<std::string>{project} && u.used < capacity) {
          return true;  // a ticket on the project's own unit costs no quota
        }
      }
      return empty && quota_allows(1);
    }
    case Sharing::kMps: {
      if (amount < 1 || amount > capacity) return false;
      for (int32_t i = 0; i < spec->units; ++i) {
        const UnitLedger u = ledger_of(i);
        if (u.used + amount > capacity) continue;
        if (o.mps_single_project && u.used > 0 && u.projects != std::set<std::string>{project}) {
          continue;
        }
        return quota_allows(amount);
      }
      return false;
    }
  }
  return false;
}

bool InvariantChecker::OwnsFreeTicket(const std::string& project, OfferingId offering,
                                      const std::vector<std::string>& nodes) const {
  const auto& units = Units({});
  for (const std::string& node : nodes) {
    const NodeOfferingSpec* spec = Spec(node, offering);
    if (spec == nullptr) continue;
    for (int32_t i = 0; i < spec->units; ++i) {
      auto it = units.find({node, offering, i});
      if (it == units.end()) continue;
      if (it->second.projects == std::set<std::string>{project} &&
          it->second.used < spec->capacity) {
        return true;
      }
    }
  }
  return false;
}

std::vector<std::string> InvariantChecker::RecordPlacement(
    const std::string& pod_key, const std::string& project, const Assignment& a,
    const std::vector<std::string>& candidates) {
  std::vector<std::string> v = CheckPlacement(pod_key, project, a, candidates);
  ledger_[pod_key] = Entry{project, a};
  units_valid_ = false;
  return v;
}

std::vector<std::string> InvariantChecker::CheckPlacement(
    const std::string& pod_key, const std::string& project, const Assignment& a,
    const std::vector<std::string>& candidates) {
  std::vector<std::string> v;
  const std::string where = absl::StrCat(pod_key, " -> ", Describe(a), ": ");
  if (ledger_.count(pod_key) != 0) v.push_back(where + "pod placed twice");
  if (a.offering < 0 || static_cast<size_t>(a.offering) >= catalog_.size()) {
    v.push_back(where + "unknown offering");
    return v;
  }
  const Offering& o = catalog_.Get(a.offering);
  const NodeOfferingSpec* spec = Spec(a.node, a.offering);
  if (spec == nullptr) v.push_back(where + "offering not on node");
  if (a.units.empty()) v.push_back(where + "no units");
  if (!std::is_sorted(a.units.begin(), a.units.end()) ||
      std::adjacent_find(a.units.begin(), a.units.end()) != a.units.end()) {
    v.push_back(where + "units not sorted and distinct");
  }
  if (o.sharing != Sharing::kMps && a.amount_per_unit != 1) {
    v.push_back(where + "amount per unit must be 1 for " + std::string(SharingName(o.sharing)));
  }
  if (o.sharing != Sharing::kExclusive && a.units.size() != 1) {
    v.push_back(where + "a shared offering hands out exactly one unit per pod");
  }
  const auto& units = Units({});
  const int32_t capacity = Capacity(a.node, a.offering);
  bool opens_new_unit = false;
  for (int32_t index : a.units) {
    const std::string unit = UnitName(a.node, catalog_, a.offering, index);
    if (spec != nullptr && (index < 0 || index >= spec->units)) {
      v.push_back(where + "I1: new holder on draining or missing unit " + unit);
    }
    auto it = units.find({a.node, a.offering, index});
    const int64_t used = it == units.end() ? 0 : it->second.used;
    if (used == 0) opens_new_unit = true;
    if (used + a.amount_per_unit > capacity) {
      v.push_back(absl::StrCat(where, "I1: ", unit, " would hold ", used + a.amount_per_unit,
                               " of ", capacity));
    }
    const bool single_owner = o.sharing == Sharing::kTimeSliced ||
                              (o.sharing == Sharing::kMps && o.mps_single_project);
    if (it != units.end() && single_owner &&
        (it->second.projects.size() > 1 || it->second.projects.count(project) == 0)) {
      v.push_back(where + "I2: joins " + unit + " owned by " +
                  absl::StrJoin(it->second.projects, ","));
    }
  }
  if (o.sharing == Sharing::kTimeSliced && opens_new_unit &&
      OwnsFreeTicket(project, a.offering, candidates)) {
    v.push_back(where + "I3: opens a new unit while the project's own unit has a free ticket "
                        "on a candidate node");
  }
  // I4: a reservation never takes the project above its quota. A quota lowered under what
  // the project already holds is a fact; joining a unit it already owns adds nothing then.
  if (ledger_.count(pod_key) != 0) return v;  // usage after cannot be told apart
  const int64_t before = LedgerUsage(project, a.offering);
  ledger_[pod_key] = Entry{project, a};  // the ledger as it would be, for its usage only
  units_valid_ = false;
  const int64_t usage = LedgerUsage(project, a.offering);
  ledger_.erase(pod_key);
  units_valid_ = false;
  const int64_t quota = QuotaUnits(project, a.offering);
  // Time-sliced: a new slice (usage grows) may be opened only below the quota in tickets.
  const bool over = o.sharing == Sharing::kTimeSliced ? before >= quota : usage > quota;
  if (quota >= 0 && over && usage > before) {
    v.push_back(absl::StrCat(where, "I4: project ", project, " goes from ", before, " to ", usage,
                             " > quota ", quota, " of ", o.resource));
  }
  return v;
}

void InvariantChecker::RecordRelease(const std::string& pod_key) {
  ledger_.erase(pod_key);
  units_valid_ = false;
}

std::vector<std::string> InvariantChecker::CheckUnits() const {
  std::vector<std::string> v;
  for (const auto& [key, u] : Units({})) {
    const auto& [node, offering, index] = key;
    const Offering& o = catalog_.Get(offering);
    const std::string unit = UnitName(node, catalog_, offering, index);
    // Draining units keep their holders, but never more than the unit ever had room for.
    if (u.used > Capacity(node, offering)) {
      v.push_back(absl::StrCat("I1: ", unit, " holds ", u.used, " of ", Capacity(node, offering)));
    }
    const bool single_owner = o.sharing != Sharing::kMps || o.mps_single_project;
    if (single_owner && u.projects.size() > 1) {
      v.push_back("I2: " + unit + " has projects " + absl::StrJoin(u.projects, ","));
    }
  }
  return v;
}

std::vector<std::string> InvariantChecker::CheckRejectedEverywhere(
    const std::vector<bool>& passes, const std::vector<std::string>& messages,
    const std::string& must_mention) {
  std::vector<std::string> v;
  for (size_t i = 0; i < passes.size(); ++i) {
    if (passes[i]) v.push_back(absl::StrCat("I5: node #", i, " accepts a rejected pod"));
    if (i < messages.size() && messages[i].find(must_mention) == std::string::npos) {
      v.push_back(absl::StrCat("I5: node #", i, " message \"", messages[i],
                               "\" does not say \"", must_mention, "\""));
    }
  }
  return v;
}

std::vector<std::string> InvariantChecker::CheckPassesEverywhere(const std::vector<bool>& passes) {
  std::vector<std::string> v;
  for (size_t i = 0; i < passes.size(); ++i) {
    if (!passes[i]) v.push_back(absl::StrCat("I6: node #", i, " fails a pod with no GPU request"));
  }
  return v;
}

std::vector<std::string> InvariantChecker::CheckState(const ClusterState& state) const {
  std::vector<std::string> v = CheckUnits();

  // The mirror holds exactly what we placed, where we placed it.
  for (const auto& [key, entry] : ledger_) {
    const PodRecord* rec = state.FindPod(key);
    if (rec == nullptr) {
      v.push_back("mirror lost pod " + key);
    } else if (rec->assignment != entry.assignment) {
      v.push_back("mirror has " + key + " at " + Describe(rec->assignment) + ", ledger at " +
                  Describe(entry.assignment));
    }
  }
  for (const auto& [id, rec] : state.pods()) {
    if (ledger_.count(rec.key) == 0) v.push_back("mirror holds unknown pod " + rec.key);
  }

  // The mirror's counters agree with the ledger.
  std::set<std::pair<std::string, OfferingId>> pairs;
  for (const auto& [key, entry] : ledger_) pairs.insert({entry.project, entry.assignment.offering});
  for (const auto& [pair, hard] : quota_hard_) pairs.insert(pair);
  for (const auto& [project, offering] : pairs) {
    const ProjectId id = state.FindProject(project);
    const int64_t mirror = id == kNoProject ? 0 : state.Usage(id, offering);
    const int64_t ledger = LedgerUsage(project, offering);
    if (mirror != ledger) {
      v.push_back(absl::StrCat("usage of ", project, " on ", catalog_.Get(offering).resource,
                               ": mirror ", mirror, ", ledger ", ledger));
    }
    const int64_t quota = QuotaUnits(project, offering);
    const int64_t mirror_quota = id == kNoProject ? -1 : state.Quota(id, offering);
    if (mirror_quota != quota) {
      v.push_back(absl::StrCat("quota of ", project, " on ", catalog_.Get(offering).resource,
                               ": mirror ", mirror_quota, ", ledger ", quota));
    }
  }

  const AuditReport audit = state.Audit();
  if (audit.oversubscribed_units != 0 || audit.multi_owner_units != 0) {
    v.push_back(absl::StrCat("Audit: ", audit.oversubscribed_units, " oversubscribed, ",
                             audit.multi_owner_units, " multi-owner units: ",
                             absl::StrJoin(audit.problems, "; ")));
  }
  // Over-quota pairs are the only problems the facts may cause here; anything else (owner or
  // counters disagreeing with the pod records, unknown units) is a mirror bug.
  const size_t expected_problems = static_cast<size_t>(std::min<int64_t>(
      audit.over_quota_projects, 100));
  if (audit.problems.size() != expected_problems) {
    v.push_back(absl::StrCat("Audit reports problems beyond over-quota pairs: ",
                             absl::StrJoin(audit.problems, "; ")));
  }
  if (audit.over_quota_projects != OverQuotaPairs()) {
    v.push_back(absl::StrCat("Audit: ", audit.over_quota_projects,
                             " over-quota pairs, ledger has ", OverQuotaPairs(), ": ",
                             absl::StrJoin(audit.problems, "; ")));
  }
  return v;
}

}  // namespace gse::testing
