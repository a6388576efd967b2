// ClusterState::Audit: recounts every unit from the pod records (not from the units' own
// counters) and checks I1 (capacity), I2 (one owner), I4 (quota) and the derived indexes.
#include "state/cluster_state.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "state/quota_charge.h"
#include "state/unit_rules.h"

namespace gse {
namespace cluster_state_internal {
namespace {

constexpr size_t kMaxProblems = 100;

// One unit as the pod records fill it.
struct Count {
  int64_t used = 0;
  int64_t holders = 0;
  // project -> (holdings, amount); inline for the usual single project (no allocation)
  absl::InlinedVector<std::pair<ProjectId, std::pair<int64_t, int64_t>>, 1> projects;
};

}  // namespace

// The steps of ClusterState::Audit, each reading the state and adding to one report.
class Auditor {
 public:
  explicit Auditor(const ClusterState& state) : s_(state) {}

  AuditReport Run() {
    RecountFromPods();
    CheckDerivedIndexes();
    CheckUnits();
    CheckUsageAndQuota();
    CheckHostView();
    // DRA mode: the DRA model's per-node indexes against a recount of its objects.
    for (const std::string& p : s_.dra_.CheckIndexes()) Problem("DRA index: ", p);
    if (s_.options_.dra && s_.dra_drift_ != s_.dra_.Drift(*s_.catalog_)) {
      Problem("DRA catalog drift kept is stale: ", absl::StrJoin(s_.dra_drift_, "; "));
    }
    CheckDraPicks();
    return std::move(report_);
  }

 private:
  template <typename... Parts>
  void Problem(const Parts&... parts) {
    if (report_.problems.size() < kMaxProblems) report_.problems.push_back(absl::StrCat(parts...));
  }

  // The host view's per-node sums against a recount of the pods it counts.
  void CheckHostView() {
    absl::flat_hash_map<std::string, HostResources> recount;
    for (const auto& [id, hp] : s_.host_pods_) {
      HostResources& r = recount[hp.node->first];
      r.cpu_milli = static_cast<int64_t>(static_cast<uint64_t>(r.cpu_milli) +
                                         static_cast<uint64_t>(hp.request.cpu_milli));
      r.memory_bytes = static_cast<int64_t>(static_cast<uint64_t>(r.memory_bytes) +
                                            static_cast<uint64_t>(hp.request.memory_bytes));
      ++r.pods;
    }
    for (const auto& [node, sum] : s_.host_requested_) {
      auto it = recount.find(node);
      const HostResources want = it == recount.end() ? HostResources{} : it->second;
      if (sum != want || sum.pods == 0) {
        ++report_.stale_summaries;
        Problem("host requests of node ", node, ": cpu ", sum.cpu_milli, "m memory ",
                sum.memory_bytes, " pods ", sum.pods, ", recount cpu ", want.cpu_milli,
                "m memory ", want.memory_bytes, " pods ", want.pods);
      }
    }
    for (const auto& [node, want] : recount) {
      if (s_.host_requested_.find(node) == s_.host_requested_.end()) {
        ++report_.stale_summaries;
        Problem("host requests of node ", node, ": missing, recount pods ", want.pods);
      }
    }
  }

  // The unit's holders by namespace/name (their records' keys), with their amounts.
  std::string HolderList(const Unit& unit) const {
    return absl::StrJoin(unit.holders, ",", [&](std::string* out, const Holding& h) {
      const PodRecord* rec = s_.FindPodById(h.pod_id);
      absl::StrAppend(out, rec != nullptr ? rec->key : "?", "x", h.amount);
    });
  }

  std::string ProjectName(ProjectId id) const {
    return id >= 0 && static_cast<size_t>(id) < s_.projects_.size()
               ? s_.projects_[static_cast<size_t>(id)].name
               : std::string("<none>");
  }

  // Fills counts_ from the pod records alone; a record naming a unit the mirror lacks is a
  // problem.
  void RecountFromPods() {
    counts_.reserve(s_.pods_.size());
    for (const auto& [id, pod] : s_.pods_) {
      const Assignment& a = pod.assignment;
      const NodeState* node = s_.FindNode(a.node);
      const NodeOffering* no = node != nullptr ? node->Find(a.offering) : nullptr;
      for (int32_t index : a.units) {
        if (no == nullptr || index < 0 || static_cast<size_t>(index) >= no->units.size()) {
          const bool known =
              a.offering >= 0 && static_cast<size_t>(a.offering) < s_.catalog_->size();
          Problem("pod ", pod.key, " holds unit ",
                  UnitId(a.node, known ? s_.catalog_->Get(a.offering).resource : "?", index),
                  " that the mirror does not have");
          continue;
        }
        Count& c = counts_[&no->units[static_cast<size_t>(index)]];
        c.used += a.amount_per_unit;
        c.holders += 1;
        const ProjectId project = pod.project;
        auto p = std::find_if(c.projects.begin(), c.projects.end(),
                              [&](const auto& e) { return e.first == project; });
        if (p == c.projects.end()) {
          c.projects.push_back({project, {1, a.amount_per_unit}});
        } else {
          p->second.first += 1;
          p->second.second += a.amount_per_unit;
        }
      }
    }
  }

