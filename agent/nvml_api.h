// The subset of NVML's C ABI that the agent uses, declared by hand so that building needs no
// NVIDIA package: the real libnvidia-ml.so.1 is loaded at run time (agent/nvml_library.h), and
// the project's test library (testsupport/fake_nvml/) implements exactly these entry points.
//
// Types and constants follow NVML's public header (nvml.h, driver 525+): handles are opaque
// pointers, structs are laid out as NVML lays them out, and the versioned entry points (_v2)
// are the ones current drivers export. Only what is listed here may be called; adding an entry
// point means adding it here, to NvmlLibrary's symbol table and to the fake library.
#ifndef GSE_AGENT_NVML_API_H_
#define GSE_AGENT_NVML_API_H_

extern "C" {

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlGpuInstance_st* nvmlGpuInstance_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999,
};

enum : unsigned int {
  NVML_DEVICE_MIG_DISABLE = 0,
  NVML_DEVICE_MIG_ENABLE = 1,
  // Buffer sizes NVML documents for the _v2 string getters.
  NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96,
  NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96,
  // nvmlEventData_t.gpuInstanceId when an event concerns the whole GPU.
  NVML_EVENT_ALL_INSTANCES = 0xFFFFFFFFu,
};

// Event type bits (nvmlEventType*).
inline constexpr unsigned long long kNvmlEventTypeSingleBitEccError = 0x1ULL;
inline constexpr unsigned long long kNvmlEventTypeDoubleBitEccError = 0x2ULL;
inline constexpr unsigned long long kNvmlEventTypeXidCriticalError = 0x8ULL;

typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct {
  unsigned int start;
  unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid for kNvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

// The entry points, as function types (NvmlLibrary resolves them with dlsym).
typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int, nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetName_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t, nvmlMemory_t*);
typedef nvmlReturn_t (*nvmlDeviceGetMigMode_fn)(nvmlDevice_t, unsigned int*, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetMaxMigDeviceCount_fn)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetMigDeviceHandleByIndex_fn)(nvmlDevice_t, unsigned int,
                                                              nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetAttributes_v2_fn)(nvmlDevice_t, nvmlDeviceAttributes_t*);
typedef nvmlReturn_t (*nvmlDeviceGetGpuInstanceId_fn)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetGpuInstanceById_fn)(nvmlDevice_t, unsigned int,
                                                        nvmlGpuInstance_t*);
typedef nvmlReturn_t (*nvmlGpuInstanceGetInfo_fn)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*);
typedef nvmlReturn_t (*nvmlEventSetCreate_fn)(nvmlEventSet_t*);
typedef nvmlReturn_t (*nvmlDeviceRegisterEvents_fn)(nvmlDevice_t, unsigned long long,
                                                    nvmlEventSet_t);
typedef nvmlReturn_t (*nvmlEventSetWait_v2_fn)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);
typedef nvmlReturn_t (*nvmlEventSetFree_fn)(nvmlEventSet_t);

}  // extern "C"

#endif  // GSE_AGENT_NVML_API_H_
