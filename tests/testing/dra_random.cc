#include "tests/testing/dra_random.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gse::testing {
namespace {

constexpr char kDriver[] = "gpu.nvidia.com";
constexpr char kOtherDriver[] = "other.example.com";

DraAttribute StringAttribute(const std::string& s) {
  DraAttribute a;
  a.kind = DraAttribute::kString;
  a.text = s;
  return a;
}

DraDevice RandomDevice(std::mt19937_64& rng, int j, const std::string& node) {
  DraDevice d;
  d.name = absl::StrCat("d", j);
  d.attributes[absl::StrCat(kDriver, "/type")] = StringAttribute(rng() % 4 == 0 ? "gpu" : "mig");
  d.attributes[absl::StrCat(kDriver, "/profile")] =
      StringAttribute(rng() % 4 == 0 ? "2g.10gb" : "1g.5gb");
  d.attributes[absl::StrCat(kDriver, "/uuid")] = StringAttribute(absl::StrCat("MIG-", node, "-", j));
  d.allow_multiple_allocations = rng() % 2 == 0;
  if (d.allow_multiple_allocations) {
    DraCapacity c;
    c.value_milli = 4000;
    c.has_policy = rng() % 2 == 0;
    if (c.has_policy) c.default_milli = 1000;
    d.capacity["shares"] = c;
  }
  return d;
}

}  // namespace

DraResourceSlice RandomDraSlice(std::mt19937_64& rng, const std::vector<std::string>& nodes) {
  DraResourceSlice s;
  s.name = absl::StrCat("s", rng() % 12);
  s.driver = rng() % 5 == 0 ? kOtherDriver : kDriver;
  s.pool_name = absl::StrCat("p", rng() % 3);
  s.pool_generation = 1 + static_cast<int64_t>(rng() % 2);
  s.resource_slice_count = 1 + static_cast<int64_t>(rng() % 2);
  const uint64_t where = rng() % 20;
  if (where == 0) {
    s.node_selector = true;  // not modelled: every node's walk reports it
  } else if (where < 4) {
    s.all_nodes = true;
  } else {
    s.node_name = nodes[rng() % nodes.size()];
  }
  std::vector<int> names = {0, 1, 2, 3, 4};
  std::shuffle(names.begin(), names.end(), rng);
  const int devices = 1 + static_cast<int>(rng() % 3);
  for (int j = 0; j < devices; ++j) s.devices.push_back(RandomDevice(rng, names[j], s.node_name));
  return s;
}

DraResourceClaim RandomDraClaim(std::mt19937_64& rng, const std::vector<std::string>& nodes,
                                const std::string& device_class) {
  DraResourceClaim c;
  c.namespace_name = "ns";
  c.name = absl::StrCat("c", rng() % 10);
  c.uid = absl::StrCat("uid-", c.name, "-", rng() % 1000);
  DraDeviceRequest req;
  req.name = "container-0-request-0";
  req.device_class_name = device_class;
  c.requests.push_back(req);
  if (rng() % 2 == 0) {
    c.extended_resource_annotation = true;
    c.owner_pod_name = absl::StrCat("pod-", c.name);
    c.owner_pod_uid = absl::StrCat("pod-uid-", c.name);
  }
  c.allocated = rng() % 10 < 7;
  if (!c.allocated) return c;
  c.allocation_node = nodes[rng() % nodes.size()];
  const int results = 1 + static_cast<int>(rng() % 2);
  for (int i = 0; i < results; ++i) {
    DraAllocationResult r;
    r.request = req.name;
    r.driver = rng() % 5 == 0 ? kOtherDriver : kDriver;
    r.pool = absl::StrCat("p", rng() % 3);
    r.device = absl::StrCat("d", rng() % 5);
    r.admin_access = rng() % 10 == 0;
    r.share_id = absl::StrCat("share-", i);
    if (rng() % 5 != 0) r.consumed_capacity_milli["shares"] = 1000;
    c.results.push_back(std::move(r));
  }
  const int reserved = static_cast<int>(rng() % 3);
  for (int i = 0; i < reserved; ++i) {
    c.reserved_for.push_back(
        {"", "pods", absl::StrCat("user-pod-", i), absl::StrCat("user-uid-", i)});
  }
  return c;
}

}  // namespace gse::testing
