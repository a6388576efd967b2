// UnitMap: which of this node's devices are the units of each offering the agent serves, in
// the order that defines unit index i of the annotation contract (state/assignment.h), and
// the device IDs kubelet sees for them.
//
//  * A served offering is a catalog resource named on the command line (--resources), with
//    its replicas (time-sliced tickets or MPS shares per unit; the catalog's value unless
//    given, and it must match the node's <resource>.replicas label that the extender reads).
//  * Units: whole-GPU offerings take the GPUs without MIG mode, MIG offerings the MIG devices
//    of their profile; both only on GPUs whose product (as GPU feature discovery labels it)
//    starts with the offering's `product`. Unit i is the i-th such device in inventory order
//    (GPU index, then MIG placement start). A device may belong to one served offering only.
//  * Device IDs make the unit evident: "<uuid>" for exclusive units, "<uuid>::<k>" for the
//    k-th ticket or share (k < replicas), the form NVIDIA's device plugin uses for replicas.
//    IDs are a pure function of the inventory and the replicas: stable across agent and
//    kubelet restarts, as kubelet's checkpoint requires.
// Immutable after Build(); safe to share between threads.
#ifndef GSE_AGENT_UNIT_MAP_H_
#define GSE_AGENT_UNIT_MAP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/inventory.h"
#include "state/catalog.h"

namespace gse::agent {

// One entry of --resources: "nvidia.com/mig-1g.5gb.shared" or "nvidia.com/gpu.shared=8".
struct ServedSpec {
  std::string resource;
  int32_t replicas = 0;  // 0: the catalog's
};
// Parses the comma-separated flag value; errors name the entry and the reason.
absl::StatusOr<std::vector<ServedSpec>> ParseServedSpecs(absl::string_view flag);

struct UnitDevice {
  int32_t index = 0;     // unit index i
  std::string uuid;      // GPU or MIG device UUID
  std::string gpu_uuid;  // the physical GPU (== uuid for whole GPUs)
  int32_t gpu_index = 0;
  std::string mig_profile;  // "" for whole GPUs
  int32_t placement_start = -1;
  int64_t memory_mib = 0;  // of the unit (MIG device or whole GPU)
  bool healthy = true;
};

// Where a device ID points: unit index and ticket/share number (0 for exclusive).
struct DeviceRef {
  int32_t unit = 0;
  int32_t k = 0;
};

class ServedOffering {
 public:
  ServedOffering(const Offering& offering, int32_t replicas, std::vector<UnitDevice> units);

  const std::string& resource() const { return resource_; }
  OfferingId offering() const { return offering_; }
  Sharing sharing() const { return sharing_; }
  int32_t replicas() const { return replicas_; }  // 1 for exclusive
  const std::vector<UnitDevice>& units() const { return units_; }

  // "<uuid>" or "<uuid>::<k>".
  std::string DeviceId(int32_t unit, int32_t k) const;
  // Every device ID of unit `unit`, k ascending.
  std::vector<std::string> UnitDeviceIds(int32_t unit) const;
  // nullopt for IDs this offering never advertised.
  std::optional<DeviceRef> Find(absl::string_view id) const;
  size_t device_count() const { return by_id_.size(); }

 private:
  std::string resource_;
  OfferingId offering_;
  Sharing sharing_;
  int32_t replicas_;
  std::vector<UnitDevice> units_;
  absl::flat_hash_map<std::string, DeviceRef> by_id_;
};

class UnitMap {
 public:
  // Maps `inventory` onto the served offerings. Errors: a resource the catalog does not know,
  // replicas for an exclusive offering or outside 1..1024, a device claimed by two served
  // offerings. An offering that finds no units is kept (with none): kubelet then shows 0.
  static absl::StatusOr<UnitMap> Build(const Inventory& inventory, const Catalog& catalog,
                                       const std::vector<ServedSpec>& specs);

  const std::vector<ServedOffering>& offerings() const { return offerings_; }
  // By canonical resource name or alias; nullptr when not served here.
  const ServedOffering* Find(absl::string_view resource, const Catalog& catalog) const;

 private:
  std::vector<ServedOffering> offerings_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_UNIT_MAP_H_
