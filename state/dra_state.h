// The DRA model (docs/dra.md): what the extender knows about a node's DRA devices, built from
// mirrored DeviceClasses, ResourceSlices and ResourceClaims (state/dra_objects.h) as the DRA
// fact sheet describes them (shared/protocol/dra/README.md).
//
//  * Kind per (resource name, node), KEP-5004's per-node rule: a DeviceClass maps the name and
//    the node's allocatable for it is 0 or absent -> DRA; allocatable > 0 -> device plugin;
//    neither -> none.
//  * Units of a node for a class: the class's devices from the node's complete pools in the
//    allocator's walk order (pools by driver then name, slices by name, devices in array
//    order), with UUID, parent UUID, MIG profile and product from the NVIDIA driver's attributes.
//  * Class selectors: only the CEL shapes `catalog render --what=device-classes` writes
//    (DraSelector); anything else is "not understood" and reported, never guessed.
//  * Holders: allocated claims' results, the scheduler's extended-resource claims by
//    annotation + controlling Pod, user claims by status.reservedFor.
//  * Prediction of the allocator's first-fit pick for an extended-resource claim, or "no
//    prediction" where the walk is not deterministic or not modelled.
//  * Drift between the catalog and the mirrored DeviceClasses.
//
// Cost: a node's lookups (units, holders, prediction) read that node's slices, the
// cluster-wide slices and the allocated claims in its pools, through per-node indexes kept on
// every upsert and removal, never every mirrored object. A DeviceClass's selectors are parsed
// once, when the class is upserted, and the class that maps each extended resource name is
// indexed then too: a lookup neither re-parses CEL nor walks every class.
//
// Thread-safety: DraSelector is immutable and thread-safe. DraState is not synchronized: it is
// meant to live inside ClusterState and be used only under ClusterState's lock (writers
// exclusive, const readers shared; Mirror::state_ is ABSL_GUARDED_BY(mu_)). Its derived
// structures (indexes, parsed selectors, the name -> class map) are written by the mutators
// alone, never filled lazily by a const lookup, so that lock covers them and readers in
// parallel share them without one of their own. Nothing here blocks or allocates without bound: inputs
// were bounded by the decoders.
#ifndef GSE_STATE_DRA_STATE_H_
#define GSE_STATE_DRA_STATE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "state/catalog.h"
#include "state/dra_objects.h"

namespace gse {

// The NVIDIA DRA driver's name (fact sheet §5).
inline constexpr absl::string_view kNvidiaDraDriver = "gpu.nvidia.com";

// One CEL selector of the understood subset: a conjunction (&&) of
//   device.driver == '<literal>'
//   device.attributes['<domain>'].<name> == '<literal>'
//   device.attributes['<domain>'].<name>.matches('<pattern>')
// where a pattern is an optional '^' followed by literal characters [A-Za-z0-9_ ] and
// bracket classes of such characters plus '.' and '-' (e.g. '^NVIDIA[ -]A100[.]'), as
// tools/catalog_render DeviceClassCel writes them. String literals take '…' or "…" without
// escapes. Evaluation follows CEL: a missing attribute or one that is not a string is an
// evaluation error, and `&&` is commutative (false wins over an error, an error over true).
class DraSelector {
 public:
  struct Term {
    enum Kind { kDriverEquals, kAttributeEquals, kAttributeMatches };
    Kind kind = kDriverEquals;
    std::string domain;   // attributes only
    std::string name;     // attributes only
    std::string literal;  // the compared string or the pattern as written
    bool operator==(const Term& o) const {
      return kind == o.kind && domain == o.domain && name == o.name && literal == o.literal;
    }
  };
  enum class Match { kYes, kNo, kError };

  // Unimplemented with the reason ("not understood: ...") for anything outside the subset.
  static absl::StatusOr<DraSelector> Parse(absl::string_view expression);

  // `error` (may be null) receives CEL's reason on kError.
  Match Evaluate(absl::string_view driver, const DraDevice& device, std::string* error) const;
  const std::vector<Term>& terms() const { return terms_; }

