// ApiAudit: DESIGN.md's invariants I1, I2 and I4 judged from the API server's objects alone —
// pods' spec.nodeName, requests and gpu.themelio.io/* annotations, nodes' allocatable and
// labels, namespaces' labels and ResourceQuotas' spec.hard — never from the extender (no
// /debug/state, no metrics, no code of state/ or scoring/). What it knows of offerings is
// what the test tells it (AuditOffering, written from DESIGN.md and the built-in catalog).
//
// It judges one phase of a fault run at a time. Facts (units, quotas, projects) may change
// once per phase, at any moment of it, so a bind in that phase may have been decided before
// or after the change: a phase is judged against the most lenient of the facts in force
// before, during and after it. Holdings are judged absolutely: a unit holding more than
// its capacity, or two projects on a time-sliced unit, is a violation whenever it is seen.
// Nothing depends on timing: only on which pods were bound at the start and at the end of
// the phase, as the API server stored them.
//
// Single-threaded helper (it reads the FakeApiServer through its thread-safe accessors).
#ifndef GSE_TESTS_TESTING_API_AUDIT_H_
#define GSE_TESTS_TESTING_API_AUDIT_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "testsupport/fake_apiserver.h"

namespace gse::testing {

enum class AuditSharing { kExclusive, kTimeSliced, kMps };

// One offering as DESIGN.md defines it: an exclusive unit has one holder, a time-sliced unit
// `replicas` tickets of one project, an MPS unit `replicas` shares.
struct AuditOffering {
  std::string resource;  // the extended resource name pods request and nodes advertise
  AuditSharing sharing = AuditSharing::kExclusive;
  int replicas = 1;  // catalog replicas: per unit unless the node's <base>.replicas label says
                     // otherwise
};

// A DRA node as the test published it (its ResourceSlice): the devices that serve `resource`,
// "<driver>/<pool>/<device>" in the slices' walk order (unit i is devices[i]), and the holders
// (exclusive) or shares (time-sliced) per device.
struct AuditDraNode {
  std::string node;
  std::string resource;
  std::vector<std::string> devices;
  int64_t capacity = 1;
};

// The facts a phase is judged against, read from Node, Namespace and ResourceQuota objects.
struct AuditFacts {
  struct NodeUnits {
    int64_t units = 0;     // allocatable / per-unit capacity: what the device plugin hands out
    int64_t capacity = 1;  // holders (exclusive), tickets or shares per unit
  };
  std::map<std::pair<std::string, std::string>, NodeUnits> units;  // (node, resource)
  std::map<std::string, std::string> project_of_namespace;
  // (project, resource) -> quota, the hard value (units, tickets or shares); absent = unlimited.
  std::map<std::pair<std::string, std::string>, int64_t> quota;
  std::vector<std::string> problems;  // objects the audit could not read (a test bug)
};

// A bound, non-terminal pod that claims units through its annotations.
struct AuditHolder {
  std::string key;  // namespace/name
  std::string uid;
  std::string namespace_name;
  std::string node;      // spec.nodeName
  std::string resource;  // from gpu.themelio.io/unit
  std::vector<int64_t> units;
  int64_t amount = 1;    // gpu.themelio.io/amount: tickets or shares per unit
  std::string project;   // gpu.themelio.io/project
  std::map<std::string, std::string> annotations;  // gpu.themelio.io/* only
};

// What the API server held at one moment.
struct AuditSnapshot {
  AuditFacts facts;
  std::vector<AuditHolder> holders;
  std::set<std::string> bound_uids;  // every bound, non-terminal pod (holder or not)
  // Bound GPU pods whose claim cannot be read or does not match what they asked for.
  std::vector<std::pair<std::string, std::string>> unaccounted;  // (uid, evidence)
  // (project, resource) -> usage: exclusive units held, the tickets of the time-sliced
  // slices with a ticket of the project (each whole, with its node's ticket count), MPS shares.
  std::map<std::pair<std::string, std::string>, int64_t> usage;
  // (project, resource) -> the most tickets of one slice it owns (time-sliced only).
  std::map<std::pair<std::string, std::string>, int64_t> largest_slice;
  // DRA nodes: per device, the live allocated claims of bound, non-terminal pods (what the
  // kubelet hands out there), as "<pod key> (project P, claim C)"; and per project.
  std::map<std::string, std::vector<std::string>> dra_claims;
  std::map<std::string, std::set<std::string>> dra_projects;
  // Holders on DRA nodes whose gpu.themelio.io/dra-devices or unit indices disagree with
  // their live claim's devices: (uid, evidence).
  std::vector<std::pair<std::string, std::string>> dra_mismatches;
};

struct AuditViolation {
  std::string kind;      // "I1 capacity", "I1 unit beyond allocatable", "I1 unaccounted",
                         // "I2 two projects", "I4 quota", "I4 charged project"
  std::string key;       // the same violation seen again in a later phase has the same key
                         // (a unit over capacity or with two owners: until a holder joins)
  std::string evidence;  // pods, annotations and facts involved, for a person to read
};

class ApiAudit {
 public:
  ApiAudit(std::vector<AuditOffering> offerings, std::string project_label,
           std::vector<AuditDraNode> dra_nodes = {});

