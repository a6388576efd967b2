// The node agent's inventory: the JSON file form (--inventory) with hostile input, and NVML
// loaded through dlopen from the project's test library (testsupport/fake_nvml/), including
// unit order, profile derivation, injected NVML errors, a missing library and health events.
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/health_monitor.h"
#include "agent/inventory.h"
#include "agent/nvml_library.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/fake_apiserver.h"

namespace gse::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One A100 with MIG (slices listed out of placement order) and one without.
constexpr char kTwoGpus[] = R"({"gpus": [
  {"index": 1, "uuid": "GPU-bbbb", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960},
  {"index": 0, "uuid": "GPU-aaaa", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960,
   "migEnabled": true, "migDevices": [
     {"uuid": "MIG-a2", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 2, "gpuInstanceId": 11},
     {"uuid": "MIG-a0", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 0, "gpuInstanceId": 9},
     {"uuid": "MIG-a4", "profile": "3g.20gb", "memoryMiB": 19968, "placementStart": 4, "gpuInstanceId": 2}]}]})";

TEST(InventoryJson, SortsByGpuIndexThenPlacementStart) {
  auto inv = ParseInventoryJson(kTwoGpus);
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->gpus.size(), 2u);
  EXPECT_EQ(inv->gpus[0].uuid, "GPU-aaaa");
  ASSERT_EQ(inv->gpus[0].mig_devices.size(), 3u);
  EXPECT_EQ(inv->gpus[0].mig_devices[0].uuid, "MIG-a0");
  EXPECT_EQ(inv->gpus[0].mig_devices[1].uuid, "MIG-a2");
  EXPECT_EQ(inv->gpus[0].mig_devices[2].uuid, "MIG-a4");
  // The JSON form reads back to the same inventory.
  auto again = ParseInventoryJson(InventoryToJson(*inv));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(InventoryToJson(*again), InventoryToJson(*inv));
}

struct BadInventory {
  const char* name;
  std::string json;
  const char* error;
};

TEST(InventoryJson, MalformedFilesNameFieldAndReason) {
  const std::string big_gpu =
      R"({"index": 0, "uuid": "GPU-x", "product": "P", "migEnabled": true, "migDevices": [)";
  std::string many_migs = big_gpu;
  for (int i = 0; i < 17; ++i) {
    absl::StrAppend(&many_migs, i ? "," : "", R"({"uuid":"M)", i,
                    R"(","profile":"1g.5gb","placementStart":)", i, "}");
  }
  many_migs += "]}";
  const std::vector<BadInventory> cases = {
      {"not json", "{", "inventory:"},
      {"not an object", "[]", "must be a JSON object"},
      {"no gpus", "{}", "gpus: missing"},
      {"gpus not array", R"({"gpus": 3})", "gpus: must be an array"},
      {"index missing", R"({"gpus": [{"uuid": "GPU-a", "product": "P"}]})", "gpus[0].index: missing"},
      {"index negative", R"({"gpus": [{"index": -1, "uuid": "GPU-a", "product": "P"}]})",
       "gpus[0].index: -1 is outside"},
      {"index string", R"({"gpus": [{"index": "0", "uuid": "GPU-a", "product": "P"}]})",
       "must be an integer"},
      {"duplicate index",
       R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": "P"}, {"index": 0, "uuid": "GPU-b", "product": "P"}]})",
       "gpus[1].index: 0 is used by two GPUs"},
      {"duplicate uuid",
       R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": "P"}, {"index": 1, "uuid": "GPU-a", "product": "P"}]})",
       "appears twice"},
      {"uuid with separator", R"({"gpus": [{"index": 0, "uuid": "GPU-a::1", "product": "P"}]})",
       "gpus[0].uuid"},
      {"uuid too long",
       absl::StrCat(R"({"gpus": [{"index": 0, "uuid": ")", std::string(57, 'u'), R"(", "product": "P"}]})"),
       "longer than 56 bytes"},
      {"uuid with control char", R"({"gpus": [{"index": 0, "uuid": "GPU\u0001", "product": "P"}]})",
       "printable"},
      {"empty product", R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": ""}]})",
       "gpus[0].product: is empty"},
      {"migs without mig mode",
       R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": "P", "migDevices": [{"uuid": "M", "profile": "1g.5gb", "placementStart": 0}]}]})",
       "migEnabled is false"},
      {"bad profile",
       R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": "P", "migEnabled": true, "migDevices": [{"uuid": "M", "profile": "big", "placementStart": 0}]}]})",
       "gpus[0].migDevices[0].profile"},
      {"duplicate placement",
       R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": "P", "migEnabled": true, "migDevices": [{"uuid": "M1", "profile": "1g.5gb", "placementStart": 0}, {"uuid": "M2", "profile": "1g.5gb", "placementStart": 0}]}]})",
       "placementStart: 0 is used by two"},
      {"placement missing",
       R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": "P", "migEnabled": true, "migDevices": [{"uuid": "M1", "profile": "1g.5gb"}]}]})",
       "placementStart: missing"},
      {"too many migs", absl::StrCat(R"({"gpus": [)", many_migs, "]}"), "17 items, at most 16"},
      {"oversized", absl::StrCat(R"({"gpus": [], "pad": ")", std::string(kMaxInventoryBytes, 'x'), "\"}"),
       "at most"},
  };
  for (const BadInventory& c : cases) {
    auto inv = ParseInventoryJson(c.json);
    ASSERT_FALSE(inv.ok()) << c.name;
    EXPECT_THAT(std::string(inv.status().message()), HasSubstr(c.error)) << c.name;
  }
}