 private:
  struct Atom {
    std::string chars;  // any of these characters matches
  };
  struct Pattern {
    bool anchored = false;
    std::vector<Atom> atoms;
  };
  static bool PatternMatches(const Pattern& p, absl::string_view text);
  std::vector<Term> terms_;
  std::vector<Pattern> patterns_;  // parallel to terms_ (empty for non-matches terms)
};

// A device's identity: driver, pool, device name (fact sheet §1).
struct DraDeviceId {
  std::string driver, pool, device;
  bool operator==(const DraDeviceId& o) const {
    return driver == o.driver && pool == o.pool && device == o.device;
  }
  bool operator<(const DraDeviceId& o) const {
    return std::tie(driver, pool, device) < std::tie(o.driver, o.pool, o.device);
  }
  std::string ToString() const { return driver + "/" + pool + "/" + device; }
};

enum class DraNodeKind { kNone, kDevicePlugin, kDra };
absl::string_view DraNodeKindName(DraNodeKind kind);  // "none", "device-plugin", "dra"

struct DraUnit {
  DraDeviceId id;
  std::string slice;        // metadata.name of the slice holding it
  std::string uuid;         // "" when the device has no uuid attribute (reported)
  std::string parent_uuid;  // MIG devices
  std::string profile;      // MIG profile ("1g.5gb"), "" for GPUs
  std::string product;      // productName ("NVIDIA A100-SXM4-40GB")
  bool shared = false;      // allowMultipleAllocations
};

struct DraNodeUnits {
  std::vector<DraUnit> units;  // walk order
  // False when the class's selectors are not understood: `units` is then empty and
  // `problems` says why (never a guess).
  bool understood = true;
  std::vector<std::string> problems;  // incomplete pools, devices without UUID, CEL errors...
};

struct DraHolder {
  DraDeviceId device;
  std::string claim_key;  // namespace/name
  std::string claim_uid;
  bool extended = false;  // the scheduler's extended-resource claim
  std::string pod_name;   // extended: the controlling Pod; user claims: a reservedFor pod
  std::string pod_uid;    // "" when an allocated claim is reserved for no pod yet
  std::string request;
  std::string share_id;
};

struct DraPrediction {
  enum Kind {
    kDevices,       // the allocator picks `devices`
    kNoDevice,      // no device fits: the allocator finds none either
    kNoPrediction,  // the walk is not deterministic or not modelled: `reason`
  };
  Kind kind = kNoPrediction;
  std::vector<DraDeviceId> devices;
  std::string reason;
};

struct DraPredictOptions {
  // kube-scheduler's allocator walks pools and slices in sorted order (1.36 incubating and
  // experimental). False (1.34, 1.35, 1.36 stable): pools and slices come in map/informer
  // order, and only a walk within one slice is predictable (fact sheet §3, Determinism).
  bool sorted_walk = true;
};

class DraState {
 public:
  // ---- mirror (replace by name/key; Remove* returns whether something was removed)
  void UpsertDeviceClass(DraDeviceClass c);
  bool RemoveDeviceClass(absl::string_view name);
  void UpsertResourceSlice(DraResourceSlice s);
  bool RemoveResourceSlice(absl::string_view name);
  void UpsertResourceClaim(DraResourceClaim c);
  bool RemoveResourceClaim(absl::string_view key);  // namespace/name

  const DraDeviceClass* DeviceClass(absl::string_view name) const;
  const DraResourceSlice* ResourceSlice(absl::string_view name) const {
    auto it = slices_.find(name);
    return it == slices_.end() ? nullptr : &it->second;
  }
  const DraResourceClaim* ResourceClaim(absl::string_view key) const {  // namespace/name
    auto it = claims_.find(key);
    return it == claims_.end() ? nullptr : &it->second;
  }

  // The class that maps `resource` (its extendedResourceName, or the implicit
  // deviceclass.resource.kubernetes.io/<class>); on a clash the newer creationTimestamp wins,
  // then the lower name (fact sheet §2). nullptr when none does.
  const DraDeviceClass* ClassForResource(absl::string_view resource) const;

  // The per-node rule for one requested name; `allocatable_milli` is the Node's
  // status.allocatable (as NodeObject keeps it).
  DraNodeKind KindOn(absl::string_view resource,
                     const std::map<std::string, int64_t>& allocatable_milli) const;

  // The class's devices on `node`, in walk order.
  DraNodeUnits UnitsOf(absl::string_view class_name, absl::string_view node) const;

  // Every allocated device of `node`'s pools with who holds it (admin-access results, which
  // hold nothing, are left out), in claim-key order.
  std::vector<DraHolder> HoldersOn(absl::string_view node) const;

  // The allocator's pick for the scheduler's extended-resource claim asking `count` devices
  // of `class_name` on `node` (one ExactCount request, no selectors, no tolerations, no
  // capacity requests), given the allocated claims mirrored so far. In-flight allocations
  // the mirror has not seen yet make any prediction racy (docs/dra.md).
  DraPrediction PredictExtendedResourcePick(absl::string_view class_name, absl::string_view node,
                                            int64_t count, const DraPredictOptions& options) const;

  // At bind: the claim (as mirrored, by key) is allocated on `node`, and each of its results
  // for `class_name`'s requests names a device of that class on that node. OK, or
  // FailedPrecondition with the reason.
  absl::Status VerifyAllocation(absl::string_view claim_key, absl::string_view node) const;
  // The same check of a claim that need not be mirrored (bind's read of it from the API).
  absl::Status VerifyClaim(const DraResourceClaim& c, absl::string_view node) const;

  // Disagreements between the catalog's offerings and the mirrored DeviceClasses, one line
  // each, e.g. `nvidia.com/mig-1g.5gb: DeviceClass "x" selects profile '2g.10gb', the
  // catalog says '1g.5gb'`.
  std::vector<std::string> Drift(const Catalog& catalog) const;

