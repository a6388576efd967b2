// GPU catalog: the single source of truth for what pods may request.
//
// Each offering is keyed by the Kubernetes extended resource name that pods request
// (nvidia.com/mig-1g.5gb, nvidia.com/a100, ...), may be reached through aliases (migration
// names), and says what one unit is (a whole GPU or a MIG slice) and how it is shared.
// A Catalog is immutable after construction and safe to share between threads.
#ifndef GSE_STATE_CATALOG_H_
#define GSE_STATE_CATALOG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gse {

// Dense index of an offering inside its Catalog (0..size-1); fast map key everywhere else.
using OfferingId = int32_t;
inline constexpr OfferingId kNoOffering = -1;

enum class UnitKind { kGpu, kMig };
enum class Sharing { kExclusive, kTimeSliced, kMps };

absl::string_view UnitKindName(UnitKind kind);  // "gpu", "mig"
absl::string_view SharingName(Sharing sharing);  // "exclusive", "time-sliced", "mps"

struct Offering {
  OfferingId id = kNoOffering;
  std::string resource;              // canonical extended resource name
  std::vector<std::string> aliases;  // other names pods or nodes may use for the same thing
  UnitKind unit = UnitKind::kGpu;
  Sharing sharing = Sharing::kExclusive;
  // Tickets (time-sliced) or shares (mps) per unit; 1 for exclusive. A node's
  // `<resource>.replicas` label overrides it for that node's units.
  int32_t replicas = 1;
  std::string product;     // prefix matched against the node's GPU product label; "" = any
  std::string mig_profile;  // "1g.5gb" for MIG offerings, "" for whole GPUs
  std::string memory;       // display, e.g. "5Gi"
  std::string device_class;  // DRA DeviceClass publishing the same extended resource name
  std::string display_name;
  std::string quota_key;     // ResourceQuota spec.hard key; default "requests.<resource>"
  std::map<std::string, std::string> node_selector;
  // MPS units may be shared by several projects (clients have enforced caps) unless this is
  // set. Time-sliced units are always single-project (invariant I2).
  bool mps_single_project = false;

  bool shared() const { return sharing != Sharing::kExclusive; }
};

class Catalog {
 public:
  // Parses and validates a catalog document: UTF-8 YAML, or JSON (a document opening with `{`
  // must be strict RFC 8259 JSON, state/json_reader.h). Errors name the
  // offering (by index and resource) and the field, e.g.
  //   offerings[3] (nvidia.com/mig-1g.5gb): replicas: must be 1 for sharing "exclusive", got 4
  static absl::StatusOr<Catalog> Parse(absl::string_view text);
  static absl::StatusOr<Catalog> LoadFile(const std::string& path);
  // Validates offerings built in code (ids are assigned here).
  static absl::StatusOr<Catalog> FromOfferings(std::vector<Offering> offerings);

  // The catalog compiled into the binary (state/builtin_catalog.cc); always valid.
  static const Catalog& BuiltIn();
  static absl::string_view BuiltInYaml();

  // Resolves a resource name or alias; nullptr when the catalog does not know it.
  const Offering* Find(absl::string_view name) const;
  const Offering& Get(OfferingId id) const { return offerings_[static_cast<size_t>(id)]; }
  const std::vector<Offering>& offerings() const { return offerings_; }
  size_t size() const { return offerings_.size(); }
  // Every name (canonical and alias) a pod may request: kube-scheduler's managedResources.
  std::vector<std::string> AllNames() const;

 private:
  std::vector<Offering> offerings_;
  absl::flat_hash_map<std::string, OfferingId> by_name_;  // canonical names and aliases
};

// Kubernetes' rules for extended resource names (IsExtendedResourceName + qualified name):
// domain-prefixed, not in the kubernetes.io domain, not starting with "requests.", and
// "requests.<name>" must itself be a valid qualified name. Returns the reason, or "" if valid.
std::string ExtendedResourceNameError(absl::string_view name);

// A MIG profile such as "1g.5gb" or "1g.10gb+me": <n>g.<m>gb with optional +<attr>.
bool IsValidMigProfile(absl::string_view profile);

// Kubernetes label syntax (k8s.io/apimachinery/pkg/util/validation): "" when `s` is a valid
// label key (IsQualifiedName) or value (IsValidLabelValue), else why not.
std::string QualifiedNameError(absl::string_view s);
std::string LabelValueError(absl::string_view s);

}  // namespace gse

#endif  // GSE_STATE_CATALOG_H_
