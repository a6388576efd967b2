// FaultPlan: see the header.
#include "tests/testing/fault_plan.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gse::testing {
namespace {

// std::uniform_int_distribution differs between standard libraries; the run's sequence must
// not, so draws are taken from the engine (whose output the standard fixes) directly.
class Draw {
 public:
  Draw(uint64_t seed, int index) : rng_(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(index)) {}
  int64_t Between(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(int percent) { return static_cast<int>(rng_() % 100) < percent; }
  uint64_t Raw() { return rng_(); }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Between(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  std::mt19937_64 rng_;
};

PodPlan RandomPod(Draw& d, int phase, int i) {
  PodPlan p;
  p.namespace_name = d.Pick(FaultCluster::Namespaces());
  p.name = absl::StrCat("p", phase, "-", i);
  const int64_t r = d.Between(0, 99);
  if (r < 35) {
    p.resource = "nvidia.com/mig-1g.5gb.shared";
    p.amount = 1;
  } else if (r < 45) {
    p.resource = "nvidia.com/gpu.shared";  // DRA node dra-g only
    p.amount = 1;
  } else if (r < 65) {
    p.resource = "nvidia.com/mig-1g.5gb";
    p.amount = 1;
  } else if (r < 80) {
    p.resource = "nvidia.com/gpu";
    p.amount = d.Between(1, 2);
  } else if (r < 95) {
    p.resource = "nvidia.com/gpu.mps";
    p.amount = d.Between(1, 3);
  }  // else a pod without GPUs
  return p;
}

int64_t QuotaCeiling(const std::string& resource) {
  if (resource == "nvidia.com/mig-1g.5gb.shared") return 12;  // tickets
  if (resource == "nvidia.com/gpu.mps") return 8;              // shares
  if (resource == "nvidia.com/gpu.shared") return 8;           // tickets
  return 3;                                                    // units
}

FactChange RandomFact(Draw& d, int kind, bool lower) {
  FactChange f{};
  f.kind = static_cast<FactChange::Kind>(kind);
  switch (f.kind) {
    case FactChange::kRelabel:
      f.target = d.Pick(FaultCluster::RelabelledNamespaces());
      f.label = d.Pick(FaultCluster::ProjectLabelValues());
      break;
    case FactChange::kQuota: {
      f.target = d.Pick(FaultCluster::QuotaNamespaces());
      f.resource = d.Pick(FaultCluster::Offerings()).resource;
      const int64_t ceiling = QuotaCeiling(f.resource);
      f.value = lower ? d.Between(0, ceiling / 3) : d.Between(0, ceiling);
      break;
    }
    case FactChange::kNodeUnits: {
      f.target = d.Pick(FaultCluster::DevicePluginNodes());
      const int64_t full = FaultCluster::FullUnits(f.target);
      f.value = lower || d.Chance(50) ? full - d.Between(1, 2) : full;
      break;
    }
  }
  return f;
}

std::string FactKey(const FactChange& f) {
  return absl::StrCat(f.kind, "/", f.target, "/", f.resource);
}

void AddFact(PhasePlan& plan, FactChange f) {
  for (const FactChange& g : plan.facts) {
    if (FactKey(g) == FactKey(f)) return;  // one change per fact and phase
  }
  plan.facts.push_back(std::move(f));
}

void AddAction(PhasePlan& plan, Draw& d, Action kind, int64_t lo, int64_t hi) {
  plan.actions.push_back(PlannedAction{kind, d.Between(lo, std::max(lo, hi)), d.Raw()});
}

}  // namespace

const char* ApiFaultName(ApiFault f) {
  switch (f) {
    case ApiFault::kLostAnswer: return "bind answer lost after commit";
    case ApiFault::kErrorAfterCommit: return "bind 5xx after commit";
    case ApiFault::kErrorBeforeCommit: return "bind 5xx before commit";
    case ApiFault::kConflict: return "bind 409 conflict";
    case ApiFault::kLateCommit: return "bind committed after its deadline";
    case ApiFault::kReadBackFails: return "pod read-back 500";
    case ApiFault::kWatchRequestFails: return "watch request 500";
  }
  return "?";
}

const char* ActionName(Action a) {
  switch (a) {
    case Action::kDropWatches: return "watches dropped";
    case Action::kCompactAndDrop: return "compaction (410) and relist";
    case Action::kTruncateEvent: return "watch event truncated";
    case Action::kReleaseWatchesPartly: return "held watches released up to the phase's changes";
    case Action::kReleaseWatches: return "held watches released";
    case Action::kDeleteBound: return "bound pod deleted";
    case Action::kRecreate: return "pod recreated under its name";
    case Action::kCompleteBound: return "bound pod completed";
    case Action::kApplyFacts: return "facts changed mid-phase";
    case Action::kKillLeader: return "leader SIGKILLed";
    case Action::kTerminateLeader: return "leader SIGTERMed";
    case Action::kRestartAll: return "every replica SIGKILLed and restarted";
  }
  return "?";
}

std::string FactChange::Describe() const {
  switch (kind) {
    case kRelabel:
      return absl::StrCat("namespace ", target, " project label -> ", label.empty() ? "(none)" : label);
    case kQuota:
      return absl::StrCat("quota ", target, " requests.", resource, " -> ", value);
    case kNodeUnits:
      return absl::StrCat("node ", target, " -> ", value, " allocatable unit(s)");
  }
  return "?";
}

PhasePlan MakePhasePlan(uint64_t seed, int index, double scale) {
  Draw d(seed, index);
  PhasePlan plan;
  plan.index = index;
  const int pods = std::max(3, static_cast<int>(std::lround(scale * static_cast<double>(d.Between(16, 24)))));
  for (int i = 0; i < pods; ++i) plan.new_pods.push_back(RandomPod(d, index, i));
  for (int64_t i = d.Between(6, 10); i > 0; --i) plan.delete_bound.push_back(d.Raw());
  for (int64_t i = d.Between(0, 3); i > 0; --i) plan.complete_bound.push_back(d.Raw());
  for (int64_t i = d.Between(0, 1); i > 0; --i) plan.recreate.push_back(d.Raw());
  plan.facts_mid_phase = d.Chance(50);

  switch (index % kFeaturedKinds) {
    case 0:
      plan.featured = "ambiguous bind: answer lost after commit, read-back fails";
      plan.faults.push_back({ApiFault::kLostAnswer, 2, 0});
      plan.faults.push_back({ApiFault::kReadBackFails, 3, 0});
      break;
    case 1:
      plan.featured = "ambiguous bind: 5xx after commit, retry meets 409, read-back fails";
      plan.faults.push_back({ApiFault::kErrorAfterCommit, 2, d.Chance(50) ? 500 : 503});
      plan.faults.push_back({ApiFault::kReadBackFails, 3, 0});
      break;
    case 2:
      plan.featured = "bind committed after the extender gave up";
      plan.faults.push_back({ApiFault::kLateCommit, 2, 0});
      break;
    case 3:
      plan.featured = "pods recreated under their names while the watch lags";
      plan.hold_watches = true;
      plan.recreate.push_back(d.Raw());
      plan.recreate.push_back(d.Raw());
      plan.recreate.push_back(d.Raw());
      AddAction(plan, d, Action::kReleaseWatchesPartly, pods / 4, pods / 2);
      // A take-over by a replica whose watches showed nothing since the phase began.
      if (index % (2 * kFeaturedKinds) == 3) {
        plan.featured += "; the leader hands over while the watches are held";
        AddAction(plan, d, d.Chance(50) ? Action::kKillLeader : Action::kTerminateLeader, 1, pods / 2);
      }
      break;
    case 4:
      plan.featured = "namespace relabelled and quota lowered, then a relist";
      AddFact(plan, RandomFact(d, FactChange::kRelabel, true));
      AddFact(plan, RandomFact(d, FactChange::kQuota, true));
      AddAction(plan, d, Action::kCompactAndDrop, 1, pods);
      break;
    case 5:
      plan.featured = "node shrinks (allocatable lowered, .count label kept)";
      AddFact(plan, RandomFact(d, FactChange::kNodeUnits, true));
      break;
    case 6:
      plan.featured = "leader SIGKILLed: hand-over after the lease expires";
      AddAction(plan, d, Action::kKillLeader, 1, pods / 2);
      break;
    case 7:
      plan.featured = "leader SIGTERMed: graceful hand-over";
      AddAction(plan, d, Action::kTerminateLeader, 1, pods / 2);
      break;
    case 8:
      plan.featured = "every replica SIGKILLed and restarted";
      AddAction(plan, d, Action::kRestartAll, 1, pods / 2);
      break;
    case 9:
      plan.featured = "watch faults and bind conflicts";
      plan.faults.push_back({ApiFault::kWatchRequestFails, 3, 0});
      plan.faults.push_back({ApiFault::kConflict, 2, 0});
      plan.faults.push_back({ApiFault::kErrorBeforeCommit, 2, d.Chance(50) ? 500 : 503});
      AddAction(plan, d, Action::kDropWatches, 0, 2);  // early: the reconnections meet the 500s
      AddAction(plan, d, Action::kTruncateEvent, 0, pods);
      break;
  }

  // Random others on top of the featured kind.
  if (d.Chance(50)) {
    const ApiFault kinds[] = {ApiFault::kLostAnswer, ApiFault::kErrorAfterCommit,
                              ApiFault::kErrorBeforeCommit, ApiFault::kConflict,
                              ApiFault::kLateCommit, ApiFault::kReadBackFails,
                              ApiFault::kWatchRequestFails};
    ApiFault kind = kinds[d.Between(0, 6)];
    // The graceful hand-over phase keeps its SIGTERM: no late commits there (see the header).
    if (kind == ApiFault::kLateCommit && index % kFeaturedKinds == 7) kind = ApiFault::kLostAnswer;
    plan.faults.push_back({kind, static_cast<int>(d.Between(1, 2)), d.Chance(50) ? 500 : 504});
  }
  const std::vector<Action> cheap = {Action::kDropWatches,  Action::kCompactAndDrop,
                                     Action::kTruncateEvent, Action::kDeleteBound,
                                     Action::kRecreate,      Action::kCompleteBound};
  for (int64_t i = d.Between(0, 2); i > 0; --i) AddAction(plan, d, d.Pick(cheap), 0, pods);
  if (!plan.hold_watches && d.Chance(15)) {
    AddAction(plan, d, d.Chance(50) ? Action::kKillLeader : Action::kTerminateLeader, 1, pods);
  }
  for (int64_t i = d.Chance(60) ? d.Between(1, 2) : 0; i > 0; --i) {
    const int kind = static_cast<int>(d.Between(0, 2));
    AddFact(plan, RandomFact(d, kind, false));
  }
  if (plan.hold_watches) AddAction(plan, d, Action::kReleaseWatches, pods / 2 + 1, pods);
  const bool late_commits = std::any_of(plan.faults.begin(), plan.faults.end(), [](const PlannedFault& f) {
    return f.kind == ApiFault::kLateCommit;
  });
  for (PlannedAction& a : plan.actions) {
    if (late_commits && a.kind == Action::kTerminateLeader) a.kind = Action::kKillLeader;
  }
  if (!plan.facts.empty() && plan.facts_mid_phase) AddAction(plan, d, Action::kApplyFacts, 0, pods);
  std::stable_sort(plan.actions.begin(), plan.actions.end(),
                   [](const PlannedAction& a, const PlannedAction& b) { return a.after_binds < b.after_binds; });
  return plan;
}

std::string DescribePlan(const PhasePlan& plan) {
  std::vector<std::string> parts;
  if (!plan.featured.empty()) parts.push_back(absl::StrCat("featuring: ", plan.featured));
  parts.push_back(absl::StrCat(plan.new_pods.size(), " new pods, ", plan.delete_bound.size(),
                               " deleted, ", plan.complete_bound.size(), " completed, ",
                               plan.recreate.size(), " recreated at the start"));
  for (const FactChange& f : plan.facts) {
    parts.push_back(absl::StrCat(f.Describe(), plan.facts_mid_phase ? " (mid-phase)" : ""));
  }
  if (plan.hold_watches) parts.push_back("watches held from the start");
  for (const PlannedFault& f : plan.faults) {
    parts.push_back(absl::StrCat(ApiFaultName(f.kind), " x", f.times, f.status != 0 ? absl::StrCat(" (", f.status, ")") : ""));
  }
  for (const PlannedAction& a : plan.actions) {
    parts.push_back(absl::StrCat(ActionName(a.kind), " after ", a.after_binds, " bind call(s)"));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace gse::testing
