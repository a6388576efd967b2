// A stand-in NVML for tests, built as libnvidia-ml.so.1 in the build tree
// (build/testsupport/fake_nvml/libnvidia-ml.so.1). It implements exactly the entry points of
// agent/nvml_api.h, so the agent loads it through the same dlopen path as the real library.
//
// It is driven by a JSON file named by the environment variable GSE_FAKE_NVML_CONFIG, read at
// nvmlInit_v2: the inventory format of agent/inventory.h (GPUs with index, uuid, product,
// memoryMiB, migEnabled, migDevices[] with uuid, profile, memoryMiB, placementStart,
// gpuInstanceId) plus
//   "errors": {"<entry point>": <nvmlReturn_t>, ...}   every call of that entry point fails
//   "eventsSupported": false                           nvmlDeviceRegisterEvents: NOT_SUPPORTED
//   "events": [{"gpuIndex": 0, "gpuInstanceId": 9, "xid": 79}, {"gpuIndex": 1, "ecc": true}]
// MIG devices are enumerated in file order (not placement order), as NVML's handle indices
// need not follow placement. The file is read again on every nvmlEventSetWait_v2 so that a
// test can append events while the agent runs; each event is delivered once, in order.
// The profile name the agent derives comes from the attributes this library reports:
// gpuInstanceSliceCount from the profile's "<n>g" and memorySizeMB = memoryMiB.
// Thread-safe: one mutex guards the state.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/nvml_api.h"
#include "rapidjson/document.h"

#define FAKE_NVML_EXPORT extern "C" __attribute__((visibility("default")))

struct nvmlDevice_st {
  int gpu = 0;
  int mig = -1;  // -1: the GPU itself
};
struct nvmlGpuInstance_st {
  int gpu = 0;
  int mig = 0;
};
struct nvmlEventSet_st {
  int unused = 0;
};

