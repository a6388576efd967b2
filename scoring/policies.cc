// Placement policies: "affinity-pack" and "spread" (the service's default is "fgd",
// scoring/task_mix.h).
//
// Both policies share one picture of a node (NodeGauge): which unit the pod would take and
// how many free units of the offering would remain. Score grades that picture and ChooseUnits
// returns exactly the units it describes, so the unit chosen at bind is the one the scores
// favoured. Feasibility itself is always CheckNode's (feasibility.cc); the unit predicates here
// are the same rules read from the units' own counters (policies see no evictions).
#include "scoring/policies.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gse {
namespace {

constexpr absl::string_view kAffinityPack = "affinity-pack";
constexpr absl::string_view kSpread = "spread";

enum class Mode { kPack, kSpread };

bool OwnedWithFreeTicket(const Unit& unit, ProjectId project) {
  return project != kNoProject && !unit.Empty() && unit.owner == project && unit.Free() >= 1;
}

bool UsableEmpty(const Unit& unit) { return unit.Empty() && unit.Free() >= 1; }

// What placing the request on one node would look like under a policy.
struct NodeGauge {
  std::vector<int32_t> units;  // the units ChooseUnits returns (sorted)
  bool owned_unit = false;     // time-sliced: joins a unit the project already owns
  bool owns_any = false;       // time-sliced: the project owns some unit of R here (even full)
  bool joins_used_unit = false;  // mps: the chosen unit already has holders
  int64_t chosen_left = 0;     // mps: free shares left in the chosen unit after placement
  int32_t chosen_capacity = 0;  // mps: its capacity
  int64_t live_units = 0;      // non-draining units of the offering
  int64_t empty_after = 0;     // usable empty units of the offering left after placement
  int64_t free_shares_after = 0;  // mps: shares still admissible to the project
  int64_t live_shares = 0;        // mps: capacity of non-draining units
  bool node_busy = false;      // some unit of any offering on the node has holders
};

// The gauge's room after placing an exclusive or time-sliced request: a time-sliced ticket
// on an owned unit takes no empty unit (the summary's and the room row's common part).
void CountRoom(Sharing sharing, const PodRequest& request, int64_t empty_units, bool owns_any,
               bool owned_unit, NodeGauge& g) {
  if (sharing == Sharing::kExclusive) {
    g.empty_after = empty_units - request.amount;
    return;
  }
  g.owns_any = owns_any;
  g.owned_unit = owned_unit;
  g.empty_after = owned_unit ? empty_units : empty_units - 1;
}

// Builds the gauge for a node CheckNode accepted; the units themselves only when
// `choose_units` (bind), since a score needs just the mirror's per-offering summary — except
// for MPS, whose grade depends on the chosen unit. Deterministic: ties go to the lowest index.
// `project` is state.FindProject(request.project); `checked` says FilterNodes already
// accepted the node on this state (else CheckNode runs here).
absl::StatusOr<NodeGauge> Gauge(const ClusterState& state, const PodRequest& request,
                                ProjectId project, const NodeState& node, Mode mode,
                                bool choose_units, bool checked) {
  if (!request.interested()) {
    return absl::FailedPreconditionError("pod requests no GPU offering");
  }
  if (!checked) {
    const NodeFit fit = CheckNode(state, request, &node);
    if (!fit.fits()) return absl::FailedPreconditionError(fit.Message(request));
  }
  const Offering& offering = state.catalog().Get(request.offering);
  const NodeOffering* found = node.Find(request.offering);
  if (found == nullptr) return absl::FailedPreconditionError("offering not on node");
  const NodeOffering& no = *found;
  const OfferingSummary& summary = no.summary;
  NodeGauge g;
  g.node_busy = node.held_units > 0;
  g.live_units = summary.live_units;
  g.live_shares = summary.live_capacity;
  const int64_t empty_units = summary.empty_units;

  switch (offering.sharing) {
    case Sharing::kExclusive: {
      CountRoom(Sharing::kExclusive, request, empty_units, false, false, g);
      if (!choose_units) break;
      for (const Unit& unit : no.units) {
        if (static_cast<int64_t>(g.units.size()) == request.amount) break;
        if (UsableEmpty(unit)) g.units.push_back(unit.index);
      }
      break;
    }
    case Sharing::kTimeSliced: {
      CountRoom(Sharing::kTimeSliced, request, empty_units, summary.Owns(project),
                summary.OwnsWithRoom(project), g);
      if (!choose_units) break;
      // The project's own unit first (I3 inside the node): fullest under pack so units fill
      // up and free up whole; least loaded under spread.
      const Unit* best = nullptr;
      if (g.owned_unit) {
        for (const Unit& unit : no.units) {
          if (!OwnedWithFreeTicket(unit, project)) continue;
          if (best == nullptr || (mode == Mode::kPack ? unit.Free() < best->Free()
                                                      : unit.Free() > best->Free())) {
            best = &unit;
          }
        }
      } else {
        for (const Unit& unit : no.units) {
          if (UsableEmpty(unit)) {
            best = &unit;
            break;
          }
        }
      }
      if (best != nullptr) g.units.push_back(best->index);
      break;
    }
    case Sharing::kMps: {
      // Best fit (fullest unit that fits) under pack, emptiest under spread.
      const Unit* best = nullptr;
      int64_t admissible_free = 0;
      for (const Unit& unit : no.units) {
        if (!UnitAdmitsProject(unit, offering, project)) continue;
        admissible_free += unit.Free();
        if (unit.Free() < request.amount) continue;
        if (best == nullptr || (mode == Mode::kPack ? unit.Free() < best->Free()
                                                    : unit.Free() > best->Free())) {
          best = &unit;
        }
      }
      if (best == nullptr) {
        return absl::FailedPreconditionError("no units fit on node (filter and policy disagree)");
      }
      g.units.push_back(best->index);
      g.joins_used_unit = !best->Empty();
      g.chosen_left = best->Free() - request.amount;
      g.chosen_capacity = best->capacity;
      g.empty_after = empty_units - (best->Empty() ? 1 : 0);
      g.free_shares_after = admissible_free - request.amount;
      break;
    }
  }
  // CheckNode and the unit predicates above read the same rules; should they ever drift
  // apart, refuse rather than hand out a unit the filter did not vouch for.
  if (choose_units &&
      (g.units.empty() || static_cast<int64_t>(g.units.size()) !=
                              (offering.sharing == Sharing::kExclusive ? request.amount : 1))) {
    return absl::FailedPreconditionError("no units fit on node (filter and policy disagree)");
  }
  std::sort(g.units.begin(), g.units.end());
  return g;
}

int64_t Clamp(int64_t score) { return std::clamp<int64_t>(score, 0, kMaxExtenderPriority); }

// Packing: fewer usable empty units left after placement scores higher; a placement that
// leaves none (exact fit) is best; breaking into a node nobody uses yet is worst, so whole
// nodes stay free for large requests. Result within [lo, hi].
int64_t PackingScore(const NodeGauge& g, int64_t lo, int64_t hi) {
  if (g.empty_after <= 0) return hi;
  if (!g.node_busy) return lo;
  return std::max(lo + 1, hi - g.empty_after);
}

// Spread: the larger the fraction of the node's units left empty, the higher, within [1, 10].
int64_t SpreadScore(int64_t left, int64_t total) {
  if (total <= 0) return 1;
  return 1 + (9 * std::max<int64_t>(left, 0)) / total;
}

class PolicyBase : public PlacementPolicy {
 public:
  explicit PolicyBase(Mode mode) : mode_(mode) {}

