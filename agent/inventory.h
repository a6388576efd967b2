// Inventory: the GPUs and MIG devices of this node, in the stable order that defines unit
// index i of the annotation contract (state/assignment.h): GPUs by NVML index, and within a
// GPU its MIG devices by placement start (the first memory slice they occupy, which does not
// change while the MIG layout stays; NVML's MIG handle indices may).
//
// An Inventory comes from NVML (agent/nvml_library.h) or from a JSON file (--inventory=FILE,
// nodes without NVML and tests). The same JSON is the format of the Node annotation's source
// data and of the test NVML library's description (testsupport/fake_nvml/):
//   {"gpus": [{"index": 0, "uuid": "GPU-...", "product": "NVIDIA A100-SXM4-40GB",
//              "memoryMiB": 40960, "migEnabled": true,
//              "migDevices": [{"uuid": "MIG-...", "profile": "1g.5gb", "memoryMiB": 4864,
//                              "placementStart": 0, "gpuInstanceId": 9}]}]}
// Parsing is hostile-input safe: every error names the JSON path and the reason, sizes and
// counts are bounded, and nothing is returned unless the whole document is valid.
// Plain values; all functions are pure and thread-safe.
#ifndef GSE_AGENT_INVENTORY_H_
#define GSE_AGENT_INVENTORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gse::agent {

inline constexpr size_t kMaxInventoryBytes = 1u << 20;
inline constexpr int kMaxGpus = 64;
inline constexpr int kMaxMigDevicesPerGpu = 16;
// Device IDs are "<uuid>::<k>" with k < 10000 and kubelet allows 63 characters per ID.
inline constexpr size_t kMaxUuidBytes = 56;

struct MigDevice {
  std::string uuid;
  std::string profile;  // "1g.5gb"
  int64_t memory_mib = 0;
  int32_t placement_start = 0;
  uint32_t gpu_instance_id = 0;  // NVML GPU instance id: matches health events to the device
  bool healthy = true;
};

struct Gpu {
  int32_t index = 0;
  std::string uuid;
  std::string product;  // NVML name, "NVIDIA A100-SXM4-40GB"
  int64_t memory_mib = 0;
  bool mig_enabled = false;
  bool healthy = true;
  std::vector<MigDevice> mig_devices;  // empty unless mig_enabled
};

struct Inventory {
  std::vector<Gpu> gpus;
};

// Sorts GPUs by index and MIG devices by placement start: the order of unit indices.
void SortInventory(Inventory& inventory);
// Checks what the order and the device IDs rely on: unique GPU indices, unique UUIDs (over
// GPUs and MIG devices), unique placement starts per GPU, UUIDs of printable characters
// without ':' ',' or whitespace and at most kMaxUuidBytes, valid MIG profiles, MIG devices
// only on MIG-enabled GPUs. Errors name the device ("gpus[1].migDevices[2].uuid: ...").
absl::Status ValidateInventory(const Inventory& inventory);

// Parses, validates and sorts the JSON form above.
absl::StatusOr<Inventory> ParseInventoryJson(absl::string_view json);
// Reads and parses a file; errors start with the path.
absl::StatusOr<Inventory> LoadInventoryFile(const std::string& path);
// The JSON form (sorted input gives sorted output).
std::string InventoryToJson(const Inventory& inventory);

// The product as GPU feature discovery labels it (spaces become '-'), which the catalog's
// `product` prefixes are matched against: "NVIDIA A100-SXM4-40GB" -> "NVIDIA-A100-SXM4-40GB".
std::string ProductLabel(absl::string_view nvml_name);

// The MIG profile name NVIDIA's tools derive from a MIG device's attributes:
// "<gpu instance slices>g.<memory rounded up to GiB>gb" (1 slice, 4864 MiB -> "1g.5gb").
std::string MigProfileName(uint32_t gpu_instance_slices, uint64_t memory_mib);

}  // namespace gse::agent

#endif  // GSE_AGENT_INVENTORY_H_
