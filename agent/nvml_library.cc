// NvmlLibrary: dlopen, symbol table, inventory read and health events.
#include "agent/nvml_library.h"

#include <dlfcn.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gse::agent {

struct NvmlLibrary::Api {
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn error_string = nullptr;
  nvmlDeviceGetCount_v2_fn device_count = nullptr;
  nvmlDeviceGetHandleByIndex_v2_fn handle_by_index = nullptr;
  nvmlDeviceGetUUID_fn uuid = nullptr;
  nvmlDeviceGetName_fn name = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory_info = nullptr;
  nvmlDeviceGetMigMode_fn mig_mode = nullptr;
  nvmlDeviceGetMaxMigDeviceCount_fn max_mig_count = nullptr;
  nvmlDeviceGetMigDeviceHandleByIndex_fn mig_handle = nullptr;
  nvmlDeviceGetAttributes_v2_fn attributes = nullptr;
  nvmlDeviceGetGpuInstanceId_fn gpu_instance_id = nullptr;
  nvmlDeviceGetGpuInstanceById_fn gpu_instance_by_id = nullptr;
  nvmlGpuInstanceGetInfo_fn gpu_instance_info = nullptr;
  nvmlEventSetCreate_fn event_set_create = nullptr;
  nvmlDeviceRegisterEvents_fn register_events = nullptr;
  nvmlEventSetWait_v2_fn event_set_wait = nullptr;
  nvmlEventSetFree_fn event_set_free = nullptr;
};

namespace {

template <typename Fn>
absl::Status Resolve(void* handle, const std::string& path, const char* symbol, Fn* out) {
  dlerror();
  void* p = dlsym(handle, symbol);
  if (p == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NVML library ", path, " lacks ", symbol,
                     " (driver too old, or not an NVML library)"));
  }
  *out = reinterpret_cast<Fn>(p);
  return absl::OkStatus();
}

// Application-caused Xids that do not mean the device is broken; NVIDIA's device plugin skips
// the same ones (13 graphics engine exception, 31 memory page fault, 43 stopped channel,
// 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout).
bool ApplicationXid(uint64_t xid) {
  return xid == 13 || xid == 31 || xid == 43 || xid == 45 || xid == 68 || xid == 109;
}

std::string ReadString(nvmlReturn_t (*fn)(nvmlDevice_t, char*, unsigned int), nvmlDevice_t d,
                       nvmlReturn_t* rc) {
  char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE + 1] = {};
  *rc = fn(d, buf, NVML_DEVICE_UUID_V2_BUFFER_SIZE);
  buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = '\0';
  return std::string(buf);
}

// Fills the symbol table; the first missing symbol is the error.
absl::Status ResolveAll(void* h, const std::string& path, NvmlLibrary::Api* a) {
  absl::Status s;
#define GSE_NVML_RESOLVE(field, symbol) \
  if (s.ok()) s = Resolve(h, path, symbol, &a->field)
  GSE_NVML_RESOLVE(init, "nvmlInit_v2");
  GSE_NVML_RESOLVE(shutdown, "nvmlShutdown");
  GSE_NVML_RESOLVE(error_string, "nvmlErrorString");
  GSE_NVML_RESOLVE(device_count, "nvmlDeviceGetCount_v2");
  GSE_NVML_RESOLVE(handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  GSE_NVML_RESOLVE(uuid, "nvmlDeviceGetUUID");
  GSE_NVML_RESOLVE(name, "nvmlDeviceGetName");
  GSE_NVML_RESOLVE(memory_info, "nvmlDeviceGetMemoryInfo");
  GSE_NVML_RESOLVE(mig_mode, "nvmlDeviceGetMigMode");
  GSE_NVML_RESOLVE(max_mig_count, "nvmlDeviceGetMaxMigDeviceCount");
  GSE_NVML_RESOLVE(mig_handle, "nvmlDeviceGetMigDeviceHandleByIndex");
  GSE_NVML_RESOLVE(attributes, "nvmlDeviceGetAttributes_v2");
  GSE_NVML_RESOLVE(gpu_instance_id, "nvmlDeviceGetGpuInstanceId");
  GSE_NVML_RESOLVE(gpu_instance_by_id, "nvmlDeviceGetGpuInstanceById");
  GSE_NVML_RESOLVE(gpu_instance_info, "nvmlGpuInstanceGetInfo");
  GSE_NVML_RESOLVE(event_set_create, "nvmlEventSetCreate");
  GSE_NVML_RESOLVE(register_events, "nvmlDeviceRegisterEvents");
  GSE_NVML_RESOLVE(event_set_wait, "nvmlEventSetWait_v2");
  GSE_NVML_RESOLVE(event_set_free, "nvmlEventSetFree");
#undef GSE_NVML_RESOLVE
  return s;
}
}  // namespace

