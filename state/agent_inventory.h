// The inventory a node agent publishes on its Node (annotation gpu.themelio.io/inventory,
// docs/agent.md "Published inventory"), as the extender reads it:
//   {"version":1,"resources":{"<resource>":{"sharing":"time-sliced","replicas":4,
//     "units":[{"uuid":"MIG-...","gpu":0,"profile":"1g.5gb","placementStart":0,
//               "healthy":true}]}}}
// units[i] is unit i of the annotation contract (state/assignment.h). Only what the mirror
// uses is kept (replicas, each unit's UUID and health); unknown fields are ignored, so that a
// newer agent's additions do not break an older extender. A document that is not this shape,
// names a resource twice, or has more than kMaxPublishedUnits units, a UUID that is empty,
// longer than 56 bytes, not printable or holds ':' or ',' (the agent's own bounds), or two
// equal UUIDs in one resource, is refused with InvalidArgument naming the JSON path, e.g.
//   gpu.themelio.io/inventory: resources["nvidia.com/gpu"].units[2].uuid: missing
// Pure function; thread-safe.
#ifndef GSE_STATE_AGENT_INVENTORY_H_
#define GSE_STATE_AGENT_INVENTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gse {

inline constexpr int kPublishedInventoryVersion = 1;
inline constexpr size_t kMaxPublishedUnits = 1024;  // 64 GPUs x 16 MIG devices (the agent's)
inline constexpr size_t kMaxPublishedUuidBytes = 56;

struct PublishedUnit {
  std::string uuid;
  bool healthy = true;
  bool operator==(const PublishedUnit& o) const { return uuid == o.uuid && healthy == o.healthy; }
};

struct PublishedOffering {
  int32_t replicas = 1;
  std::vector<PublishedUnit> units;  // units[i] is unit i
};

// Resource name (as the agent serves it: a catalog name) -> what it publishes for it.
using PublishedInventory = std::map<std::string, PublishedOffering>;

absl::StatusOr<PublishedInventory> ParsePublishedInventory(absl::string_view json);

}  // namespace gse

#endif  // GSE_STATE_AGENT_INVENTORY_H_