  int64_t Score(const ClusterState& state, const PodRequest& request,
                const NodeState& node) const override {
    return Graded(Gauge(state, request, state.FindProject(request.project), node, mode_,
                        /*choose_units=*/false, /*checked=*/false),
                  state, request);
  }

  int64_t ScoreFiltered(const ClusterState& state, const PodRequest& request, ProjectId project,
                        const NodeState& node) const override {
    return Graded(Gauge(state, request, project, node, mode_, /*choose_units=*/false,
                        /*checked=*/true),
                  state, request);
  }

  // From the row for exclusive and time-sliced requests (MPS grades the chosen unit, which
  // only the node's units tell), unless the project's id is 64 or more on a node with such
  // owners (the row's owner bits cannot say).
  std::optional<int64_t> ScoreFilteredRow(const ClusterState& state, const PodRequest& request,
                                          ProjectId project, const RoomRow& row) const override {
    const Sharing sharing = state.catalog().Get(request.offering).sharing;
    if (sharing == Sharing::kMps || !row.Tells(project)) return std::nullopt;
    NodeGauge g;
    g.node_busy = row.node_busy;
    g.live_units = row.live_units;
    CountRoom(sharing, request, row.empty_units, row.Owns(project), row.OwnsWithRoom(project), g);
    return Clamp(Grade(sharing, g));
  }