TEST(InventoryJson, FileErrorsNameThePath) {
  auto missing = LoadInventoryFile("/nonexistent/inventory.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/inventory.json"));
  gse::testing::ScratchDir dir;
  dir.Write("inv.json", R"({"gpus": [{"index": 0}]})");
  auto bad = LoadInventoryFile(dir.File("inv.json"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(absl::StrCat("inventory file ", dir.File("inv.json"), ": gpus[0].uuid")));
}

TEST(InventoryJson, ProfileNamesFromAttributes) {
  EXPECT_EQ(MigProfileName(1, 4864), "1g.5gb");    // A100 40GB
  EXPECT_EQ(MigProfileName(3, 19968), "3g.20gb");
  EXPECT_EQ(MigProfileName(7, 40192), "7g.40gb");
  EXPECT_EQ(MigProfileName(1, 9728), "1g.10gb");   // A100 80GB
  EXPECT_EQ(ProductLabel("NVIDIA A100-SXM4-40GB"), "NVIDIA-A100-SXM4-40GB");
}

// The test NVML library, configured through its JSON file.
class FakeNvml : public ::testing::Test {
 protected:
  void Configure(const std::string& json) {
    dir_.Write("nvml.json", json);
    setenv("GSE_FAKE_NVML_CONFIG", dir_.File("nvml.json").c_str(), 1);
  }
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> Open() {
    return NvmlLibrary::Open(GSE_FAKE_NVML_LIBRARY);
  }
  gse::testing::ScratchDir dir_;
};

TEST_F(FakeNvml, ReadsGpusAndMigDevicesInUnitOrder) {
  Configure(kTwoGpus);
  auto nvml = Open();
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  auto inv = (*nvml)->ReadInventory();
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->gpus.size(), 2u);
  const Gpu& g0 = inv->gpus[0];
  EXPECT_EQ(g0.index, 0);
  EXPECT_EQ(g0.uuid, "GPU-aaaa");
  EXPECT_EQ(g0.product, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(g0.memory_mib, 40960);
  EXPECT_TRUE(g0.mig_enabled);
  ASSERT_EQ(g0.mig_devices.size(), 3u);
  // NVML enumerated a2, a0, a4; unit order is by placement start.
  EXPECT_EQ(g0.mig_devices[0].uuid, "MIG-a0");
  EXPECT_EQ(g0.mig_devices[0].profile, "1g.5gb");
  EXPECT_EQ(g0.mig_devices[0].gpu_instance_id, 9u);
  EXPECT_EQ(g0.mig_devices[1].uuid, "MIG-a2");
  EXPECT_EQ(g0.mig_devices[2].profile, "3g.20gb");
  EXPECT_EQ(g0.mig_devices[2].placement_start, 4);
  EXPECT_FALSE(inv->gpus[1].mig_enabled);
}

TEST_F(FakeNvml, MissingLibraryIsAClearError) {
  auto nvml = NvmlLibrary::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_THAT(std::string(nvml.status().message()),
              HasSubstr("NVML library /nonexistent/libnvidia-ml.so.1 cannot be loaded"));
  EXPECT_THAT(std::string(nvml.status().message()), HasSubstr("--inventory=FILE"));
}

TEST_F(FakeNvml, NotAnNvmlLibraryNamesTheMissingSymbol) {
  // libm is a shared object without NVML's entry points.
  auto nvml = NvmlLibrary::Open("libm.so.6");
  ASSERT_FALSE(nvml.ok());
  EXPECT_THAT(std::string(nvml.status().message()), HasSubstr("lacks nvmlInit_v2"));
}