namespace {

struct FakeMig {
  std::string uuid, profile;
  unsigned long long memory_mib = 0;
  unsigned int placement_start = 0, gi_id = 0;
};
struct FakeGpu {
  unsigned int index = 0;
  std::string uuid, product;
  unsigned long long memory_mib = 0;
  bool mig_enabled = false;
  std::vector<FakeMig> migs;
};
struct FakeEvent {
  int gpu_index = 0;
  unsigned int gi_id = NVML_EVENT_ALL_INSTANCES;
  unsigned long long xid = 0;
  bool ecc = false;
};
struct Config {
  std::vector<FakeGpu> gpus;
  std::vector<std::pair<std::string, int>> errors;
  bool events_supported = true;
  std::vector<FakeEvent> events;
};

std::mutex mu;
bool initialized = false;
Config config;
size_t delivered_events = 0;
// Stable handle storage (handles must stay valid while initialised).
std::deque<nvmlDevice_st> device_handles;
std::deque<nvmlGpuInstance_st> gi_handles;
nvmlEventSet_st event_set;

std::string ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

unsigned long long U64(const rapidjson::Value& o, const char* name, unsigned long long def) {
  auto it = o.FindMember(name);
  return it != o.MemberEnd() && it->value.IsUint64() ? it->value.GetUint64() : def;
}
std::string Str(const rapidjson::Value& o, const char* name) {
  auto it = o.FindMember(name);
  return it != o.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}
bool Bool(const rapidjson::Value& o, const char* name, bool def) {
  auto it = o.FindMember(name);
  return it != o.MemberEnd() && it->value.IsBool() ? it->value.GetBool() : def;
}

// Returns false when the file is missing or not JSON (nvmlInit then fails).
bool LoadConfig(Config* out) {
  const char* path = std::getenv("GSE_FAKE_NVML_CONFIG");
  if (path == nullptr) return false;
  rapidjson::Document doc;
  const std::string text = ReadFile(path);
  if (doc.Parse(text.c_str(), text.size()).HasParseError() || !doc.IsObject()) return false;
  Config c;
  auto gpus = doc.FindMember("gpus");
  if (gpus != doc.MemberEnd() && gpus->value.IsArray()) {
    for (const auto& g : gpus->value.GetArray()) {
      if (!g.IsObject()) continue;
      FakeGpu fg;
      fg.index = static_cast<unsigned int>(U64(g, "index", c.gpus.size()));
      fg.uuid = Str(g, "uuid");
      fg.product = Str(g, "product");
      fg.memory_mib = U64(g, "memoryMiB", 0);
      fg.mig_enabled = Bool(g, "migEnabled", false);
      auto migs = g.FindMember("migDevices");
      if (migs != g.MemberEnd() && migs->value.IsArray()) {
        for (const auto& m : migs->value.GetArray()) {
          if (!m.IsObject()) continue;
          FakeMig fm;
          fm.uuid = Str(m, "uuid");
          fm.profile = Str(m, "profile");
          fm.memory_mib = U64(m, "memoryMiB", 0);
          fm.placement_start = static_cast<unsigned int>(U64(m, "placementStart", 0));
          fm.gi_id = static_cast<unsigned int>(U64(m, "gpuInstanceId", fg.migs.size() + 1));
          fg.migs.push_back(fm);
        }
      }
      c.gpus.push_back(fg);
    }
  }
  auto errors = doc.FindMember("errors");
  if (errors != doc.MemberEnd() && errors->value.IsObject()) {
    for (const auto& e : errors->value.GetObject()) {
      if (e.value.IsInt()) c.errors.emplace_back(e.name.GetString(), e.value.GetInt());
    }
  }
  c.events_supported = Bool(doc, "eventsSupported", true);
  auto events = doc.FindMember("events");
  if (events != doc.MemberEnd() && events->value.IsArray()) {
    for (const auto& e : events->value.GetArray()) {
      if (!e.IsObject()) continue;
      FakeEvent fe;
      fe.gpu_index = static_cast<int>(U64(e, "gpuIndex", 0));
      fe.gi_id = static_cast<unsigned int>(U64(e, "gpuInstanceId", NVML_EVENT_ALL_INSTANCES));
      fe.xid = U64(e, "xid", 79);
      fe.ecc = Bool(e, "ecc", false);
      c.events.push_back(fe);
    }
  }
  *out = std::move(c);
  return true;
}

// The configured failure of `fn`, or NVML_SUCCESS.
nvmlReturn_t Injected(const char* fn) {
  for (const auto& [name, rc] : config.errors) {
    if (name == fn) return rc;
  }
  return NVML_SUCCESS;
}

#define FAKE_NVML_ENTER(fn)                                 \
  std::lock_guard<std::mutex> lock(mu);                     \
  if (!initialized) return NVML_ERROR_UNINITIALIZED;        \
  if (nvmlReturn_t injected = Injected(fn); injected != 0) return injected

FakeGpu* GpuOf(nvmlDevice_t d) {
  if (d == nullptr || d->gpu < 0 || static_cast<size_t>(d->gpu) >= config.gpus.size()) {
    return nullptr;
  }
  return &config.gpus[static_cast<size_t>(d->gpu)];
}
FakeMig* MigOf(nvmlDevice_t d) {
  FakeGpu* g = GpuOf(d);
  if (g == nullptr || d->mig < 0 || static_cast<size_t>(d->mig) >= g->migs.size()) return nullptr;
  return &g->migs[static_cast<size_t>(d->mig)];
}
nvmlDevice_t NewHandle(int gpu, int mig) {
  device_handles.push_back(nvmlDevice_st{gpu, mig});
  return &device_handles.back();
}
nvmlReturn_t CopyString(const std::string& s, char* buf, unsigned int len) {
  if (buf == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

}  // namespace

FAKE_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  std::lock_guard<std::mutex> lock(mu);
  Config c;
  if (!LoadConfig(&c)) return NVML_ERROR_DRIVER_NOT_LOADED;
  config = std::move(c);
  if (nvmlReturn_t injected = Injected("nvmlInit_v2"); injected != 0) return injected;
  initialized = true;
  delivered_events = 0;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard<std::mutex> lock(mu);
  initialized = false;
  device_handles.clear();
  gi_handles.clear();
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  FAKE_NVML_ENTER("nvmlDeviceGetCount_v2");
  *count = static_cast<unsigned int>(config.gpus.size());
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                            nvmlDevice_t* device) {
  FAKE_NVML_ENTER("nvmlDeviceGetHandleByIndex_v2");
  for (size_t i = 0; i < config.gpus.size(); ++i) {
    if (config.gpus[i].index == index) {
      *device = NewHandle(static_cast<int>(i), -1);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* buf, unsigned int len) {
  FAKE_NVML_ENTER("nvmlDeviceGetUUID");
  if (d != nullptr && d->mig >= 0) {
    FakeMig* m = MigOf(d);
    return m == nullptr ? NVML_ERROR_INVALID_ARGUMENT : CopyString(m->uuid, buf, len);
  }
  FakeGpu* g = GpuOf(d);
  return g == nullptr ? NVML_ERROR_INVALID_ARGUMENT : CopyString(g->uuid, buf, len);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* buf, unsigned int len) {
  FAKE_NVML_ENTER("nvmlDeviceGetName");
  FakeGpu* g = GpuOf(d);
  return g == nullptr ? NVML_ERROR_INVALID_ARGUMENT : CopyString(g->product, buf, len);
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* mem) {
  FAKE_NVML_ENTER("nvmlDeviceGetMemoryInfo");
  FakeGpu* g = GpuOf(d);
  if (g == nullptr || mem == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned long long mib = d->mig >= 0 && MigOf(d) ? MigOf(d)->memory_mib : g->memory_mib;
  mem->total = mib << 20;
  mem->used = 0;
  mem->free = mem->total;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current,
                                                   unsigned int* pending) {
  FAKE_NVML_ENTER("nvmlDeviceGetMigMode");
  FakeGpu* g = GpuOf(d);
  if (g == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = g->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d,
                                                             unsigned int* count) {
  FAKE_NVML_ENTER("nvmlDeviceGetMaxMigDeviceCount");
  FakeGpu* g = GpuOf(d);
  if (g == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 7;  // A100/H100: at most seven GPU instances
  if (g->migs.size() > 7) *count = static_cast<unsigned int>(g->migs.size());
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d,
                                                                  unsigned int index,
                                                                  nvmlDevice_t* mig) {
  FAKE_NVML_ENTER("nvmlDeviceGetMigDeviceHandleByIndex");
  FakeGpu* g = GpuOf(d);
  if (g == nullptr || !g->mig_enabled) return NVML_ERROR_INVALID_ARGUMENT;
  if (index >= g->migs.size()) return NVML_ERROR_NOT_FOUND;
  *mig = NewHandle(d->gpu, static_cast<int>(index));
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d,
                                                         nvmlDeviceAttributes_t* attr) {
  FAKE_NVML_ENTER("nvmlDeviceGetAttributes_v2");
  FakeMig* m = MigOf(d);
  if (m == nullptr || attr == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *attr = nvmlDeviceAttributes_t{};
  attr->gpuInstanceSliceCount = static_cast<unsigned int>(std::atoi(m->profile.c_str()));
  attr->computeInstanceSliceCount = attr->gpuInstanceSliceCount;
  attr->memorySizeMB = m->memory_mib;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int* id) {
  FAKE_NVML_ENTER("nvmlDeviceGetGpuInstanceId");
  FakeMig* m = MigOf(d);
  if (m == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *id = m->gi_id;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id,
                                                           nvmlGpuInstance_t* gi) {
  FAKE_NVML_ENTER("nvmlDeviceGetGpuInstanceById");
  FakeGpu* g = GpuOf(d);
  if (g == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t j = 0; j < g->migs.size(); ++j) {
    if (g->migs[j].gi_id == id) {
      gi_handles.push_back(nvmlGpuInstance_st{d->gpu, static_cast<int>(j)});
      *gi = &gi_handles.back();
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi,
                                                     nvmlGpuInstanceInfo_t* info) {
  FAKE_NVML_ENTER("nvmlGpuInstanceGetInfo");
  if (gi == nullptr || info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const FakeMig& m = config.gpus[static_cast<size_t>(gi->gpu)].migs[static_cast<size_t>(gi->mig)];
  *info = nvmlGpuInstanceInfo_t{};
  info->id = m.gi_id;
  info->placement.start = m.placement_start;
  info->placement.size = static_cast<unsigned int>(std::atoi(m.profile.c_str()));
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  FAKE_NVML_ENTER("nvmlEventSetCreate");
  *set = &event_set;
  return NVML_SUCCESS;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                                       nvmlEventSet_t set) {
  FAKE_NVML_ENTER("nvmlDeviceRegisterEvents");
  if (GpuOf(d) == nullptr || set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return config.events_supported ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                  unsigned int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    {
      FAKE_NVML_ENTER("nvmlEventSetWait_v2");
      Config fresh;
      if (LoadConfig(&fresh)) config.events = std::move(fresh.events);
      if (delivered_events < config.events.size()) {
        const FakeEvent& e = config.events[delivered_events++];
        *data = nvmlEventData_t{};
        size_t gpu = 0;
        for (size_t i = 0; i < config.gpus.size(); ++i) {
          if (static_cast<int>(config.gpus[i].index) == e.gpu_index) gpu = i;
        }
        data->device = NewHandle(static_cast<int>(gpu), -1);
        data->eventType = e.ecc ? kNvmlEventTypeDoubleBitEccError : kNvmlEventTypeXidCriticalError;
        data->eventData = e.xid;
        data->gpuInstanceId = e.gi_id;
        data->computeInstanceId = NVML_EVENT_ALL_INSTANCES;
        return NVML_SUCCESS;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return NVML_ERROR_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

FAKE_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  FAKE_NVML_ENTER("nvmlEventSetFree");
  return NVML_SUCCESS;
}