  absl::StatusOr<Assignment> ChooseUnits(const ClusterState& state, const PodRequest& request,
                                         const NodeState& node) const override {
    absl::StatusOr<NodeGauge> g = Gauge(state, request, state.FindProject(request.project), node,
                                        mode_, /*choose_units=*/true, /*checked=*/false);
    if (!g.ok()) return g.status();
    Assignment a;
    a.node = node.name;
    a.offering = request.offering;
    a.units = std::move(g->units);
    a.amount_per_unit = state.catalog().Get(request.offering).sharing == Sharing::kMps
                            ? static_cast<int32_t>(request.amount)
                            : 1;
    return a;
  }

 protected:
  virtual int64_t Grade(Sharing sharing, const NodeGauge& g) const = 0;

 private:
  int64_t Graded(const absl::StatusOr<NodeGauge>& g, const ClusterState& state,
                 const PodRequest& request) const {
    if (!g.ok()) return 0;
    return Clamp(Grade(state.catalog().Get(request.offering).sharing, *g));
  }

  Mode mode_;
};

class AffinityPackPolicy final : public PolicyBase {
 public:
  AffinityPackPolicy() : PolicyBase(Mode::kPack) {}
  absl::string_view name() const override { return kAffinityPack; }

 protected:
  int64_t Grade(Sharing sharing, const NodeGauge& g) const override {
    switch (sharing) {
      case Sharing::kExclusive:
        return PackingScore(g, 1, 10);
      case Sharing::kTimeSliced:
        if (g.owned_unit) return 10;  // the project's partly filled unit
        if (g.owns_any) return 9;     // keeps the project's units on one node
        return PackingScore(g, 1, 8);
      case Sharing::kMps:
        if (g.joins_used_unit && g.chosen_capacity > 0) {
          // Fewer shares left in the unit after placement = tighter fit; always above any
          // placement that opens an empty unit.
          return std::max<int64_t>(3, 10 - (8 * g.chosen_left) / g.chosen_capacity);
        }
        return g.empty_after <= 0 || g.node_busy ? 2 : 1;
    }
    return 0;
  }
};

class SpreadPolicy final : public PolicyBase {
 public:
  SpreadPolicy() : PolicyBase(Mode::kSpread) {}
  absl::string_view name() const override { return kSpread; }

 protected:
  int64_t Grade(Sharing sharing, const NodeGauge& g) const override {
    if (sharing == Sharing::kMps) return SpreadScore(g.free_shares_after, g.live_shares);
    return SpreadScore(g.empty_after, g.live_units);
  }
};

}  // namespace

std::vector<std::string> PolicyNames() {
  return {std::string(kAffinityPack), std::string(kSpread)};
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePolicy(absl::string_view name) {
  if (name == kAffinityPack) return std::make_unique<AffinityPackPolicy>();
  if (name == kSpread) return std::make_unique<SpreadPolicy>();
  return absl::InvalidArgumentError(absl::StrCat("placement policy: unknown name \"", name,
                                                 "\"; known: ",
                                                 absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace gse