TEST_F(FakeNvml, InitFailureNamesTheCall) {
  Configure(R"({"gpus": [], "errors": {"nvmlInit_v2": 9}})");
  auto nvml = Open();
  ASSERT_FALSE(nvml.ok());
  EXPECT_THAT(std::string(nvml.status().message()),
              HasSubstr("nvmlInit_v2: Driver Not Loaded (9)"));
}

TEST_F(FakeNvml, FailingCallsFailTheWholeRead) {
  for (const char* fn : {"nvmlDeviceGetCount_v2", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
                         "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMigMode",
                         "nvmlDeviceGetAttributes_v2", "nvmlGpuInstanceGetInfo"}) {
    std::string json = kTwoGpus;
    json.pop_back();  // the closing brace
    Configure(absl::StrCat(json, R"(, "errors": {")", fn, R"(": 999}})"));
    auto nvml = Open();
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    auto inv = (*nvml)->ReadInventory();
    ASSERT_FALSE(inv.ok()) << fn;
    EXPECT_THAT(std::string(inv.status().message()), HasSubstr(absl::StrCat(fn, "(")));
    EXPECT_THAT(std::string(inv.status().message()), HasSubstr("Unknown Error (999)"));
  }
}

TEST_F(FakeNvml, DuplicateUuidsFromNvmlAreRejected) {
  Configure(R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": "P"},
                         {"index": 1, "uuid": "GPU-a", "product": "P"}]})");
  auto nvml = Open();
  ASSERT_TRUE(nvml.ok());
  auto inv = (*nvml)->ReadInventory();
  ASSERT_FALSE(inv.ok());
  EXPECT_THAT(std::string(inv.status().message()), HasSubstr("NVML inventory is inconsistent"));
}

TEST_F(FakeNvml, HealthEventsMarkTheMigDeviceOrTheWholeGpu) {
  std::string json = kTwoGpus;
  json.pop_back();
  Configure(json + "}");
  auto nvml = Open();
  ASSERT_TRUE(nvml.ok());
  auto inv = (*nvml)->ReadInventory();
  ASSERT_TRUE(inv.ok());
  DeviceHealth health;
  HealthMonitor monitor(nvml->get(), *inv, &health, nullptr);
  auto supported = monitor.Start();
  ASSERT_TRUE(supported.ok()) << supported.status();
  EXPECT_EQ(*supported, 2);
  // An application Xid (43) changes nothing; a critical one on GPU instance 11 (MIG-a2) does.
  Configure(json + R"(, "events": [{"gpuIndex": 0, "gpuInstanceId": 11, "xid": 43},
                                  {"gpuIndex": 0, "gpuInstanceId": 11, "xid": 79}]})");
  const uint64_t g = health.WaitForChange(0, absl::Seconds(30));
  EXPECT_EQ(g, 1u);
  EXPECT_FALSE(health.Healthy("MIG-a2"));
  EXPECT_TRUE(health.Healthy("MIG-a0"));
  EXPECT_TRUE(health.Healthy("GPU-aaaa"));
  // A double-bit ECC error for the whole of GPU 1.
  Configure(json + R"(, "events": [{"gpuIndex": 0, "gpuInstanceId": 11, "xid": 43},
                                  {"gpuIndex": 0, "gpuInstanceId": 11, "xid": 79},
                                  {"gpuIndex": 1, "ecc": true}]})");
  health.WaitForChange(g, absl::Seconds(30));
  EXPECT_FALSE(health.Healthy("GPU-bbbb"));
  monitor.Stop();
  EXPECT_EQ(health.unhealthy_count(), 2u);
}

TEST_F(FakeNvml, EventsNotSupportedIsNotAnError) {
  Configure(R"({"gpus": [{"index": 0, "uuid": "GPU-a", "product": "P"}], "eventsSupported": false})");
  auto nvml = Open();
  ASSERT_TRUE(nvml.ok());
  DeviceHealth health;
  HealthMonitor monitor(nvml->get(), Inventory{}, &health, nullptr);
  auto supported = monitor.Start();
  ASSERT_TRUE(supported.ok());
  EXPECT_EQ(*supported, 0);
}

TEST(AffectedDevicesTest, WholeGpuEventCoversItsMigDevices) {
  auto inv = ParseInventoryJson(kTwoGpus);
  ASSERT_TRUE(inv.ok());
  HealthEvent e;
  e.gpu_uuid = "GPU-aaaa";
  EXPECT_THAT(AffectedDevices(*inv, e), ElementsAre("GPU-aaaa", "MIG-a0", "MIG-a2", "MIG-a4"));
  e.gpu_instance_id = 2;
  EXPECT_THAT(AffectedDevices(*inv, e), ElementsAre("MIG-a4"));
}

}  // namespace
}  // namespace gse::agent
