// Entitlement rules: who may receive which device IDs.
#include "agent/entitlement.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "state/assignment.h"

namespace gse::agent {
namespace {

std::string UnitList(const std::vector<int32_t>& units) { return absl::StrJoin(units, ","); }

// An ID quoted for a message: IDs come from kubelet, but keep messages printable and short.
std::string QuoteId(absl::string_view id) {
  return absl::StrCat("\"", absl::CHexEscape(id.substr(0, 80)), id.size() > 80 ? "\"..." : "\"");
}

}  // namespace

std::optional<Entitlement> EntitlementFor(const NodePod& pod, absl::string_view node,
                                          const ServedOffering& offering, const Catalog& catalog) {
  int64_t need = 0;
  for (const auto& [name, count] : pod.device_needs) {
    const Offering* o = catalog.Find(name);
    if (o != nullptr && o->id == offering.offering()) need += count;
  }
  if (need == 0) return std::nullopt;
  Entitlement e;
  e.pod_key = pod.Key();
  e.creation_timestamp = pod.creation_timestamp;
  e.need = need;
  auto project = pod.annotations.find(std::string(kAnnotationProject));
  e.project = project != pod.annotations.end() && !project->second.empty() &&
                      project->second.size() <= 253
                  ? project->second
                  : pod.namespace_name;
  auto a = ParseAssignmentAnnotations(pod.annotations, pod.node, catalog);
  if (absl::IsNotFound(a.status())) return e;  // not annotated: charged like the extender does
  e.annotated = true;
  if (!a.ok()) {
    e.error = std::string(a.status().message());
    return e;
  }
  if (a->node != node) {
    e.error = absl::StrCat("annotation ", kAnnotationUnit, " names node ", a->node,
                           ", this is node ", node);
    return e;
  }
  if (a->offering != offering.offering()) {
    e.error = absl::StrCat("annotation ", kAnnotationUnit, " names ", catalog.Get(a->offering).resource,
                           " but the pod requests ", offering.resource());
    return e;
  }
  const int32_t unit_count = static_cast<int32_t>(offering.units().size());
  for (int32_t u : a->units) {
    if (u >= unit_count) {
      e.error = absl::StrCat("annotation ", kAnnotationUnit, " names unit ", u, " of ",
                             offering.resource(), " but this node has ", unit_count);
      return e;
    }
  }
  e.units = a->units;
  e.amount_per_unit = a->amount_per_unit;
  const int64_t annotated_ids =
      offering.sharing() == Sharing::kExclusive
          ? static_cast<int64_t>(a->units.size())
          : static_cast<int64_t>(a->units.size()) * a->amount_per_unit;
  if (offering.sharing() != Sharing::kExclusive && a->units.size() != 1) {
    e.error = absl::StrCat("annotation ", kAnnotationUnit, " names ", a->units.size(), " units of ",
                           SharingName(offering.sharing()), " ", offering.resource(),
                           "; a pod takes tickets or shares of one unit");
  } else if (a->amount_per_unit > offering.replicas()) {
    e.error = absl::StrCat("annotation ", kAnnotationAmount, " is ", a->amount_per_unit, " but ",
                           offering.resource(), " has ", offering.replicas(), " per unit");
  } else if (annotated_ids != need) {
    e.error = absl::StrCat("the pod requests ", need, " of ", offering.resource(),
                           " but its annotation grants ", annotated_ids);
  }
  return e;
}

bool Equivalent(const Entitlement& a, const Entitlement& b) {
  if (!a.error.empty() || !b.error.empty()) return false;
  return a.annotated == b.annotated && a.units == b.units &&
         a.amount_per_unit == b.amount_per_unit && a.need == b.need &&
         (a.annotated || a.project == b.project);
}

std::vector<int32_t> AllowedUnits(const Entitlement& e, const ServedOffering& offering,
                                  const UnitUse& use) {
  if (!e.error.empty()) return {};
  if (e.annotated) return e.units;
  std::vector<int32_t> out;
  for (const UnitDevice& u : offering.units()) {
    if (u.healthy && use.Free(u.index)) out.push_back(u.index);
  }
  return out;
}

absl::Status CheckIdsFit(const Entitlement& e, const ServedOffering& offering, const UnitUse& use,
                         const std::vector<std::string>& ids, int64_t held) {
  const std::string who = absl::StrCat("pod ", e.pod_key);
  if (!e.error.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, " cannot receive ", offering.resource(), ": ", e.error));
  }
  if (ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no device IDs for ", who));
  }
  if (held + static_cast<int64_t>(ids.size()) > e.need) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, " needs ", e.need, " of ", offering.resource(), " and holds ", held,
                     "; kubelet asks for ", ids.size(), " more"));
  }
  const std::vector<int32_t> allowed = AllowedUnits(e, offering, use);
  absl::flat_hash_set<int32_t> units_seen;
  absl::flat_hash_set<std::string> ids_seen;
  for (const std::string& id : ids) {
    std::optional<DeviceRef> ref = offering.Find(id);
    if (!ref.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("device ", QuoteId(id), " is not a device of ",
                                                     offering.resource(), " on this node"));
    }
    if (!ids_seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat("device ", QuoteId(id), " is given twice"));
    }
    const UnitDevice& unit = offering.units()[static_cast<size_t>(ref->unit)];
    if (std::find(allowed.begin(), allowed.end(), ref->unit) == allowed.end()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "device ", id, " is unit ", ref->unit, " (", unit.uuid, ") of ", offering.resource(),
          ", but ", who,
          e.annotated ? absl::StrCat(" is annotated with unit(s) ", UnitList(e.units))
                      : std::string(" has no unit annotation and that unit is not free")));
    }
    units_seen.insert(ref->unit);
    const auto& holders = use.holders[static_cast<size_t>(ref->unit)];
    if (offering.sharing() == Sharing::kExclusive && !holders.empty()) {
      return absl::PermissionDeniedError(absl::StrCat("unit ", ref->unit, " (", unit.uuid,
                                                      ") is already held by pod ",
                                                      holders.begin()->first));
    }
    if (offering.sharing() == Sharing::kTimeSliced) {
      for (const std::string& p : use.projects[static_cast<size_t>(ref->unit)]) {
        if (p != e.project) {
          return absl::PermissionDeniedError(
              absl::StrCat("unit ", ref->unit, " (", unit.uuid, ") is used by project ", p, "; ",
                           who, " belongs to project ", e.project));
        }
      }
    }
  }
  if (offering.sharing() != Sharing::kExclusive && units_seen.size() > 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        "devices of ", units_seen.size(), " units for ", who, "; tickets and shares come from one unit"));
  }
  return absl::OkStatus();
}