NvmlLibrary::NvmlLibrary(std::string path, void* handle, std::unique_ptr<Api> api)
    : path_(std::move(path)), handle_(handle), api_(std::move(api)) {}

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(const std::string& path) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(absl::StrCat(
        "NVML library ", path, " cannot be loaded: ", why != nullptr ? why : "unknown error",
        " (is the NVIDIA driver installed and the library mounted? --inventory=FILE serves "
        "nodes without NVML)"));
  }
  auto api = std::make_unique<Api>();
  if (absl::Status s = ResolveAll(handle, path, api.get()); !s.ok()) {
    dlclose(handle);
    return s;
  }
  const nvmlReturn_t rc = api->init();
  if (rc != NVML_SUCCESS) {
    const char* text = api->error_string(rc);
    absl::Status s = absl::FailedPreconditionError(
        absl::StrCat("NVML library ", path, ": nvmlInit_v2: ", text != nullptr ? text : "?",
                     " (", rc, ")"));
    dlclose(handle);
    return s;
  }
  return std::unique_ptr<NvmlLibrary>(new NvmlLibrary(path, handle, std::move(api)));
}

NvmlLibrary::~NvmlLibrary() {
  if (events_ != nullptr) api_->event_set_free(events_);
  api_->shutdown();
  dlclose(handle_);
}

absl::Status NvmlLibrary::Error(const char* call, const std::string& what,
                                nvmlReturn_t rc) const {
  const char* text = api_->error_string(rc);
  return absl::UnavailableError(absl::StrCat("NVML ", call, "(", what,
                                             "): ", text != nullptr ? text : "?", " (", rc, ")"));
}

absl::StatusOr<Inventory> NvmlLibrary::ReadInventory() {
  const Api& a = *api_;
  unsigned int count = 0;
  if (nvmlReturn_t rc = a.device_count(&count); rc != NVML_SUCCESS) {
    return Error("nvmlDeviceGetCount_v2", "", rc);
  }
  if (count > static_cast<unsigned int>(kMaxGpus)) {
    return absl::OutOfRangeError(absl::StrCat("NVML reports ", count, " GPUs, at most ",
                                              kMaxGpus, " supported"));
  }
  Inventory inv;
  for (unsigned int i = 0; i < count; ++i) {
    const std::string what = absl::StrCat("GPU ", i);
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t rc = a.handle_by_index(i, &dev);
    if (rc != NVML_SUCCESS) return Error("nvmlDeviceGetHandleByIndex_v2", what, rc);
    Gpu g;
    g.index = static_cast<int32_t>(i);
    g.uuid = ReadString(a.uuid, dev, &rc);
    if (rc != NVML_SUCCESS) return Error("nvmlDeviceGetUUID", what, rc);
    g.product = ReadString(a.name, dev, &rc);
    if (rc != NVML_SUCCESS) return Error("nvmlDeviceGetName", what, rc);
    nvmlMemory_t mem{};
    if (rc = a.memory_info(dev, &mem); rc != NVML_SUCCESS) {
      return Error("nvmlDeviceGetMemoryInfo", what, rc);
    }
    g.memory_mib = static_cast<int64_t>(mem.total >> 20);
    unsigned int current = 0, pending = 0;
    rc = a.mig_mode(dev, &current, &pending);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
      current = NVML_DEVICE_MIG_DISABLE;  // boards without MIG
    } else if (rc != NVML_SUCCESS) {
      return Error("nvmlDeviceGetMigMode", what, rc);
    }
    g.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
    if (g.mig_enabled) {
      unsigned int max_migs = 0;
      if (rc = a.max_mig_count(dev, &max_migs); rc != NVML_SUCCESS) {
        return Error("nvmlDeviceGetMaxMigDeviceCount", what, rc);
      }
      if (max_migs > static_cast<unsigned int>(kMaxMigDevicesPerGpu)) {
        max_migs = static_cast<unsigned int>(kMaxMigDevicesPerGpu);
      }
      for (unsigned int j = 0; j < max_migs; ++j) {
        const std::string mwhat = absl::StrCat("GPU ", i, " MIG index ", j);
        nvmlDevice_t mig = nullptr;
        rc = a.mig_handle(dev, j, &mig);
        if (rc == NVML_ERROR_NOT_FOUND) continue;  // the index is not populated
        if (rc != NVML_SUCCESS) return Error("nvmlDeviceGetMigDeviceHandleByIndex", mwhat, rc);
        MigDevice m;
        m.uuid = ReadString(a.uuid, mig, &rc);
        if (rc != NVML_SUCCESS) return Error("nvmlDeviceGetUUID", mwhat, rc);
        nvmlDeviceAttributes_t attr{};
        if (rc = a.attributes(mig, &attr); rc != NVML_SUCCESS) {
          return Error("nvmlDeviceGetAttributes_v2", mwhat, rc);
        }
        m.profile = MigProfileName(attr.gpuInstanceSliceCount, attr.memorySizeMB);
        m.memory_mib = static_cast<int64_t>(attr.memorySizeMB);
        unsigned int gi_id = 0;
        if (rc = a.gpu_instance_id(mig, &gi_id); rc != NVML_SUCCESS) {
          return Error("nvmlDeviceGetGpuInstanceId", mwhat, rc);
        }
        nvmlGpuInstance_t gi = nullptr;
        if (rc = a.gpu_instance_by_id(dev, gi_id, &gi); rc != NVML_SUCCESS) {
          return Error("nvmlDeviceGetGpuInstanceById", mwhat, rc);
        }
        nvmlGpuInstanceInfo_t info{};
        if (rc = a.gpu_instance_info(gi, &info); rc != NVML_SUCCESS) {
          return Error("nvmlGpuInstanceGetInfo", mwhat, rc);
        }
        m.gpu_instance_id = gi_id;
        m.placement_start = static_cast<int32_t>(info.placement.start);
        g.mig_devices.push_back(std::move(m));
      }
    }
    inv.gpus.push_back(std::move(g));
  }
  if (absl::Status s = ValidateInventory(inv); !s.ok()) {
    return absl::DataLossError(absl::StrCat("NVML inventory is inconsistent: ", s.message()));
  }
  SortInventory(inv);
  return inv;
}