  // The nodes whose walks read a device that the claim's results (not admin access) name:
  // the nodeName of every slice of those pools, in name order; {""} (any node) when one of
  // them is cluster-wide; none when no slice of those pools is mirrored (no walk reads them).
  // From the indexes: O(slices of those pools).
  std::vector<std::string> NodesOfClaim(const DraResourceClaim& c) const;

  // The per-node indexes, the parsed selectors and the name -> class index recounted from the
  // mirrored objects: one line per entry that is missing or stale (empty when they agree).
  // Tests and ClusterState::Audit call it.
  std::vector<std::string> CheckIndexes() const;

  size_t device_class_count() const { return classes_.size(); }
  // Every mirrored class, by name (/debug/state).
  std::vector<const DraDeviceClass*> DeviceClasses() const;
  size_t resource_slice_count() const { return slices_.size(); }
  size_t resource_claim_count() const { return claims_.size(); }

 private:
  struct PoolDevice {
    const DraResourceSlice* slice;
    const DraDevice* device;
  };
  using Pool = std::pair<std::string, std::string>;  // (driver, pool name)
  using SliceNames = std::set<std::string, std::less<>>;

  // The node's complete pools' devices in walk order; problems appended. Reads the node's
  // slices and the cluster-wide ones through the indexes: O(slices the walk reads).
  std::vector<PoolDevice> WalkNode(absl::string_view node, std::vector<std::string>* problems,
                                   bool* unmodelled) const;
  // The allocated claims with a result in one of the pools of `walk`, in claim-key order:
  // every claim that may hold one of its devices.
  std::vector<const std::pair<const std::string, DraResourceClaim>*> ClaimsInPools(
      const std::vector<PoolDevice>& walk) const;
  // A class's selectors parsed, or the reason they are not understood (`status`, then no
  // selectors). Kept per class in parsed_classes_: a selector is parsed when its class is
  // upserted, never on a lookup.
  struct ParsedClass {
    absl::Status status;
    std::vector<DraSelector> selectors;  // all must match
  };
  static ParsedClass ParseClass(const DraDeviceClass& c);
  // The parsed form of the mirrored class `name`, nullptr when no such class is mirrored.
  const ParsedClass* Parsed(absl::string_view name) const {
    auto it = parsed_classes_.find(name);
    return it == parsed_classes_.end() ? nullptr : &it->second;
  }
  // Rebuilds resource_classes_ from classes_ (a class change may move any name: few classes).
  void IndexClasses();
  // The class mapping `resource` by walking every class (what resource_classes_ caches).
  const DraDeviceClass* ScanClassForResource(absl::string_view resource) const;
  // CheckIndexes' part for parsed_classes_ and resource_classes_.
  std::vector<std::string> CheckClasses() const;

  // Adds or drops one object's index entries (the object as it is stored).
  void IndexSlice(const DraResourceSlice& s, bool add);
  void IndexClaim(const std::string& key, const DraResourceClaim& c, bool add);
  // Whether every node's walk reads the slice (not only its nodeName's).
  static bool ClusterWide(const DraResourceSlice& s) {
    return s.all_nodes || s.node_selector || s.per_device_node_selection;
  }

  std::map<std::string, DraDeviceClass, std::less<>> classes_;
  std::map<std::string, DraResourceSlice, std::less<>> slices_;
  std::map<std::string, DraResourceClaim, std::less<>> claims_;

  // ---- derived from classes_ by UpsertDeviceClass / RemoveDeviceClass alone (CheckIndexes
  // parses and scans again). Class name -> its selectors parsed.
  std::map<std::string, ParsedClass, std::less<>> parsed_classes_;
  // Extended resource name (a class's extendedResourceName, "" included, and its implicit
  // deviceclass.resource.kubernetes.io/<class>) -> the name of the class that maps it under
  // ClassForResource's rule.
  std::map<std::string, std::string, std::less<>> resource_classes_;

  // ---- indexes, by name (never by pointer: a copied or moved DraState stays exact). Kept in
  // step with slices_ and claims_ by the Upsert*/Remove* functions alone: an object's entries
  // are dropped as it was before it is replaced or removed, and added as it is after. A relist
  // builds a fresh DraState the same way (ClusterState::ReplaceDra). CheckIndexes recounts.
  //
  // spec.nodeName -> the names of the slices that name that node (nodeName set, none of the
  // cluster-wide fields).
  std::map<std::string, SliceNames, std::less<>> node_slices_;
  // The names of the slices every node's walk reads: allNodes (devices of every node), and
  // nodeSelector / perDeviceNodeSelection (not modelled: reported on every node).
  SliceNames cluster_slices_;
  // (driver, pool) -> the names of its slices, wherever they are.
  std::map<Pool, SliceNames> pool_slices_;
  // (driver, pool) -> the keys of the allocated claims with a result in that pool that is not
  // admin access (what HoldersOn and the prediction count), whatever node the pool is on.
  std::map<Pool, std::set<std::string, std::less<>>> pool_claims_;
};

}  // namespace gse

#endif  // GSE_STATE_DRA_STATE_H_
