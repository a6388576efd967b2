// libFuzzer target: DRA objects (state/dra_objects.h) — DecodeDraObjects, the single-object
// decoders, the pod's extendedResourceClaimStatus — and the DRA model (state/dra_state.h) fed
// with whatever decoded, next to the fact sheet's class and slice.
//
// Properties, each a crash when broken:
//  * no crash, no sanitizer report, whatever the bytes; a refusal is InvalidArgument;
//  * an accepted slice keeps the API server's invariants (at most 128 devices, unique device
//    names, exactly one node field);
//  * a class's units on a node are unique devices, and none when its selectors are not
//    understood;
//  * a predicted device is a unit of the class on that node, and an exclusive one is held by
//    no allocated claim: the model never hands out a unit twice.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "rapidjson/document.h"
#include "state/catalog.h"
#include "state/dra_objects.h"
#include "state/dra_state.h"
#include "state/json_reader.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

// The fact sheet's class and slice, decoded once: fuzzed claims and classes meet real devices.
const DraObjectBatch& FactSheet() {
  static const DraObjectBatch* batch = [] {
    auto* b = new DraObjectBatch;
    for (const char* file : {"deviceclass-mig-1g-extended.json", "resourceslice-a100-mig-node.json"}) {
      absl::StatusOr<DraObjectBatch> one = DecodeDraObjects(
          testing::ReadFileOrDie(testing::SharedPath(std::string("protocol/dra/") + file)));
      fuzz::Check(one.ok(), "the fact sheet's objects decode", one.ok() ? "" : one.status().ToString());
      for (auto& c : one->device_classes) b->device_classes.push_back(c);
      for (auto& s : one->resource_slices) b->resource_slices.push_back(s);
    }
    return b;
  }();
  return *batch;
}

void CheckSlice(const DraResourceSlice& s) {
  fuzz::Check(s.devices.size() <= kDraMaxDevicesPerSlice, "at most 128 devices per slice");
  std::set<std::string> names;
  for (const DraDevice& d : s.devices) {
    fuzz::Check(names.insert(d.name).second, "device names are unique in a slice", d.name);
  }
  const int node_fields =
      !s.node_name.empty() + s.node_selector + s.all_nodes + s.per_device_node_selection;
  fuzz::Check(node_fields == 1, "exactly one node field", s.name);
}

}  // namespace
}  // namespace gse

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gse;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);

  rapidjson::Document doc;
  if (ParseJsonLimited(input, doc).ok()) {
    (void)DecodeDeviceClass(doc, "DeviceClass");
    if (auto s = DecodeResourceSlice(doc, "ResourceSlice"); s.ok()) CheckSlice(*s);
    (void)DecodeResourceClaim(doc, "ResourceClaim");
    (void)DecodeExtendedResourceClaimStatus(doc, "Pod");
  }

  absl::StatusOr<DraObjectBatch> batch = DecodeDraObjects(input);
  if (!batch.ok()) {
    fuzz::Check(batch.status().code() == absl::StatusCode::kInvalidArgument,
                "a refused document is InvalidArgument", batch.status().ToString());
    return 0;
  }
  const DraObjectBatch* const both[] = {&FactSheet(), &*batch};
  DraState state;
  std::set<std::string> nodes = {"gpu-node-a"};
  for (const DraObjectBatch* b : both) {
    for (const auto& c : b->device_classes) state.UpsertDeviceClass(c);
    for (const auto& s : b->resource_slices) {
      CheckSlice(s);
      if (!s.node_name.empty()) nodes.insert(s.node_name);
      state.UpsertResourceSlice(s);
    }
    for (const auto& c : b->resource_claims) {
      if (!c.allocation_node.empty()) nodes.insert(c.allocation_node);
      state.UpsertResourceClaim(c);
    }
  }
  // Selectors on every device the input brought.
  for (const auto& c : batch->device_classes) {
    for (const std::string& cel : c.cel_selectors) {
      absl::StatusOr<DraSelector> sel = DraSelector::Parse(cel);
      if (!sel.ok()) {
        fuzz::Check(sel.status().code() == absl::StatusCode::kUnimplemented,
                    "a selector outside the subset is Unimplemented", sel.status().ToString());
        continue;
      }
      for (const DraObjectBatch* b : both) {
        for (const auto& s : b->resource_slices) {
          for (const DraDevice& d : s.devices) (void)sel->Evaluate(s.driver, d, nullptr);
        }
      }
    }
  }
  std::vector<std::string> classes;
  for (const DraObjectBatch* b : both) {
    for (const auto& c : b->device_classes) classes.push_back(c.name);
  }
  for (const std::string& node : nodes) {
    std::set<DraDeviceId> held;
    for (const DraHolder& h : state.HoldersOn(node)) held.insert(h.device);
    for (const std::string& cls : classes) {
      const DraNodeUnits units = state.UnitsOf(cls, node);
      std::set<DraDeviceId> ids;
      std::set<DraDeviceId> shared;
      for (const DraUnit& u : units.units) {
        fuzz::Check(ids.insert(u.id).second, "a unit is listed once", u.id.ToString());
        if (u.shared) shared.insert(u.id);
      }
      if (!units.understood) fuzz::Check(units.units.empty(), "no units when not understood");
      for (int64_t count : {1, 2}) {
        const DraPrediction p = state.PredictExtendedResourcePick(cls, node, count, {});
        if (p.kind != DraPrediction::kDevices) {
          fuzz::Check(p.devices.empty(), "only a prediction names devices");
          continue;
        }
        fuzz::Check(static_cast<int64_t>(p.devices.size()) == count, "as many devices as asked");
        std::set<DraDeviceId> picked;
        for (const DraDeviceId& id : p.devices) {
          fuzz::Check(ids.count(id) == 1, "a predicted device is a unit of the class on the node",
                      id.ToString());
          fuzz::Check(picked.insert(id).second, "a prediction names a device once", id.ToString());
          if (shared.count(id) == 0) {
            fuzz::Check(held.count(id) == 0, "an exclusive unit is never predicted while held",
                        id.ToString());
          }
        }
      }
    }
    for (const auto& c : batch->resource_claims) (void)state.VerifyAllocation(c.Key(), node);
  }
  (void)state.Drift(Catalog::BuiltIn());
  return 0;
}
