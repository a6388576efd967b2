// DRA test objects: see the header.
#include "testsupport/dra_test_objects.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gse::testing {

std::string DraGpuDeviceJson(const std::string& node, int i, int shares) {
  return absl::StrCat(
      R"({"name":"gpu-)", i, R"(","attributes":{"type":{"string":"gpu"},"uuid":{"string":"GPU-)",
      node, "-", i, R"("},"productName":{"string":"NVIDIA A100-SXM4-40GB"}},)",
      R"("allowMultipleAllocations":true,"capacity":{"shares":{"value":")", shares, R"(",)",
      R"("requestPolicy":{"default":"1","validRange":{"min":"1"}}}}})");
}

std::string DraMigDeviceName(int i) { return absl::StrCat("gpu-9-mig-1g5gb-19-", i); }

std::string DraMigDeviceJson(const std::string& node, int i) {
  return absl::StrCat(
      R"({"name":")", DraMigDeviceName(i), R"(","attributes":{"type":{"string":"mig"},)",
      R"("profile":{"string":"1g.5gb"},"uuid":{"string":"MIG-)", node, "-", i,
      R"("},"productName":{"string":"NVIDIA A100-SXM4-40GB"}},"capacity":{)",
      R"("multiprocessors":{"value":"14"}}})");
}

std::string DraSliceJson(const std::string& node, const std::string& name, int count,
                         const std::vector<std::string>& devices) {
  return absl::StrCat(
      R"({"metadata":{"name":")", name, R"("},"spec":{"driver":")", kDraDriver, R"(","pool":{"name":")",
      node, R"(","generation":1,"resourceSliceCount":)", count, R"(},"nodeName":")", node,
      R"(","devices":[)", absl::StrJoin(devices, ","), "]}}");
}

std::string DraSharedGpuClassJson() {
  return absl::StrCat(
      R"({"metadata":{"name":")", kDraSharedGpuClass, R"(","creationTimestamp":"2026-11-20T08:00:00Z"},)",
      R"("spec":{"selectors":[{"cel":{"expression":"device.driver == 'gpu.nvidia.com' && )",
      R"(device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],"extendedResourceName":)",
      R"("nvidia.com/gpu.shared"}})");
}

}  // namespace gse::testing