  // The derived counters (summaries, held units, room rows and their slots, the per-project
  // index, the open units per offering), recomputed from the units: Reindex must have kept
  // them current.
  void CheckDerivedIndexes() {
    absl::flat_hash_map<std::pair<ProjectId, OfferingId>, int32_t> with_room;
    std::vector<int64_t> open_units(s_.catalog_->size(), 0);
    for (const auto& entry : s_.nodes_) {
      const std::string& name = entry.first;
      int32_t held_units = 0;
      for (const NodeOffering& no : entry.second->offerings) {
        const OfferingSummary fresh = s_.Summarise(*entry.second, no);
        held_units += fresh.held_units;
        if (!(fresh == no.summary)) {
          Stale("summary of ", s_.catalog_->Get(no.offering).resource, " on node ", name,
                " disagrees with its units");
        }
        if (fresh.open) {
          open_units[static_cast<size_t>(no.offering)] += fresh.live_units;
          for (const OwnedUnits& o : fresh.owned) {
            if (o.reachable_with_room > 0) {
              with_room[{o.project, no.offering}] += o.reachable_with_room;
            }
          }
        }
      }
      if (held_units != entry.second->held_units) {
        Stale("node ", name, " counts ", entry.second->held_units, " held units, its units ",
              held_units);
      }
      CheckRoomRows(name, *entry.second);
    }
    CheckUnownedSlots();
    if (with_room != s_.owned_with_room_) {
      Stale("the per-project index of owned units with room disagrees with the nodes' units");
    }
    if (open_units != s_.open_units_) {
      Stale("the cluster's open units per offering disagree with the nodes' units");
    }
  }

  template <typename... Parts>
  void Stale(const Parts&... parts) {
    ++report_.stale_summaries;
    Problem(parts...);
  }

  void CheckRoomRows(const std::string& name, const NodeState& node) {
    const uint32_t slot = node.slot;
    const std::vector<RoomRow> rows = s_.RoomRowsOf(node);
    for (size_t o = 0; o < rows.size(); ++o) {
      if (slot == ClusterState::kUnknownSlot || slot >= s_.slot_count_ ||
          !(s_.room_rows_[o][slot] == rows[o])) {
        Stale("room row ", slot, " of ", s_.catalog_->Get(static_cast<OfferingId>(o)).resource,
              " for node ", name, " disagrees with its summary");
        return;
      }
    }
    if (s_.SlotVersion(slot) != node.version) {
      Stale("slot ", slot, " of node ", name, " has version ", s_.SlotVersion(slot),
            ", the node ", node.version);
    }
  }

  // Rows no node owns (the unknown node's, and freed slots) must say so.
  void CheckUnownedSlots() {
    std::vector<bool> owned_slot(s_.slot_count_, false);
    for (const auto& entry : s_.nodes_) {
      const uint32_t slot = entry.second->slot;
      if (slot >= s_.slot_count_) continue;  // reported by CheckRoomRows
      if (owned_slot[slot]) Stale("room row ", slot, " belongs to two nodes, one of them ", entry.first);
      owned_slot[slot] = true;
    }
    for (uint32_t slot = 0; slot < s_.slot_count_; ++slot) {
      if (owned_slot[slot]) continue;
      for (const std::vector<RoomRow>& table : s_.room_rows_) {
        if (!(table[slot] == RoomRow{})) {
          Stale("room row ", slot, " belongs to no node but is not empty");
          break;
        }
      }
      if (s_.SlotVersion(slot) != 0) Stale("slot ", slot, " belongs to no node but has a version");
    }
  }

  // I1 and I2 per unit from the recount, the unit's own counters and owner against it, and
  // the recounted usage per (project, offering).
  // DRA mode: every kept NodeOffering::dra_pick against a prediction from the DRA objects now
  // (a DRA change that missed re-deriving a node leaves its pick stale).
  void CheckDraPicks() {
    for (const auto& entry : s_.nodes_) {
      for (const NodeOffering& no : entry.second->offerings) {
        if (no.dra_pick.kind == DraPick::kNotDerived) continue;
        const DraPick now = s_.DraPickNow(*entry.second, no);
        if (no.dra_pick == now) continue;
        ++report_.stale_summaries;
        Problem("DRA pick of ", entry.first, " ", s_.catalog_->Get(no.offering).resource,
                ": kept ", DescribePick(no.dra_pick), ", predicted now ", DescribePick(now));
      }
    }
  }