  // Reads every object the judgement needs from the server's store.
  AuditSnapshot Snapshot(const FakeApiServer& fake) const;

  // The violations of one phase. `previous` is the snapshot at the end of the phase before
  // (empty for the first), `start` the one after this phase's first changes, `end` the one
  // after this phase quiesced. `earlier` are the facts that may still have been in force when
  // the phase began: the previous end's, and older ones when the extender may not have caught
  // up with them. A bind of this phase may have seen any of `earlier`, start's or end's facts;
  // each rule takes the most lenient of them. A pod is new in this phase when `previous` did
  // not hold it bound.
  //  * I1 capacity: a unit whose holders' amounts exceed its capacity.
  //  * I1 unit beyond allocatable: a new holder on a unit index at or above the node's units
  //    under every fact set in force (a unit the device plugin does not hand out).
  //  * I1 unaccounted: a bound GPU pod without a readable claim that matches its request.
  //  * I2 two projects: a time-sliced unit whose holders carry two project annotations.
  //  * I4 charged project: a new holder charged to a project its namespace never had.
  //  * DRA (from ResourceClaims, the truth on a DRA node): "I1 DRA device" a holder whose
  //    annotations name other devices than its live claim; "I1 DRA capacity" a device whose
  //    live claims of bound pods exceed its capacity; "I2 DRA two projects" a shared device
  //    with live claims of bound pods of two projects.
  //  * I4 quota: see ApiAudit::Judge in api_audit.cc for exactly which excess counts.
  std::vector<AuditViolation> Judge(const AuditSnapshot& previous,
                                    const std::vector<const AuditFacts*>& earlier,
                                    const AuditSnapshot& start, const AuditSnapshot& end) const;

  // One line per holder, for evidence: key, uid, node, gpu.themelio.io/* annotations, and
  // what the test noted about the pod (by UID or by namespace/name).
  std::string DescribeHolders(const std::vector<const AuditHolder*>& holders) const;
  // Remembers a note for evidence ("bound in phase 3", "its binding met a 5xx after commit").
  void Note(const std::string& uid_or_key, const std::string& note);

  const AuditOffering* Find(const std::string& resource) const;

 private:
  AuditFacts ReadFacts(const FakeApiServer& fake) const;
  // The DRA part of Snapshot: claims of bound pods per device, and holders checked against them.
  void ReadDraClaims(const FakeApiServer& fake, AuditSnapshot& snap) const;
  const AuditDraNode* FindDraNode(const std::string& node) const;

  std::map<std::string, AuditOffering> offerings_;
  std::string project_label_;
  std::vector<AuditDraNode> dra_nodes_;
  std::map<std::string, std::vector<std::string>> notes_;
};

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_API_AUDIT_H_