absl::StatusOr<int> NvmlLibrary::WatchHealth() {
  const Api& a = *api_;
  if (events_ == nullptr) {
    if (nvmlReturn_t rc = a.event_set_create(&events_); rc != NVML_SUCCESS) {
      events_ = nullptr;
      return Error("nvmlEventSetCreate", "", rc);
    }
  }
  unsigned int count = 0;
  if (nvmlReturn_t rc = a.device_count(&count); rc != NVML_SUCCESS) {
    return Error("nvmlDeviceGetCount_v2", "", rc);
  }
  int supported = 0;
  for (unsigned int i = 0; i < count && i < static_cast<unsigned int>(kMaxGpus); ++i) {
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t rc = a.handle_by_index(i, &dev); rc != NVML_SUCCESS) {
      return Error("nvmlDeviceGetHandleByIndex_v2", absl::StrCat("GPU ", i), rc);
    }
    nvmlReturn_t rc = a.register_events(
        dev, kNvmlEventTypeXidCriticalError | kNvmlEventTypeDoubleBitEccError, events_);
    if (rc == NVML_SUCCESS) {
      ++supported;
    } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
      return Error("nvmlDeviceRegisterEvents", absl::StrCat("GPU ", i), rc);
    }
  }
  return supported;
}

absl::StatusOr<std::optional<HealthEvent>> NvmlLibrary::NextHealthEvent(absl::Duration timeout) {
  if (events_ == nullptr) return absl::FailedPreconditionError("WatchHealth was not called");
  const Api& a = *api_;
  nvmlEventData_t data{};
  const auto ms = static_cast<unsigned int>(absl::ToInt64Milliseconds(timeout));
  nvmlReturn_t rc = a.event_set_wait(events_, &data, ms);
  if (rc == NVML_ERROR_TIMEOUT) return std::optional<HealthEvent>();
  if (rc != NVML_SUCCESS) return Error("nvmlEventSetWait_v2", "", rc);
  if ((data.eventType & kNvmlEventTypeXidCriticalError) != 0 && ApplicationXid(data.eventData)) {
    return std::optional<HealthEvent>();
  }
  HealthEvent ev;
  ev.gpu_uuid = ReadString(a.uuid, data.device, &rc);
  if (rc != NVML_SUCCESS) return Error("nvmlDeviceGetUUID", "event device", rc);
  if (data.gpuInstanceId != NVML_EVENT_ALL_INSTANCES) ev.gpu_instance_id = data.gpuInstanceId;
  ev.xid = data.eventData;
  ev.reason = (data.eventType & kNvmlEventTypeDoubleBitEccError) != 0
                  ? "double-bit ECC error"
                  : absl::StrCat("critical Xid ", data.eventData);
  return std::optional<HealthEvent>(std::move(ev));
}

}  // namespace gse::agent
