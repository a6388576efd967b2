// FaultPlan: what happens in each phase of the randomized fault run, drawn from the seed alone
// (MakePhasePlan(seed, index) is a pure function), so that a printed seed reproduces the
// sequence of operations and faults. Which pod an operation hits is drawn as a rank into the
// pods that qualify when it runs (those depend on how earlier binds went).
//
// The first kFeaturedKinds phases each feature one kind of fault (so the short run covers
// every kind); every phase also gets random others. Limits that keep each violation judgeable
// and attributable to the extender (see tests/fault_run_test.cc):
//  * a fact (a namespace's label, a quota value, a node's size) changes at most once per phase;
//  * writes held by the API server (late commits) stay below the Lease duration, so that a
//    write of a dead leader cannot land after its successor took over;
//  * a take-over while watches are held is covered: the featured phase of held watches hands
//    over (SIGKILL or SIGTERM) every other time (index % 20 == 3: phase 3 of the short runs,
//    and phase 23, where a long run met the stale take-over).
//    The successor's watch has shown nothing for seconds; it must relist before it decides
//    (extender/live_cluster.h, issue 12);
//  * a phase with late commits hands over by SIGKILL only, never SIGTERM: a graceful leader
//    releases the Lease at once, and a write held past its own bind's deadline could then land
//    after the successor decided — no extender can see a write the API server has not made.
#ifndef GSE_TESTS_TESTING_FAULT_PLAN_H_
#define GSE_TESTS_TESTING_FAULT_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tests/testing/fault_cluster.h"

namespace gse::testing {

// Faults the API server injects into the extender's requests (FakeApiServer::Fault).
enum class ApiFault {
  kLostAnswer,          // binding commits, its answer comes after the bind's own deadline
  kErrorAfterCommit,    // binding commits, answered 500/503/504
  kErrorBeforeCommit,   // binding answered 500/503 without being applied
  kConflict,            // binding answered 409 Conflict without being applied
  kLateCommit,          // binding held past the bind's deadline, then committed
  kReadBackFails,       // GET of a pod (the bind's read-back) answered 500
  kWatchRequestFails,   // watch requests answered 500 (the reflector reconnects)
};
// What the harness does at a point of the phase (after a number of bind calls).
enum class Action {
  kDropWatches,      // every open watch ends abruptly
  kCompactAndDrop,   // history compacted, watches dropped: 410 Gone, every replica relists
  kTruncateEvent,    // the next watch event is cut in half, the stream dies
  kReleaseWatchesPartly,  // held watches deliver up to the phase's start changes (deletes,
                          // recreations), still not the binds made since
  kReleaseWatches,   // held watches deliver what they kept
  kDeleteBound,      // a bound pod is deleted (its units are released)
  kRecreate,         // a pod is deleted and created again under its name (new UID)
  kCompleteBound,    // a bound pod succeeds (its units are released)
  kApplyFacts,       // the phase's fact changes happen now, while binds are in flight
  kKillLeader,       // SIGKILL the ready replica, start it again (the other takes over)
  kTerminateLeader,  // SIGTERM the ready replica (graceful hand-over), start it again
  kRestartAll,       // SIGKILL every replica, start them again (rebuild from the API)
};
const char* ApiFaultName(ApiFault f);
const char* ActionName(Action a);

struct FactChange {
  enum Kind { kRelabel, kQuota, kNodeUnits } kind;
  std::string target;    // namespace or node
  std::string resource;  // kQuota
  std::string label;     // kRelabel: the project ("" removes the label)
  int64_t value = 0;     // kQuota: hard; kNodeUnits: units
  std::string Describe() const;
};

struct PlannedFault {
  ApiFault kind;
  int times = 1;
  int status = 0;  // kErrorAfterCommit, kErrorBeforeCommit
};

struct PlannedAction {
  Action kind;
  int64_t after_binds = 0;  // fires once this many bind calls of the phase were sent
  uint64_t pick = 0;        // rank of the pod it hits, modulo those that qualify
};

struct PhasePlan {
  int index = 0;
  std::string featured;  // the fault kind this phase features, if any
  std::vector<PodPlan> new_pods;
  // At the start of the phase, as ranks modulo the qualifying pods.
  std::vector<uint64_t> delete_bound, recreate, complete_bound;
  std::vector<FactChange> facts;
  bool facts_mid_phase = false;  // applied by kApplyFacts instead of at the start
  bool hold_watches = false;     // from the start until kReleaseWatches
  std::vector<PlannedFault> faults;
  std::vector<PlannedAction> actions;  // by after_binds
};

inline constexpr int kFeaturedKinds = 10;

// `scale` in (0, 1] shrinks the pods per phase (sanitizer builds).
PhasePlan MakePhasePlan(uint64_t seed, int index, double scale);
std::string DescribePlan(const PhasePlan& plan);

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_FAULT_PLAN_H_