std::vector<std::string> PreferredIds(const Entitlement& e, const ServedOffering& offering,
                                      const UnitUse& use, const std::vector<std::string>& available,
                                      const std::vector<std::string>& must_include, int32_t size) {
  std::vector<std::string> out;
  absl::flat_hash_set<std::string> taken;
  for (const std::string& id : must_include) {
    if (taken.insert(id).second) out.push_back(id);
  }
  const absl::flat_hash_set<std::string> avail(available.begin(), available.end());
  const std::vector<int32_t> allowed = AllowedUnits(e, offering, use);
  const bool one_unit = offering.sharing() != Sharing::kExclusive;
  for (int32_t unit : allowed) {
    if (static_cast<int32_t>(out.size()) >= size) break;
    std::vector<std::string> fit;
    for (std::string& id : offering.UnitDeviceIds(unit)) {
      if (avail.contains(id) && !taken.contains(id)) fit.push_back(std::move(id));
    }
    const size_t missing = static_cast<size_t>(size) - out.size();
    // Tickets and shares come from one unit: take a unit only if it has room for all.
    if (one_unit && fit.size() < missing) continue;
    for (std::string& id : fit) {
      if (out.size() >= static_cast<size_t>(size)) break;
      taken.insert(id);
      out.push_back(std::move(id));
    }
    if (one_unit) break;
  }
  return out;
}

}  // namespace gse::agent
