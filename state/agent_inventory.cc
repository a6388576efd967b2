// ParsePublishedInventory: see agent_inventory.h.
#include "state/agent_inventory.h"

#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rapidjson/document.h"
#include "state/assignment.h"
#include "state/json_reader.h"

namespace gse {
namespace {

using rapidjson::Value;

absl::Status Bad(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(kAnnotationInventory, ": ", path, ": ", why));
}

absl::string_view TypeName(const Value& v) {
  if (v.IsObject()) return "an object";
  if (v.IsArray()) return "an array";
  if (v.IsString()) return "a string";
  if (v.IsBool()) return "a boolean";
  if (v.IsNumber()) return "a number";
  return "null";
}

const Value* Member(const Value& object, const char* name) {
  const auto it = object.FindMember(name);
  return it == object.MemberEnd() ? nullptr : &it->value;
}

std::string UuidProblem(absl::string_view uuid) {
  if (uuid.empty()) return "empty";
  if (uuid.size() > kMaxPublishedUuidBytes) {
    return absl::StrCat(uuid.size(), " bytes, at most ", kMaxPublishedUuidBytes);
  }
  for (char c : uuid) {
    if (c <= ' ' || c > '~' || c == ':' || c == ',') {
      return "only printable characters other than ':' and ','";
    }
  }
  return "";
}

absl::StatusOr<PublishedOffering> ParseOffering(const Value& v, const std::string& path) {
  if (!v.IsObject()) return Bad(path, absl::StrCat("expected an object, got ", TypeName(v)));
  PublishedOffering out;
  const Value* replicas = Member(v, "replicas");
  if (replicas == nullptr) return Bad(path + ".replicas", "missing");
  if (!replicas->IsInt() || replicas->GetInt() < 1 || replicas->GetInt() > kMaxAmountPerUnit) {
    return Bad(path + ".replicas", absl::StrCat("expected an integer 1-", kMaxAmountPerUnit));
  }
  out.replicas = replicas->GetInt();
  const Value* units = Member(v, "units");
  const std::string units_path = path + ".units";
  if (units == nullptr) return Bad(units_path, "missing");
  if (!units->IsArray()) return Bad(units_path, absl::StrCat("expected an array, got ", TypeName(*units)));
  if (units->Size() > kMaxPublishedUnits) {
    return Bad(units_path, absl::StrCat(units->Size(), " units, at most ", kMaxPublishedUnits));
  }
  std::set<std::string> seen;
  for (rapidjson::SizeType i = 0; i < units->Size(); ++i) {
    const Value& u = (*units)[i];
    const std::string unit_path = absl::StrCat(units_path, "[", i, "]");
    if (!u.IsObject()) return Bad(unit_path, absl::StrCat("expected an object, got ", TypeName(u)));
    const Value* uuid = Member(u, "uuid");
    if (uuid == nullptr) return Bad(unit_path + ".uuid", "missing");
    if (!uuid->IsString()) {
      return Bad(unit_path + ".uuid", absl::StrCat("expected a string, got ", TypeName(*uuid)));
    }
    PublishedUnit unit;
    unit.uuid.assign(uuid->GetString(), uuid->GetStringLength());
    if (std::string problem = UuidProblem(unit.uuid); !problem.empty()) {
      return Bad(unit_path + ".uuid", problem);
    }
    if (!seen.insert(unit.uuid).second) {
      return Bad(unit_path + ".uuid", absl::StrCat("\"", unit.uuid, "\" appears twice"));
    }
    const Value* healthy = Member(u, "healthy");
    if (healthy == nullptr) return Bad(unit_path + ".healthy", "missing");
    if (!healthy->IsBool()) {
      return Bad(unit_path + ".healthy", absl::StrCat("expected a boolean, got ", TypeName(*healthy)));
    }
    unit.healthy = healthy->GetBool();
    out.units.push_back(std::move(unit));
  }
  return out;
}

}  // namespace

absl::StatusOr<PublishedInventory> ParsePublishedInventory(absl::string_view json) {
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(json, doc); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kAnnotationInventory, ": ", s.message()));
  }
  if (!doc.IsObject()) return Bad("(document)", absl::StrCat("expected an object, got ", TypeName(doc)));
  const Value* version = Member(doc, "version");
  if (version == nullptr) return Bad("version", "missing");
  if (!version->IsInt() || version->GetInt() != kPublishedInventoryVersion) {
    return Bad("version", absl::StrCat("expected ", kPublishedInventoryVersion));
  }
  const Value* resources = Member(doc, "resources");
  if (resources == nullptr) return Bad("resources", "missing");
  if (!resources->IsObject()) {
    return Bad("resources", absl::StrCat("expected an object, got ", TypeName(*resources)));
  }
  PublishedInventory out;
  for (const auto& m : resources->GetObject()) {
    const std::string name(m.name.GetString(), m.name.GetStringLength());
    const std::string path = absl::StrCat("resources[\"", absl::CHexEscape(name), "\"]");
    if (name.empty() || name.size() > 253) return Bad(path, "not a resource name");
    absl::StatusOr<PublishedOffering> offering = ParseOffering(m.value, path);
    if (!offering.ok()) return offering.status();
    if (!out.emplace(name, *std::move(offering)).second) return Bad(path, "appears twice");
  }
  return out;
}

}  // namespace gse
