// The NVIDIA DRA driver's objects (resource.k8s.io/v1) as tests publish them to the local API
// server, in the shapes of the DRA fact sheet (shared/protocol/dra/README.md): devices of the
// driver gpu.nvidia.com with its attributes (type, profile, uuid, productName), a node's
// ResourceSlice, and the DeviceClass that maps nvidia.com/gpu.shared onto whole GPUs. One
// place for the mixed clusters of live_dra_test and the fault run (tests/testing/fault_cluster.h).
#ifndef GSE_TESTSUPPORT_DRA_TEST_OBJECTS_H_
#define GSE_TESTSUPPORT_DRA_TEST_OBJECTS_H_

#include <string>
#include <vector>

namespace gse::testing {

inline constexpr char kDraDriver[] = "gpu.nvidia.com";
inline constexpr char kDraSharedGpuClass[] = "gpu-shared.nvidia.com";

// A whole A100 "gpu-<i>" (UUID GPU-<node>-<i>) that takes `shares` allocations
// (allowMultipleAllocations, consumable capacity "shares", one per claim by default).
std::string DraGpuDeviceJson(const std::string& node, int i, int shares);
// The MIG 1g.5gb device DraMigDeviceName(i) (UUID MIG-<node>-<i>).
std::string DraMigDeviceName(int i);
std::string DraMigDeviceJson(const std::string& node, int i);
// A slice of `node`'s pool (named after the node, generation 1) of `count` slices.
std::string DraSliceJson(const std::string& node, const std::string& name, int count,
                         const std::vector<std::string>& devices);
// kDraSharedGpuClass: type == 'gpu' devices of the driver, extendedResourceName
// nvidia.com/gpu.shared.
std::string DraSharedGpuClassJson();

}  // namespace gse::testing

#endif  // GSE_TESTSUPPORT_DRA_TEST_OBJECTS_H_
