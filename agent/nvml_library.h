// NvmlLibrary: NVML loaded at run time with dlopen (default "libnvidia-ml.so.1", the name the
// NVIDIA driver installs and the container toolkit mounts), so that the agent builds and runs
// without any NVIDIA package; tests load the project's own libnvidia-ml.so.1
// (testsupport/fake_nvml/) through the same path.
//
// Contract:
//  * Open() resolves every entry point of agent/nvml_api.h and calls nvmlInit_v2; a missing
//    library, a missing symbol or a failing init is an error naming the path, the symbol or
//    the NVML function and its error string. The destructor calls nvmlShutdown and dlclose.
//  * ReadInventory() enumerates GPUs and their MIG devices (profile derived from the MIG
//    device's attributes, placement from its GPU instance) and returns them validated and in
//    unit order (agent/inventory.h). Any failing NVML call fails the whole read, naming the
//    call and the device: a partial inventory would shift unit indices.
//  * Health: WatchHealth() registers for critical Xid and double-bit ECC events on every
//    GPU; NextHealthEvent() waits up to a timeout for one and tells which device (a MIG
//    device by GPU instance id, or the whole GPU) became unhealthy.
// Thread-safety: ReadInventory may be called from any thread; NextHealthEvent from one
// thread at a time (the health loop). NVML itself is thread-safe.
#ifndef GSE_AGENT_NVML_LIBRARY_H_
#define GSE_AGENT_NVML_LIBRARY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/inventory.h"
#include "agent/nvml_api.h"

namespace gse::agent {

inline constexpr char kDefaultNvmlLibrary[] = "libnvidia-ml.so.1";

// One health event: which device stopped being usable, and why (for logs).
struct HealthEvent {
  std::string gpu_uuid;
  // The GPU instance the event names, or nullopt when it concerns the whole GPU.
  std::optional<uint32_t> gpu_instance_id;
  uint64_t xid = 0;
  std::string reason;
};

class NvmlLibrary {
 public:
  static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Open(const std::string& path);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  absl::StatusOr<Inventory> ReadInventory();

  // Registers for health events on every GPU. Returns how many GPUs support them (NVML
  // answers NOT_SUPPORTED on some boards and in some containers); 0 is not an error.
  absl::StatusOr<int> WatchHealth();
  // Waits up to `timeout` for an event that makes a device unhealthy. nullopt on timeout or
  // on events that do not (application Xids such as 13, 31, 43, 45, 68, 109).
  absl::StatusOr<std::optional<HealthEvent>> NextHealthEvent(absl::Duration timeout);

  const std::string& path() const { return path_; }

 // The resolved entry points (opaque outside nvml_library.cc).
  struct Api;

 private:
  NvmlLibrary(std::string path, void* handle, std::unique_ptr<Api> api);
  // "nvmlDeviceGetUUID(GPU 1): Unknown Error (999)"
  absl::Status Error(const char* call, const std::string& what, nvmlReturn_t rc) const;

  std::string path_;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  nvmlEventSet_t events_ = nullptr;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_NVML_LIBRARY_H_
