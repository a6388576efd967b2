// UnitMap: served offerings, their units in inventory order, and device IDs.
#include "agent/unit_map.h"

#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "state/assignment.h"

namespace gse::agent {

absl::StatusOr<std::vector<ServedSpec>> ParseServedSpecs(absl::string_view flag) {
  std::vector<ServedSpec> out;
  for (absl::string_view entry : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    ServedSpec spec;
    const size_t eq = entry.find('=');
    spec.resource = std::string(entry.substr(0, eq));
    if (eq != absl::string_view::npos) {
      int32_t r = 0;
      if (!absl::SimpleAtoi(entry.substr(eq + 1), &r) || r < 1 || r > kMaxAmountPerUnit) {
        return absl::InvalidArgumentError(
            absl::StrCat("--resources: \"", entry, "\": replicas must be 1..", kMaxAmountPerUnit));
      }
      spec.replicas = r;
    }
    if (spec.resource.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--resources: \"", entry, "\": no resource"));
    }
    out.push_back(std::move(spec));
  }
  if (out.empty()) return absl::InvalidArgumentError("--resources: no resource given");
  return out;
}

ServedOffering::ServedOffering(const Offering& offering, int32_t replicas,
                               std::vector<UnitDevice> units)
    : resource_(offering.resource),
      offering_(offering.id),
      sharing_(offering.sharing),
      replicas_(offering.sharing == Sharing::kExclusive ? 1 : replicas),
      units_(std::move(units)) {
  for (const UnitDevice& u : units_) {
    for (int32_t k = 0; k < replicas_; ++k) by_id_[DeviceId(u.index, k)] = DeviceRef{u.index, k};
  }
}

std::string ServedOffering::DeviceId(int32_t unit, int32_t k) const {
  const std::string& uuid = units_[static_cast<size_t>(unit)].uuid;
  if (sharing_ == Sharing::kExclusive) return uuid;
  return absl::StrCat(uuid, "::", k);
}

std::vector<std::string> ServedOffering::UnitDeviceIds(int32_t unit) const {
  std::vector<std::string> ids;
  ids.reserve(static_cast<size_t>(replicas_));
  for (int32_t k = 0; k < replicas_; ++k) ids.push_back(DeviceId(unit, k));
  return ids;
}

std::optional<DeviceRef> ServedOffering::Find(absl::string_view id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<UnitMap> UnitMap::Build(const Inventory& inventory, const Catalog& catalog,
                                       const std::vector<ServedSpec>& specs) {
  UnitMap map;
  std::map<std::string, std::string> claimed;  // device uuid -> resource
  std::map<OfferingId, bool> seen;
  for (const ServedSpec& spec : specs) {
    const Offering* o = catalog.Find(spec.resource);
    if (o == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resources: ", spec.resource, " is not in the GPU catalog"));
    }
    if (seen[o->id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resources: ", spec.resource, " is given twice"));
    }
    seen[o->id] = true;
    if (spec.replicas != 0 && o->sharing == Sharing::kExclusive && spec.replicas != 1) {
      return absl::InvalidArgumentError(absl::StrCat("--resources: ", spec.resource,
                                                     " is exclusive; replicas must be 1"));
    }
    const int32_t replicas = spec.replicas != 0 ? spec.replicas : std::max(1, o->replicas);
    std::vector<UnitDevice> units;
    for (const Gpu& g : inventory.gpus) {
      if (!o->product.empty() && !absl::StartsWith(ProductLabel(g.product), o->product)) continue;
      auto take = [&](UnitDevice u) -> absl::Status {
        auto [it, fresh] = claimed.emplace(u.uuid, o->resource);
        if (!fresh) {
          return absl::InvalidArgumentError(
              absl::StrCat("--resources: device ", u.uuid, " would be a unit of both ", it->second,
                           " and ", o->resource, "; a device may serve one resource only"));
        }
        u.index = static_cast<int32_t>(units.size());
        units.push_back(std::move(u));
        return absl::OkStatus();
      };
      if (o->unit == UnitKind::kGpu && !g.mig_enabled) {
        UnitDevice u;
        u.uuid = g.uuid;
        u.gpu_uuid = g.uuid;
        u.gpu_index = g.index;
        u.memory_mib = g.memory_mib;
        u.healthy = g.healthy;
        if (absl::Status s = take(std::move(u)); !s.ok()) return s;
      } else if (o->unit == UnitKind::kMig && g.mig_enabled) {
        for (const MigDevice& m : g.mig_devices) {
          if (m.profile != o->mig_profile) continue;
          UnitDevice u;
          u.uuid = m.uuid;
          u.gpu_uuid = g.uuid;
          u.gpu_index = g.index;
          u.mig_profile = m.profile;
          u.placement_start = m.placement_start;
          u.memory_mib = m.memory_mib;
          u.healthy = g.healthy && m.healthy;
          if (absl::Status s = take(std::move(u)); !s.ok()) return s;
        }
      }
    }
    map.offerings_.emplace_back(*o, replicas, std::move(units));
  }
  return map;
}

const ServedOffering* UnitMap::Find(absl::string_view resource, const Catalog& catalog) const {
  const Offering* o = catalog.Find(resource);
  if (o == nullptr) return nullptr;
  for (const ServedOffering& s : offerings_) {
    if (s.offering() == o->id) return &s;
  }
  return nullptr;
}

}  // namespace gse::agent
