// HealthMonitor: turns NVML health events into DeviceHealth changes on a thread of its own.
// An event naming a GPU instance makes that MIG device unhealthy; an event for the whole GPU
// makes the GPU and every MIG device on it unhealthy. Device plugins then list the affected
// units' IDs as Unhealthy, kubelet stops offering them, and the extender (which reads
// allocatable) stops choosing them.
// Thread-safety: Start/Stop from one thread; the loop owns the NVML event set.
#ifndef GSE_AGENT_HEALTH_MONITOR_H_
#define GSE_AGENT_HEALTH_MONITOR_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/device_health.h"
#include "agent/inventory.h"
#include "agent/nvml_library.h"

namespace gse::agent {

// The device UUIDs `event` makes unhealthy.
std::vector<std::string> AffectedDevices(const Inventory& inventory, const HealthEvent& event);

class HealthMonitor {
 public:
  // Pointers must outlive the monitor. `on_unhealthy` (may be empty) is told each device.
  HealthMonitor(NvmlLibrary* nvml, Inventory inventory, DeviceHealth* health,
                std::function<void(const std::string& uuid, const std::string& reason)> on_unhealthy);
  ~HealthMonitor();
  // Registers for events; returns the number of GPUs that support them (0: nothing to watch,
  // no thread is started).
  absl::StatusOr<int> Start();
  void Stop();

 private:
  void Loop();

  NvmlLibrary* nvml_;
  const Inventory inventory_;
  DeviceHealth* health_;
  std::function<void(const std::string&, const std::string&)> on_unhealthy_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_HEALTH_MONITOR_H_
