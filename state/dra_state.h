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
// Thread-safety: DraSelector is immutable and thread-safe. DraState is not synchronized: it is
// meant to live inside ClusterState and be used only under ClusterState's lock (writers
// exclusive, const readers shared). Nothing here blocks or allocates without bound: inputs
// were bounded by the decoders.
#ifndef GSE_STATE_DRA_STATE_H_
#define GSE_STATE_DRA_STATE_H_

#include <cstdint>
#include <map>
#include <tuple>
#include <string>
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

  // Disagreements between the catalog's offerings and the mirrored DeviceClasses, one line
  // each, e.g. `nvidia.com/mig-1g.5gb: DeviceClass "x" selects profile '2g.10gb', the
  // catalog says '1g.5gb'`.
  std::vector<std::string> Drift(const Catalog& catalog) const;

  size_t device_class_count() const { return classes_.size(); }
  size_t resource_slice_count() const { return slices_.size(); }
  size_t resource_claim_count() const { return claims_.size(); }

 private:
  struct PoolDevice {
    const DraResourceSlice* slice;
    const DraDevice* device;
  };
  // The node's complete pools' devices in walk order; problems appended.
  std::vector<PoolDevice> WalkNode(absl::string_view node, std::vector<std::string>* problems,
                                   bool* unmodelled) const;
  // The class's selectors parsed, or the reason they are not understood.
  absl::StatusOr<std::vector<DraSelector>> ClassSelectors(const DraDeviceClass& c) const;

  std::map<std::string, DraDeviceClass, std::less<>> classes_;
  std::map<std::string, DraResourceSlice, std::less<>> slices_;
  std::map<std::string, DraResourceClaim, std::less<>> claims_;
};

}  // namespace gse

#endif  // GSE_STATE_DRA_STATE_H_
