// The inventory the agent publishes on its Node (annotation gpu.themelio.io/inventory), so
// that the extender can show each unit's UUID and notice a node whose units disagree with its
// allocatable (docs/agent.md, "Published inventory"):
//   {"version":1,"resources":{"nvidia.com/mig-1g.5gb.shared":{"sharing":"time-sliced",
//     "replicas":4,"units":[{"uuid":"MIG-...","gpu":0,"profile":"1g.5gb","placementStart":0,
//     "healthy":true}]}}}
// units[i] is unit i of the annotation contract (state/assignment.h). "profile" and
// "placementStart" are present for MIG units only. Pure function; thread-safe.
#ifndef GSE_AGENT_PUBLISHED_INVENTORY_H_
#define GSE_AGENT_PUBLISHED_INVENTORY_H_

#include <string>

#include "absl/strings/string_view.h"
#include "agent/device_health.h"
#include "agent/unit_map.h"
#include "state/assignment.h"

namespace gse::agent {

// The annotation is gse::kAnnotationInventory (state/assignment.h, shared with the extender).
inline constexpr int kPublishedInventoryVersion = 1;

// The annotation value for `units` with the health `health` reports now.
std::string PublishedInventoryJson(const UnitMap& units, const DeviceHealth& health);

}  // namespace gse::agent

#endif  // GSE_AGENT_PUBLISHED_INVENTORY_H_
