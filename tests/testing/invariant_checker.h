// InvariantChecker: an independent referee for DESIGN.md's invariants I1-I6.
//
// It keeps its own ledger of what the test told it was placed and released, and its own copy
// of the facts the test applied (units and capacity per node offering, quotas as the raw
// ResourceQuota hard values). It never reads ClusterState's counters to decide whether an
// invariant holds; it reads ClusterState only to cross-check it (same pods, same usage, and
// Audit() agreeing with the ledger). Its placement rules are written from DESIGN.md, not
// from scoring/, so a rule bug on either side shows up as a disagreement.
//
// Single-threaded test helper; every check returns human-readable violations (empty = ok).
#ifndef GSE_TESTS_TESTING_INVARIANT_CHECKER_H_
#define GSE_TESTS_TESTING_INVARIANT_CHECKER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "state/assignment.h"
#include "state/catalog.h"
#include "state/cluster_state.h"

namespace gse::testing {

class InvariantChecker {
 public:
  explicit InvariantChecker(const Catalog& catalog) : catalog_(catalog) {}

  // ---- facts the test applied ----
  // The node advertises `units` units of `offering`, each with `capacity` tickets/shares
  // (1 for exclusive). Units at index >= units that are still held are draining.
  void SetNodeOffering(const std::string& node, OfferingId offering, int32_t units,
                       int32_t capacity);
  // spec.hard of the project's only ResourceQuota for the offering's quota key; absent =
  // unlimited. Tickets for time-sliced offerings (units = ceil(hard / catalog replicas)),
  // shares for mps, units for exclusive.
  void SetQuotaHard(const std::string& project, OfferingId offering, int64_t hard);
  void ClearQuota(const std::string& project, OfferingId offering);

  // ---- the ledger ----
  // Checks the placement against I1 (capacity, no new holder on a draining unit), I2 (one
  // owner), I3 (a new time-sliced unit only when no candidate node has one of the project's
  // units with a free ticket) and I4 (a reservation never takes usage above the quota
  // of that moment), then records it.
  std::vector<std::string> RecordPlacement(const std::string& pod_key,
                                           const std::string& project, const Assignment& a,
                                           const std::vector<std::string>& candidates);
  // The same checks without recording: empty when the ledger admits the placement. With no
  // candidates, I3 (a policy rule, not a commit rule) is not checked: what Reserve must
  // refuse is exactly what breaks I1, I2, I4 or the assignment's shape.
  std::vector<std::string> CheckPlacement(const std::string& pod_key,
                                          const std::string& project, const Assignment& a,
                                          const std::vector<std::string>& candidates);
  void RecordRelease(const std::string& pod_key);
  size_t placed() const { return ledger_.size(); }
  bool Holds(const std::string& pod_key) const { return ledger_.count(pod_key) != 0; }

  // ---- independent rules ----
  // Would DESIGN.md's per-node placement rule let `project` place `amount` of `offering` on
  // `node`, with the ledger's holdings of `evicted` pods given back?
  bool Fits(const std::string& node, OfferingId offering, int64_t amount,
            const std::string& project, const std::set<std::string>& evicted = {}) const;
  // Does the project own a unit of a time-sliced offering with a free ticket on one of `nodes`?
  bool OwnsFreeTicket(const std::string& project, OfferingId offering,
                      const std::vector<std::string>& nodes) const;
  // Units held (exclusive), tickets of the slices owned (time-sliced, each with its node's
  // real ticket count) or shares held (mps) by the project according to the ledger.
  int64_t LedgerUsage(const std::string& project, OfferingId offering,
                      const std::set<std::string>& evicted = {}) const;
  // The (node, index) of the time-sliced units the project owns in the ledger.
  std::set<std::pair<std::string, int32_t>> OwnedSlices(const std::string& project,
                                                         OfferingId offering,
                                                         const std::set<std::string>& evicted) const;
  // Quota in the same unit as LedgerUsage (the hard value); -1 = unlimited.
  int64_t QuotaUnits(const std::string& project, OfferingId offering) const;
  // (project, offering) pairs whose ledger usage exceeds the current quota (a quota lowered
  // under existing holdings: a fact, not a violation).
  int64_t OverQuotaPairs() const;

  // ---- filter outcomes (I5, I6) ----
  // I5: a pod asking for two tickets fails every node, with a message saying why.
  static std::vector<std::string> CheckRejectedEverywhere(const std::vector<bool>& passes,
                                                          const std::vector<std::string>& messages,
                                                          const std::string& must_mention);
  // I6: a pod asking for no catalog resource passes every node, known or not.
  static std::vector<std::string> CheckPassesEverywhere(const std::vector<bool>& passes);

  // ---- after every step ----
  // I1/I2 over the whole ledger, and the cross-checks against the mirror: the same pods hold
  // the same assignments, the mirror's per-project usage equals the ledger's, and Audit()
  // finds no oversubscription, no second owner and exactly the over-quota pairs the ledger has.
  std::vector<std::string> CheckState(const ClusterState& state) const;

 private:
  struct NodeOfferingSpec {
    int32_t units = 0;
    int32_t capacity = 1;
  };
  struct Entry {
    std::string project;
    Assignment assignment;
  };
  using UnitKey = std::tuple<std::string, OfferingId, int32_t>;  // node, offering, index
  struct UnitLedger {
    int64_t used = 0;
    std::set<std::string> projects;
  };

  // Units as the ledger (minus `evicted`) fills them; valid until the next call or change.
  const std::map<UnitKey, UnitLedger>& Units(const std::set<std::string>& evicted) const;
  const NodeOfferingSpec* Spec(const std::string& node, OfferingId offering) const;
  int32_t Capacity(const std::string& node, OfferingId offering) const;
  std::vector<std::string> CheckUnits() const;  // I1, I2 over the ledger

  const Catalog& catalog_;
  std::map<std::pair<std::string, OfferingId>, NodeOfferingSpec> specs_;
  std::map<std::pair<std::string, OfferingId>, int64_t> quota_hard_;
  std::map<std::string, Entry> ledger_;
  // Units({}) of the current ledger; invalidated by every placement and release.
  mutable std::map<UnitKey, UnitLedger> units_;
  mutable bool units_valid_ = false;
  mutable std::map<UnitKey, UnitLedger> evicted_units_;  // scratch for Units(evicted)
};

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_INVARIANT_CHECKER_H_