  static std::string DescribePick(const DraPick& p) {
    return absl::StrCat(static_cast<int>(p.kind), " [", absl::StrJoin(p.units, ","), "] '",
                        p.reason, "'");
  }

  void CheckUnits() {
    const Count empty{};
    for (const auto& entry : s_.nodes_) {
      const std::string& name = entry.first;
      for (const NodeOffering& no : entry.second->offerings) {
        const Offering& offering = s_.catalog_->Get(no.offering);
        for (const Unit& unit : no.units) {
          auto found = counts_.find(&unit);
          CheckUnit(name, offering, unit, found == counts_.end() ? empty : found->second);
        }
      }
    }
  }

  void CheckUnit(const std::string& node, const Offering& offering, const Unit& unit,
                 const Count& c) {
    // Built only for a problem line: 280,000 clean units must not cost 280,000 strings.
    auto id = [&] { return UnitId(node, offering.resource, unit.index); };
    bool bad = false;
    if (c.used > unit.capacity) {
      bad = true;
      Problem("unit ", id(), " oversubscribed: ", c.used, " used of capacity ", unit.capacity,
              " (holders ", HolderList(unit), ")");
    }
    if (c.used != unit.used || c.holders != static_cast<int64_t>(unit.holders.size())) {
      bad = true;
      Problem("unit ", id(), " counters disagree with pod records: used ", unit.used, " vs ",
              c.used, ", holders ", unit.holders.size(), " vs ", c.holders);
    }
    if (bad) ++report_.oversubscribed_units;
    if (c.projects.size() >= 2 && OneProjectPerUnit(offering)) {
      ++report_.multi_owner_units;
      std::vector<std::string> names;
      for (const auto& p : c.projects) names.push_back(ProjectName(p.first));
      Problem("unit ", id(), " has holders of ", c.projects.size(), " projects: ",
              absl::StrJoin(names, ","));
    }
    if (!OwnerAgrees(offering, unit, c)) {
      Problem("unit ", id(), " owner ", ProjectName(unit.owner), " disagrees with its holders");
    }
    for (const auto& [project, held] : c.projects) {
      const int64_t charge = QuotaCharge(offering, unit, held.first, held.second);
      usage_[{project, offering.id}] += charge;
      int64_t& largest = largest_unit_[{project, offering.id}];
      largest = std::max(largest, charge);
    }
  }

  static bool OwnerAgrees(const Offering& offering, const Unit& unit, const Count& c) {
    if (c.projects.empty()) return unit.owner == kNoProject;
    if (c.projects.size() == 1) return unit.owner == c.projects[0].first;
    if (offering.sharing == Sharing::kMps) return unit.owner == kNoProject;
    return std::any_of(c.projects.begin(), c.projects.end(),
                       [&](const auto& p) { return p.first == unit.owner; });
  }

  // Per-project usage against the recount, and I4 (usage within quota).
  void CheckUsageAndQuota() {
    for (size_t p = 0; p < s_.projects_.size(); ++p) {
      for (const auto& [offering, value] : s_.projects_[p].usage) {
        auto it = usage_.find({static_cast<ProjectId>(p), offering});
        const int64_t recount = it == usage_.end() ? 0 : it->second;
        if (recount != value) {
          Problem("project ", s_.projects_[p].name, " usage of ",
                  s_.catalog_->Get(offering).resource, " is ", value, " but pod records give ",
                  recount);
        }
      }
    }
    for (const auto& [pair, value] : usage_) {
      const auto& [project, offering] = pair;
      if (s_.Usage(project, offering) != value && s_.Usage(project, offering) == 0) {
        Problem("project ", ProjectName(project), " usage of ",
                s_.catalog_->Get(offering).resource, " is 0 but pod records give ", value);
      }
      const int64_t quota = s_.Quota(project, offering);
      const Sharing sharing = s_.catalog_->Get(offering).sharing;
      if (!WithinQuota(sharing, quota, value, largest_unit_[pair])) {
        ++report_.over_quota_projects;
        Problem("project ", ProjectName(project), " holds ", value, " of ",
                s_.catalog_->Get(offering).resource, ", over its quota ", quota);
      }
    }
  }

  const ClusterState& s_;
  AuditReport report_;
  absl::flat_hash_map<const Unit*, Count> counts_;
  absl::flat_hash_map<std::pair<ProjectId, OfferingId>, int64_t> usage_;
  // The largest charge of a single unit per (project, offering), for WithinQuota.
  absl::flat_hash_map<std::pair<ProjectId, OfferingId>, int64_t> largest_unit_;
};

}  // namespace cluster_state_internal

AuditReport ClusterState::Audit() const { return cluster_state_internal::Auditor(*this).Run(); }

}  // namespace gse
