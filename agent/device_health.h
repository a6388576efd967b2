// DeviceHealth: which devices (GPU or MIG UUIDs) are unhealthy, fed by NVML health events and
// read by every device plugin's ListAndWatch. A GPU's failure makes all its MIG devices
// unhealthy too (the caller marks them). Devices never become healthy again while the agent
// runs (as with NVIDIA's device plugin: a critical Xid needs a reset; restart the agent after).
// Thread-safe: mu_ guards the set and the generation; waiters block on mu_ conditions.
#ifndef GSE_AGENT_DEVICE_HEALTH_H_
#define GSE_AGENT_DEVICE_HEALTH_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/unit_map.h"

namespace gse::agent {

class DeviceHealth {
 public:
  // Returns true when the device was healthy before.
  bool MarkUnhealthy(const std::string& uuid, const std::string& reason);
  bool Healthy(const std::string& uuid) const;
  // A unit is usable when the inventory found it healthy and neither its device nor its GPU
  // has failed since (the one rule ListAndWatch, the metrics and the Node inventory share).
  bool UnitHealthy(const UnitDevice& unit) const;
  size_t unhealthy_count() const;
  // Increases with every change.
  uint64_t generation() const;
  // Waits until generation() != seen or `timeout` passes; returns the generation.
  uint64_t WaitForChange(uint64_t seen, absl::Duration timeout) const;
  // Bumps the generation without a change: wakes every waiter (a plugin that stops).
  void Poke();

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> unhealthy_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_DEVICE_HEALTH_H_
