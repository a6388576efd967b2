// Decoding of resource.k8s.io/v1 objects (dra_objects.h).
//
// The field readers are those of state/k8s_objects.cc, shared through state/json_fields.h (a
// lazily rendered JSON path, one pass per object with duplicate keys refused, nulls as absent).
#include "state/dra_objects.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "state/catalog.h"
#include "state/json_fields.h"
#include "state/json_reader.h"
#include "state/k8s_objects.h"
#include "state/quantity.h"

namespace gse {

const DraAttribute* DraDevice::Attribute(absl::string_view domain, absl::string_view name) const {
  auto it = attributes.find(absl::StrCat(domain, "/", name));
  return it == attributes.end() ? nullptr : &it->second;
}

namespace {

using rapidjson::SizeType;
using rapidjson::Value;
using json_fields::CheckName;
using json_fields::Error;
using json_fields::GetFields;
using json_fields::OptionalObject;
using json_fields::Path;
using json_fields::Quote;
using json_fields::ReadArray;
using json_fields::ReadBool;
using json_fields::ReadInt64;
using json_fields::ReadName;
using json_fields::ReadQuantity;
using json_fields::ReadString;
using json_fields::RequireObject;
using json_fields::Str;
using json_fields::TypeName;
using json_fields::WrongType;

// A driver name is a DNS subdomain of at most 63 bytes ("gpu.nvidia.com"): it contains dots
// but never '/'.
absl::Status ReadDriver(const Value* v, const Path& path, std::string* out) {
  GSE_RETURN_IF_ERROR(ReadName(v, path, kDraMaxDriverBytes, out));
  for (char c : *out) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.')) {
      return Error(path, absl::StrCat(Quote(*out), " is not a DNS subdomain"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadQuantityMap(const Value* v, const Path& path, size_t max,
                             std::map<std::string, int64_t>* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsObject()) return WrongType(path, "an object", *v);
  if (v->MemberCount() > max) {
    return Error(path, absl::StrCat(v->MemberCount(), " entries, at most ", max));
  }
  for (const auto& member : v->GetObject()) {
    const absl::string_view key = Str(member.name);
    const Path p = path.Key(key);
    if (key.empty() || key.size() > kMaxNameBytes) return Error(p, "bad capacity name");
    int64_t milli = 0;
    GSE_RETURN_IF_ERROR(ReadQuantity(member.value, p, &milli));
    if (!out->emplace(std::string(key), milli).second) return Error(p, "duplicate key");
  }
  return absl::OkStatus();
}

struct Meta {
  std::string* name = nullptr;
  std::string* namespace_name = nullptr;  // required when requested
  std::string* uid = nullptr;
  std::string* resource_version = nullptr;
  std::string* creation_timestamp = nullptr;
  bool* terminating = nullptr;
  bool* extended_annotation = nullptr;
  DraDeviceClass* node_label = nullptr;  // DeviceClass: kDraNodeLabelAnnotation
  std::string* owner_pod_name = nullptr;
  std::string* owner_pod_uid = nullptr;
};

absl::Status ReadExtendedAnnotation(const Value* v, const Path& path, bool* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsObject()) return WrongType(path, "an object", *v);
  bool seen = false;
  for (const auto& member : v->GetObject()) {
    if (Str(member.name) != kExtendedResourceClaimAnnotation) continue;
    const Path p = path.Key(kExtendedResourceClaimAnnotation);
    if (seen) return Error(p, "duplicate key");
    seen = true;
    if (!member.value.IsString()) return WrongType(p, "a string", member.value);
    *out = Str(member.value) == "true";
  }
  return absl::OkStatus();
}

// kDraNodeLabelAnnotation of a DeviceClass, leniently (DraDeviceClass::node_label_problem).
void ReadNodeLabelAnnotation(const Value* v, const Path& path, DraDeviceClass* out) {
  if (v == nullptr || !v->IsObject()) return;  // annotations of another type: none of ours
  for (const auto& member : v->GetObject()) {
    if (Str(member.name) != kDraNodeLabelAnnotation) continue;
    const Path key_path = path.Key(kDraNodeLabelAnnotation);
    const std::string where = key_path.Render();
    if (!member.value.IsString()) {
      out->node_label_problem = absl::StrCat(where, ": not a string");
      return;
    }
    const absl::string_view text = Str(member.value);
    const size_t eq = text.find('=');
    if (eq == absl::string_view::npos) {
      out->node_label_problem =
          absl::StrCat(where, ": must be <label key>=<value>, got ", Quote(text));
      return;
    }
    const absl::string_view key = text.substr(0, eq);
    const absl::string_view value = text.substr(eq + 1);
    if (std::string err = QualifiedNameError(key); !err.empty()) {
      out->node_label_problem = absl::StrCat(where, ": label key ", err);
      return;
    }
    if (std::string err = LabelValueError(value); !err.empty()) {
      out->node_label_problem = absl::StrCat(where, ": label value ", err);
      return;
    }
    out->node_label_key = std::string(key);
    out->node_label_value = std::string(value);
    return;
  }
}

// The controller ownerReference, when it is a v1 Pod. Other owners are not ours to read.
absl::Status ReadOwnerPod(const Value* v, const Path& path, std::string* name, std::string* uid) {
  const Value* refs = nullptr;
  GSE_RETURN_IF_ERROR(ReadArray(v, path, 64, "ownerReferences", &refs));
  if (refs == nullptr) return absl::OkStatus();
  bool found = false;
  for (SizeType i = 0; i < refs->Size(); ++i) {
    const Path item_path = path.Index(i);
    const Value& ref = (*refs)[i];
    GSE_RETURN_IF_ERROR(RequireObject(ref, item_path));
    static constexpr absl::string_view kNames[] = {"apiVersion", "kind", "name", "uid",
                                                   "controller"};
    const Value* f[5];
    GSE_RETURN_IF_ERROR(GetFields(ref, item_path, kNames, f));
    bool controller = false;
    const Path controller_path = item_path.Field("controller");
    GSE_RETURN_IF_ERROR(ReadBool(f[4], controller_path, &controller));
    std::string api_version, kind;
    const Path av_path = item_path.Field("apiVersion");
    const Path kind_path = item_path.Field("kind");
    GSE_RETURN_IF_ERROR(ReadString(f[0], av_path, &api_version));
    GSE_RETURN_IF_ERROR(ReadString(f[1], kind_path, &kind));
    if (!controller || api_version != "v1" || kind != "Pod") continue;
    // Kubernetes allows one controller reference; two would leave the owner ambiguous.
    if (found) return Error(item_path, "a second controller reference");
    found = true;
    const Path name_path = item_path.Field("name");
    const Path uid_path = item_path.Field("uid");
    GSE_RETURN_IF_ERROR(ReadName(f[2], name_path, kMaxNameBytes, name));
    if (f[3] == nullptr) return Error(uid_path, "missing");
    GSE_RETURN_IF_ERROR(ReadString(f[3], uid_path, uid));
    if (uid->empty()) return Error(uid_path, "empty");
    if (std::string problem = UidProblem(*uid); !problem.empty()) return Error(uid_path, problem);
  }
  return absl::OkStatus();
}

absl::Status DecodeMeta(const Value* meta, const Path& object_path, const Meta& out) {
  const Path path = object_path.Field("metadata");
  if (meta == nullptr) {
    const Path name_path = path.Field("name");
    return Error(name_path, "missing");
  }
  GSE_RETURN_IF_ERROR(RequireObject(*meta, path));
  static constexpr absl::string_view kNames[] = {
      "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
      "annotations", "ownerReferences"};
  const Value* f[8];
  GSE_RETURN_IF_ERROR(GetFields(*meta, path, kNames, f));
  const Path name_path = path.Field("name");
  GSE_RETURN_IF_ERROR(ReadName(f[0], name_path, kMaxNameBytes, out.name));
  if (out.namespace_name != nullptr) {
    const Path p = path.Field("namespace");
    GSE_RETURN_IF_ERROR(ReadName(f[1], p, kMaxNameBytes, out.namespace_name));
  }
  {
    const Path p = path.Field("uid");
    GSE_RETURN_IF_ERROR(ReadString(f[2], p, out.uid));
    if (std::string problem = UidProblem(*out.uid); !problem.empty()) return Error(p, problem);
  }
  {
    const Path p = path.Field("resourceVersion");
    GSE_RETURN_IF_ERROR(ReadString(f[3], p, out.resource_version));
  }
  if (out.creation_timestamp != nullptr) {
    const Path p = path.Field("creationTimestamp");
    GSE_RETURN_IF_ERROR(ReadString(f[4], p, out.creation_timestamp));
    if (out.creation_timestamp->size() > 64) return Error(p, "longer than 64 bytes");
  }
  if (out.terminating != nullptr && f[5] != nullptr) {
    const Path p = path.Field("deletionTimestamp");
    if (!f[5]->IsString()) return WrongType(p, "a timestamp string", *f[5]);
    *out.terminating = true;
  }
  if (out.extended_annotation != nullptr) {
    const Path p = path.Field("annotations");
    GSE_RETURN_IF_ERROR(ReadExtendedAnnotation(f[6], p, out.extended_annotation));
  }
  if (out.node_label != nullptr) {
    const Path p = path.Field("annotations");
    ReadNodeLabelAnnotation(f[6], p, out.node_label);
  }
  if (out.owner_pod_uid != nullptr) {
    const Path p = path.Field("ownerReferences");
    GSE_RETURN_IF_ERROR(ReadOwnerPod(f[7], p, out.owner_pod_name, out.owner_pod_uid));
  }
  return absl::OkStatus();
}

struct Sections {
  const Value* metadata;
  const Value* spec;
  const Value* status;
};

// Sections of a top-level object; apiVersion, when given, must be resource.k8s.io/v1.
absl::Status GetSections(const Value& value, const Path& path, Sections* out) {
  GSE_RETURN_IF_ERROR(RequireObject(value, path));
  static constexpr absl::string_view kNames[] = {"metadata", "spec", "status", "apiVersion"};
  const Value* f[4];
  GSE_RETURN_IF_ERROR(GetFields(value, path, kNames, f));
  if (f[3] != nullptr) {
    const Path p = path.Field("apiVersion");
    if (!f[3]->IsString()) return WrongType(p, "a string", *f[3]);
    if (Str(*f[3]) != "resource.k8s.io/v1") {
      return Error(p, absl::StrCat(Quote(Str(*f[3])),
                                   " is not resource.k8s.io/v1 (older versions have other shapes)"));
    }
  }
  out->metadata = f[0];
  out->spec = f[1];
  out->status = f[2];
  const Path spec_path = path.Field("spec");
  const Path status_path = path.Field("status");
  GSE_RETURN_IF_ERROR(OptionalObject(out->spec, spec_path));
  GSE_RETURN_IF_ERROR(OptionalObject(out->status, status_path));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// DeviceClass

absl::Status DecodeDeviceClassAt(const Value& value, const Path& path, DraDeviceClass* out) {
  Sections sec;
  GSE_RETURN_IF_ERROR(GetSections(value, path, &sec));
  Meta meta;
  meta.name = &out->name;
  meta.uid = &out->uid;
  meta.resource_version = &out->resource_version;
  meta.creation_timestamp = &out->creation_timestamp;
  meta.node_label = out;
  GSE_RETURN_IF_ERROR(DecodeMeta(sec.metadata, path, meta));
  const Path spec_path = path.Field("spec");
  if (sec.spec == nullptr) return absl::OkStatus();  // a class without selectors takes all
  static constexpr absl::string_view kNames[] = {"selectors", "extendedResourceName"};
  const Value* f[2];
  GSE_RETURN_IF_ERROR(GetFields(*sec.spec, spec_path, kNames, f));
  const Path sel_path = spec_path.Field("selectors");
  const Value* selectors = nullptr;
  GSE_RETURN_IF_ERROR(ReadArray(f[0], sel_path, kDraMaxSelectors, "selectors", &selectors));
  if (selectors != nullptr) {
    for (SizeType i = 0; i < selectors->Size(); ++i) {
      const Path item_path = sel_path.Index(i);
      const Value& item = (*selectors)[i];
      GSE_RETURN_IF_ERROR(RequireObject(item, item_path));
      static constexpr absl::string_view kSel[] = {"cel"};
      const Value* s[1];
      GSE_RETURN_IF_ERROR(GetFields(item, item_path, kSel, s));
      if (s[0] == nullptr) {
        ++out->other_selectors;
        continue;
      }
      const Path cel_path = item_path.Field("cel");
      GSE_RETURN_IF_ERROR(RequireObject(*s[0], cel_path));
      static constexpr absl::string_view kCel[] = {"expression"};
      const Value* e[1];
      GSE_RETURN_IF_ERROR(GetFields(*s[0], cel_path, kCel, e));
      const Path expr_path = cel_path.Field("expression");
      if (e[0] == nullptr) return Error(expr_path, "missing");
      if (!e[0]->IsString()) return WrongType(expr_path, "a string", *e[0]);
      if (e[0]->GetStringLength() == 0) return Error(expr_path, "empty");
      if (e[0]->GetStringLength() > kDraMaxCelBytes) {
        return Error(expr_path, absl::StrCat(e[0]->GetStringLength(), " bytes, at most ",
                                             kDraMaxCelBytes));
      }
      out->cel_selectors.emplace_back(Str(*e[0]));
    }
  }
  const Path ern_path = spec_path.Field("extendedResourceName");
  GSE_RETURN_IF_ERROR(ReadString(f[1], ern_path, &out->extended_resource_name));
  if (f[1] != nullptr && out->extended_resource_name.empty()) return Error(ern_path, "empty");
  if (out->extended_resource_name.size() > kMaxNameBytes) {
    return Error(ern_path, absl::StrCat("longer than ", kMaxNameBytes, " bytes"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// ResourceSlice

absl::Status DecodeAttribute(const Value& v, const Path& path, DraAttribute* out) {
  GSE_RETURN_IF_ERROR(RequireObject(v, path));
  static constexpr absl::string_view kNames[] = {"int", "bool", "string", "version"};
  const Value* f[4];
  GSE_RETURN_IF_ERROR(GetFields(v, path, kNames, f));
  int set = 0;
  for (const Value* x : f) set += x != nullptr;
  if (set != 1) {
    return Error(path, absl::StrCat("exactly one of int, bool, string, version must be set, got ",
                                    set, " (list attributes are not supported)"));
  }
  if (f[0] != nullptr) {
    out->kind = DraAttribute::kInt;
    const Path p = path.Field("int");
    return ReadInt64(f[0], p, &out->int_value);
  }
  if (f[1] != nullptr) {
    out->kind = DraAttribute::kBool;
    const Path p = path.Field("bool");
    return ReadBool(f[1], p, &out->bool_value);
  }
  const int k = f[2] != nullptr ? 2 : 3;
  out->kind = k == 2 ? DraAttribute::kString : DraAttribute::kVersion;
  const Path p = path.Field(kNames[k]);
  GSE_RETURN_IF_ERROR(ReadString(f[k], p, &out->text));
  if (out->text.size() > kDraMaxAttributeValueBytes) {
    return Error(p, absl::StrCat(Quote(out->text), " is longer than ",
                                 kDraMaxAttributeValueBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status DecodeCapacity(const Value& v, const Path& path, DraCapacity* out) {
  GSE_RETURN_IF_ERROR(RequireObject(v, path));
  static constexpr absl::string_view kNames[] = {"value", "requestPolicy"};
  const Value* f[2];
  GSE_RETURN_IF_ERROR(GetFields(v, path, kNames, f));
  const Path value_path = path.Field("value");
  if (f[0] == nullptr) return Error(value_path, "missing");
  GSE_RETURN_IF_ERROR(ReadQuantity(*f[0], value_path, &out->value_milli));
  if (f[1] == nullptr) return absl::OkStatus();
  const Path pol_path = path.Field("requestPolicy");
  GSE_RETURN_IF_ERROR(RequireObject(*f[1], pol_path));
  out->has_policy = true;
  static constexpr absl::string_view kPol[] = {"default", "validValues", "validRange"};
  const Value* p[3];
  GSE_RETURN_IF_ERROR(GetFields(*f[1], pol_path, kPol, p));
  if (p[0] != nullptr) {
    const Path d = pol_path.Field("default");
    int64_t x = 0;
    GSE_RETURN_IF_ERROR(ReadQuantity(*p[0], d, &x));
    out->default_milli = x;
  }
  if (p[1] != nullptr && p[2] != nullptr) {
    return Error(pol_path, "validValues and validRange are mutually exclusive");
  }
  if (p[1] != nullptr) {
    const Path vv = pol_path.Field("validValues");
    const Value* values = nullptr;
    GSE_RETURN_IF_ERROR(ReadArray(p[1], vv, 10, "values", &values));
    for (SizeType i = 0; i < values->Size(); ++i) {
      const Path ip = vv.Index(i);
      int64_t x = 0;
      GSE_RETURN_IF_ERROR(ReadQuantity((*values)[i], ip, &x));
      out->valid_values_milli.push_back(x);
    }
  }
  if (p[2] != nullptr) {
    const Path rp = pol_path.Field("validRange");
    GSE_RETURN_IF_ERROR(RequireObject(*p[2], rp));
    static constexpr absl::string_view kRange[] = {"min", "max", "step"};
    const Value* r[3];
    GSE_RETURN_IF_ERROR(GetFields(*p[2], rp, kRange, r));
    std::optional<int64_t>* dest[3] = {&out->range_min_milli, &out->range_max_milli,
                                       &out->range_step_milli};
    for (int k = 0; k < 3; ++k) {
      if (r[k] == nullptr) continue;
      const Path kp = rp.Field(kRange[k]);
      int64_t x = 0;
      GSE_RETURN_IF_ERROR(ReadQuantity(*r[k], kp, &x));
      *dest[k] = x;
    }
    const Path min_path = rp.Field("min");
    if (!out->range_min_milli) return Error(min_path, "missing");
  }
  return absl::OkStatus();
}

absl::Status DecodeDeviceTaints(const Value* v, const Path& path, std::vector<DraDeviceTaint>* out) {
  const Value* taints = nullptr;
  GSE_RETURN_IF_ERROR(ReadArray(v, path, kDraMaxTaintsPerDevice, "taints", &taints));
  if (taints == nullptr) return absl::OkStatus();
  for (SizeType i = 0; i < taints->Size(); ++i) {
    const Path ip = path.Index(i);
    const Value& t = (*taints)[i];
    GSE_RETURN_IF_ERROR(RequireObject(t, ip));
    static constexpr absl::string_view kNames[] = {"key", "value", "effect"};
    const Value* f[3];
    GSE_RETURN_IF_ERROR(GetFields(t, ip, kNames, f));
    DraDeviceTaint taint;
    const Path key_path = ip.Field("key");
    const Path value_path = ip.Field("value");
    const Path effect_path = ip.Field("effect");
    if (f[0] == nullptr) return Error(key_path, "missing");
    GSE_RETURN_IF_ERROR(ReadString(f[0], key_path, &taint.key));
    GSE_RETURN_IF_ERROR(ReadString(f[1], value_path, &taint.value));
    if (f[2] == nullptr) return Error(effect_path, "missing");
    GSE_RETURN_IF_ERROR(ReadString(f[2], effect_path, &taint.effect));
    if (taint.effect != "None" && taint.effect != "NoSchedule" && taint.effect != "NoExecute") {
      return Error(effect_path, absl::StrCat(Quote(taint.effect),
                                             " is not None, NoSchedule or NoExecute"));
    }
    out->push_back(std::move(taint));
  }
  return absl::OkStatus();
}

// An attribute or capacity name: an identifier, optionally qualified by a domain
// ("resource.kubernetes.io/pciBusID"). Returns it qualified with `driver` when it is not.
absl::Status QualifiedName(absl::string_view key, const Path& path, absl::string_view driver,
                           std::string* out) {
  if (key.empty()) return Error(path, "empty attribute name");
  const size_t slash = key.find('/');
  absl::string_view domain = driver, name = key;
  if (slash != absl::string_view::npos) {
    domain = key.substr(0, slash);
    name = key.substr(slash + 1);
    if (domain.empty() || domain.size() > 63) return Error(path, "bad attribute domain");
  }
  if (name.empty() || name.size() > 32) {
    return Error(path, "attribute name must be a C identifier of at most 32 bytes");
  }
  if (!(absl::ascii_isalpha(name[0]) || name[0] == '_')) {
    return Error(path, "attribute name must be a C identifier");
  }
  for (char c : name) {
    if (!(absl::ascii_isalnum(c) || c == '_')) {
      return Error(path, "attribute name must be a C identifier");
    }
  }
  for (char c : domain) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.')) {
      return Error(path, "attribute domain must be a DNS subdomain");
    }
  }
  *out = absl::StrCat(domain, "/", name);
  return absl::OkStatus();
}

absl::Status DecodeDevice(const Value& v, const Path& path, const std::string& driver,
                          DraDevice* out) {
  GSE_RETURN_IF_ERROR(RequireObject(v, path));
  static constexpr absl::string_view kNames[] = {
      "name", "attributes", "capacity", "allowMultipleAllocations", "consumesCounters", "taints",
      "nodeName", "nodeSelector", "allNodes", "bindsToNode", "bindingConditions"};
  const Value* f[11];
  GSE_RETURN_IF_ERROR(GetFields(v, path, kNames, f));
  const Path name_path = path.Field("name");
  GSE_RETURN_IF_ERROR(ReadName(f[0], name_path, kDraMaxDeviceNameBytes, &out->name));
  const Path attr_path = path.Field("attributes");
  const Path cap_path = path.Field("capacity");
  GSE_RETURN_IF_ERROR(OptionalObject(f[1], attr_path));
  GSE_RETURN_IF_ERROR(OptionalObject(f[2], cap_path));
  const size_t entries = (f[1] ? f[1]->MemberCount() : 0) + (f[2] ? f[2]->MemberCount() : 0);
  if (entries > kDraMaxAttributesAndCapacities) {
    return Error(path, absl::StrCat(entries, " attributes and capacities, at most ",
                                    kDraMaxAttributesAndCapacities));
  }
  if (f[1] != nullptr) {
    for (const auto& m : f[1]->GetObject()) {
      const Path p = attr_path.Key(Str(m.name));
      std::string qualified;
      GSE_RETURN_IF_ERROR(QualifiedName(Str(m.name), p, driver, &qualified));
      DraAttribute attr;
      GSE_RETURN_IF_ERROR(DecodeAttribute(m.value, p, &attr));
      // "type" and "gpu.nvidia.com/type" are one attribute of a gpu.nvidia.com device.
      if (!out->attributes.emplace(std::move(qualified), std::move(attr)).second) {
        return Error(p, "duplicate attribute");
      }
    }
  }
  if (f[2] != nullptr) {
    for (const auto& m : f[2]->GetObject()) {
      const Path p = cap_path.Key(Str(m.name));
      std::string qualified;
      GSE_RETURN_IF_ERROR(QualifiedName(Str(m.name), p, driver, &qualified));
      DraCapacity cap;
      GSE_RETURN_IF_ERROR(DecodeCapacity(m.value, p, &cap));
      // Capacities are keyed as sent (results' consumedCapacity uses the same names).
      if (!out->capacity.emplace(std::string(Str(m.name)), std::move(cap)).second) {
        return Error(p, "duplicate capacity");
      }
    }
  }
  const Path multi_path = path.Field("allowMultipleAllocations");
  GSE_RETURN_IF_ERROR(ReadBool(f[3], multi_path, &out->allow_multiple_allocations));
  if (!out->allow_multiple_allocations) {
    for (const auto& [name, cap] : out->capacity) {
      if (cap.has_policy) {
        const Path p = cap_path.Key(name);
        return Error(p, "requestPolicy needs allowMultipleAllocations: true");
      }
    }
  }
  const Path counters_path = path.Field("consumesCounters");
  const Value* counters = nullptr;
  GSE_RETURN_IF_ERROR(
      ReadArray(f[4], counters_path, kDraMaxCountersPerDevice, "counter sets", &counters));
  if (counters != nullptr) out->consumes_counters = static_cast<int>(counters->Size());
  const Path taints_path = path.Field("taints");
  GSE_RETURN_IF_ERROR(DecodeDeviceTaints(f[5], taints_path, &out->taints));
  const Path node_path = path.Field("nodeName");
  GSE_RETURN_IF_ERROR(ReadString(f[6], node_path, &out->node_name));
  out->node_selector = f[7] != nullptr;
  const Path all_path = path.Field("allNodes");
  GSE_RETURN_IF_ERROR(ReadBool(f[8], all_path, &out->all_nodes));
  const Path binds_path = path.Field("bindsToNode");
  GSE_RETURN_IF_ERROR(ReadBool(f[9], binds_path, &out->binds_to_node));
  out->binding_conditions = f[10] != nullptr && f[10]->IsArray() && f[10]->Size() > 0;
  return absl::OkStatus();
}

absl::Status DecodeResourceSliceAt(const Value& value, const Path& path, DraResourceSlice* out) {
  Sections sec;
  GSE_RETURN_IF_ERROR(GetSections(value, path, &sec));
  Meta meta;
  meta.name = &out->name;
  meta.uid = &out->uid;
  meta.resource_version = &out->resource_version;
  GSE_RETURN_IF_ERROR(DecodeMeta(sec.metadata, path, meta));
  const Path spec_path = path.Field("spec");
  if (sec.spec == nullptr) return Error(spec_path, "missing");
  static constexpr absl::string_view kNames[] = {
      "driver", "pool", "nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection",
      "devices", "sharedCounters"};
  const Value* f[8];
  GSE_RETURN_IF_ERROR(GetFields(*sec.spec, spec_path, kNames, f));
  const Path driver_path = spec_path.Field("driver");
  GSE_RETURN_IF_ERROR(ReadDriver(f[0], driver_path, &out->driver));

  const Path pool_path = spec_path.Field("pool");
  if (f[1] == nullptr) return Error(pool_path, "missing");
  GSE_RETURN_IF_ERROR(RequireObject(*f[1], pool_path));
  static constexpr absl::string_view kPool[] = {"name", "generation", "resourceSliceCount"};
  const Value* p[3];
  GSE_RETURN_IF_ERROR(GetFields(*f[1], pool_path, kPool, p));
  const Path pool_name_path = pool_path.Field("name");
  // A pool name may hold '/' segments (each a DNS subdomain); keys join it with '|'.
  if (p[0] == nullptr) return Error(pool_name_path, "missing");
  GSE_RETURN_IF_ERROR(ReadString(p[0], pool_name_path, &out->pool_name));
  if (out->pool_name.empty()) return Error(pool_name_path, "empty");
  if (out->pool_name.size() > kMaxNameBytes) {
    return Error(pool_name_path, absl::StrCat("longer than ", kMaxNameBytes, " bytes"));
  }
  for (char c : out->pool_name) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '/' || c == '_')) {
      return Error(pool_name_path, absl::StrCat(Quote(out->pool_name), " is not a pool name"));
    }
  }
  const Path gen_path = pool_path.Field("generation");
  const Path count_path = pool_path.Field("resourceSliceCount");
  if (p[1] == nullptr) return Error(gen_path, "missing");
  GSE_RETURN_IF_ERROR(ReadInt64(p[1], gen_path, &out->pool_generation));
  if (out->pool_generation < 0) return Error(gen_path, "negative");
  if (p[2] == nullptr) return Error(count_path, "missing");
  GSE_RETURN_IF_ERROR(ReadInt64(p[2], count_path, &out->resource_slice_count));
  if (out->resource_slice_count < 1) return Error(count_path, "must be at least 1");

  const Path node_path = spec_path.Field("nodeName");
  GSE_RETURN_IF_ERROR(ReadString(f[2], node_path, &out->node_name));
  if (f[2] != nullptr) GSE_RETURN_IF_ERROR(CheckName(node_path, out->node_name, kMaxNameBytes));
  out->node_selector = f[3] != nullptr;
  const Path all_path = spec_path.Field("allNodes");
  const Path per_path = spec_path.Field("perDeviceNodeSelection");
  GSE_RETURN_IF_ERROR(ReadBool(f[4], all_path, &out->all_nodes));
  GSE_RETURN_IF_ERROR(ReadBool(f[5], per_path, &out->per_device_node_selection));
  const int node_fields = !out->node_name.empty() + out->node_selector + out->all_nodes +
                          out->per_device_node_selection;
  if (node_fields != 1) {
    return Error(spec_path, absl::StrCat("exactly one of nodeName, nodeSelector, allNodes, "
                                         "perDeviceNodeSelection must be set, got ",
                                         node_fields));
  }

  const Path devices_path = spec_path.Field("devices");
  const Value* devices = nullptr;
  GSE_RETURN_IF_ERROR(ReadArray(f[6], devices_path, kDraMaxDevicesPerSlice, "devices", &devices));
  const Path counters_path = spec_path.Field("sharedCounters");
  const Value* counters = nullptr;
  GSE_RETURN_IF_ERROR(
      ReadArray(f[7], counters_path, kDraMaxSharedCounters, "counter sets", &counters));
  if (counters != nullptr) out->shared_counters = static_cast<int>(counters->Size());
  if (devices != nullptr && devices->Size() > 0 && out->shared_counters > 0) {
    return Error(spec_path, "devices and sharedCounters are mutually exclusive");
  }
  if (devices != nullptr) {
    out->devices.reserve(devices->Size());
    for (SizeType i = 0; i < devices->Size(); ++i) {
      const Path ip = devices_path.Index(i);
      DraDevice device;
      GSE_RETURN_IF_ERROR(DecodeDevice((*devices)[i], ip, out->driver, &device));
      for (const DraDevice& other : out->devices) {
        if (other.name == device.name) {
          const Path np = ip.Field("name");
          return Error(np, absl::StrCat(Quote(device.name), " repeats a device of this slice"));
        }
      }
      const bool per_device = !device.node_name.empty() || device.node_selector || device.all_nodes;
      if (per_device != out->per_device_node_selection) {
        return Error(ip, out->per_device_node_selection
                             ? "perDeviceNodeSelection needs nodeName, nodeSelector or allNodes"
                             : "per-device node fields need spec.perDeviceNodeSelection");
      }
      out->devices.push_back(std::move(device));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// ResourceClaim

absl::Status DecodeRequest(const Value& v, const Path& path, DraDeviceRequest* out) {
  GSE_RETURN_IF_ERROR(RequireObject(v, path));
  static constexpr absl::string_view kNames[] = {"name", "exactly", "firstAvailable"};
  const Value* f[3];
  GSE_RETURN_IF_ERROR(GetFields(v, path, kNames, f));
  const Path name_path = path.Field("name");
  GSE_RETURN_IF_ERROR(ReadName(f[0], name_path, kDraMaxDeviceNameBytes, &out->name));
  if ((f[1] != nullptr) == (f[2] != nullptr)) {
    return Error(path, "exactly one of exactly, firstAvailable must be set");
  }
  if (f[2] != nullptr) {
    out->first_available = true;
    const Path fa = path.Field("firstAvailable");
    if (!f[2]->IsArray()) return WrongType(fa, "an array", *f[2]);
    return absl::OkStatus();
  }
  const Path ex = path.Field("exactly");
  GSE_RETURN_IF_ERROR(RequireObject(*f[1], ex));
  static constexpr absl::string_view kEx[] = {"deviceClassName", "selectors", "allocationMode",
                                              "count", "adminAccess", "capacity"};
  const Value* e[6];
  GSE_RETURN_IF_ERROR(GetFields(*f[1], ex, kEx, e));
  const Path class_path = ex.Field("deviceClassName");
  GSE_RETURN_IF_ERROR(ReadName(e[0], class_path, kMaxNameBytes, &out->device_class_name));
  const Path sel_path = ex.Field("selectors");
  const Value* selectors = nullptr;
  GSE_RETURN_IF_ERROR(ReadArray(e[1], sel_path, kDraMaxSelectors, "selectors", &selectors));
  if (selectors != nullptr) out->selectors = static_cast<int>(selectors->Size());
  const Path mode_path = ex.Field("allocationMode");
  GSE_RETURN_IF_ERROR(ReadString(e[2], mode_path, &out->allocation_mode));
  if (out->allocation_mode != "ExactCount" && out->allocation_mode != "All") {
    return Error(mode_path, absl::StrCat(Quote(out->allocation_mode), " is not ExactCount or All"));
  }
  const Path count_path = ex.Field("count");
  GSE_RETURN_IF_ERROR(ReadInt64(e[3], count_path, &out->count));
  if (out->allocation_mode == "ExactCount" && (out->count < 1 || out->count > 128)) {
    return Error(count_path, absl::StrCat(out->count, " is outside 1..128"));
  }
  const Path admin_path = ex.Field("adminAccess");
  GSE_RETURN_IF_ERROR(ReadBool(e[4], admin_path, &out->admin_access));
  if (e[5] != nullptr) {
    const Path cap = ex.Field("capacity");
    GSE_RETURN_IF_ERROR(RequireObject(*e[5], cap));
    static constexpr absl::string_view kCap[] = {"requests"};
    const Value* c[1];
    GSE_RETURN_IF_ERROR(GetFields(*e[5], cap, kCap, c));
    const Path req = cap.Field("requests");
    GSE_RETURN_IF_ERROR(ReadQuantityMap(c[0], req, kDraMaxAttributesAndCapacities,
                                        &out->capacity_requests_milli));
  }
  return absl::OkStatus();
}

absl::Status DecodeResult(const Value& v, const Path& path, DraAllocationResult* out) {
  GSE_RETURN_IF_ERROR(RequireObject(v, path));
  static constexpr absl::string_view kNames[] = {"request", "driver", "pool", "device",
                                                 "adminAccess", "shareID", "consumedCapacity"};
  const Value* f[7];
  GSE_RETURN_IF_ERROR(GetFields(v, path, kNames, f));
  const Path request_path = path.Field("request");
  if (f[0] == nullptr) return Error(request_path, "missing");
  GSE_RETURN_IF_ERROR(ReadString(f[0], request_path, &out->request));
  if (out->request.empty() || out->request.size() > 2 * kDraMaxDeviceNameBytes + 1) {
    return Error(request_path, "not a request name");
  }
  const Path driver_path = path.Field("driver");
  GSE_RETURN_IF_ERROR(ReadDriver(f[1], driver_path, &out->driver));
  const Path pool_path = path.Field("pool");
  if (f[2] == nullptr) return Error(pool_path, "missing");
  GSE_RETURN_IF_ERROR(ReadString(f[2], pool_path, &out->pool));
  if (out->pool.empty() || out->pool.size() > kMaxNameBytes) return Error(pool_path, "not a pool name");
  const Path device_path = path.Field("device");
  GSE_RETURN_IF_ERROR(ReadName(f[3], device_path, kDraMaxDeviceNameBytes, &out->device));
  const Path admin_path = path.Field("adminAccess");
  GSE_RETURN_IF_ERROR(ReadBool(f[4], admin_path, &out->admin_access));
  const Path share_path = path.Field("shareID");
  GSE_RETURN_IF_ERROR(ReadString(f[5], share_path, &out->share_id));
  if (out->share_id.size() > 64) return Error(share_path, "longer than 64 bytes");
  const Path cc_path = path.Field("consumedCapacity");
  GSE_RETURN_IF_ERROR(ReadQuantityMap(f[6], cc_path, kDraMaxAttributesAndCapacities,
                                      &out->consumed_capacity_milli));
  return absl::OkStatus();
}

// The node of the allocator's nodeSelector: one term, one matchFields metadata.name In [node].
void ReadAllocationNode(const Value* sel, std::string* out) {
  if (sel == nullptr || !sel->IsObject()) return;
  auto terms = sel->FindMember("nodeSelectorTerms");
  if (terms == sel->MemberEnd() || !terms->value.IsArray() || terms->value.Size() != 1) return;
  const Value& term = terms->value[0];
  if (!term.IsObject()) return;
  auto fields = term.FindMember("matchFields");
  if (fields == term.MemberEnd() || !fields->value.IsArray() || fields->value.Size() != 1) return;
  const Value& req = fields->value[0];
  if (!req.IsObject()) return;
  auto key = req.FindMember("key");
  auto op = req.FindMember("operator");
  auto values = req.FindMember("values");
  if (key == req.MemberEnd() || op == req.MemberEnd() || values == req.MemberEnd()) return;
  if (!key->value.IsString() || Str(key->value) != "metadata.name") return;
  if (!op->value.IsString() || Str(op->value) != "In") return;
  if (!values->value.IsArray() || values->value.Size() != 1 || !values->value[0].IsString()) return;
  const absl::string_view node = Str(values->value[0]);
  if (node.empty() || node.size() > kMaxNameBytes) return;
  out->assign(node.data(), node.size());
}

absl::Status DecodeResourceClaimAt(const Value& value, const Path& path, DraResourceClaim* out) {
  Sections sec;
  GSE_RETURN_IF_ERROR(GetSections(value, path, &sec));
  Meta meta;
  meta.name = &out->name;
  meta.namespace_name = &out->namespace_name;
  meta.uid = &out->uid;
  meta.resource_version = &out->resource_version;
  meta.terminating = &out->terminating;
  meta.extended_annotation = &out->extended_resource_annotation;
  meta.owner_pod_name = &out->owner_pod_name;
  meta.owner_pod_uid = &out->owner_pod_uid;
  GSE_RETURN_IF_ERROR(DecodeMeta(sec.metadata, path, meta));
  const Path spec_path = path.Field("spec");
  if (sec.spec != nullptr) {
    static constexpr absl::string_view kSpec[] = {"devices"};
    const Value* s[1];
    GSE_RETURN_IF_ERROR(GetFields(*sec.spec, spec_path, kSpec, s));
    const Path devices_path = spec_path.Field("devices");
    GSE_RETURN_IF_ERROR(OptionalObject(s[0], devices_path));
    if (s[0] != nullptr) {
      static constexpr absl::string_view kDev[] = {"requests"};
      const Value* d[1];
      GSE_RETURN_IF_ERROR(GetFields(*s[0], devices_path, kDev, d));
      const Path req_path = devices_path.Field("requests");
      const Value* requests = nullptr;
      GSE_RETURN_IF_ERROR(ReadArray(d[0], req_path, kDraMaxRequests, "requests", &requests));
      if (requests != nullptr) {
        for (SizeType i = 0; i < requests->Size(); ++i) {
          const Path ip = req_path.Index(i);
          DraDeviceRequest request;
          GSE_RETURN_IF_ERROR(DecodeRequest((*requests)[i], ip, &request));
          for (const DraDeviceRequest& other : out->requests) {
            if (other.name == request.name) {
              const Path np = ip.Field("name");
              return Error(np, absl::StrCat(Quote(request.name), " repeats a request name"));
            }
          }
          out->requests.push_back(std::move(request));
        }
      }
    }
  }
  if (sec.status == nullptr) return absl::OkStatus();
  const Path status_path = path.Field("status");
  static constexpr absl::string_view kStatus[] = {"allocation", "reservedFor"};
  const Value* st[2];
  GSE_RETURN_IF_ERROR(GetFields(*sec.status, status_path, kStatus, st));
  if (st[0] != nullptr) {
    const Path alloc_path = status_path.Field("allocation");
    GSE_RETURN_IF_ERROR(RequireObject(*st[0], alloc_path));
    out->allocated = true;
    static constexpr absl::string_view kAlloc[] = {"devices", "nodeSelector"};
    const Value* a[2];
    GSE_RETURN_IF_ERROR(GetFields(*st[0], alloc_path, kAlloc, a));
    const Path dev_path = alloc_path.Field("devices");
    GSE_RETURN_IF_ERROR(OptionalObject(a[0], dev_path));
    if (a[0] != nullptr) {
      static constexpr absl::string_view kDev[] = {"results"};
      const Value* r[1];
      GSE_RETURN_IF_ERROR(GetFields(*a[0], dev_path, kDev, r));
      const Path res_path = dev_path.Field("results");
      const Value* results = nullptr;
      GSE_RETURN_IF_ERROR(ReadArray(r[0], res_path, kDraMaxResults, "results", &results));
      if (results != nullptr) {
        for (SizeType i = 0; i < results->Size(); ++i) {
          const Path ip = res_path.Index(i);
          DraAllocationResult result;
          GSE_RETURN_IF_ERROR(DecodeResult((*results)[i], ip, &result));
          out->results.push_back(std::move(result));
        }
      }
    }
    const Path ns_path = alloc_path.Field("nodeSelector");
    GSE_RETURN_IF_ERROR(OptionalObject(a[1], ns_path));
    ReadAllocationNode(a[1], &out->allocation_node);
  }
  const Path rf_path = status_path.Field("reservedFor");
  const Value* reserved = nullptr;
  GSE_RETURN_IF_ERROR(ReadArray(st[1], rf_path, kDraMaxReservedFor, "consumers", &reserved));
  if (reserved != nullptr) {
    for (SizeType i = 0; i < reserved->Size(); ++i) {
      const Path ip = rf_path.Index(i);
      const Value& item = (*reserved)[i];
      GSE_RETURN_IF_ERROR(RequireObject(item, ip));
      static constexpr absl::string_view kRef[] = {"apiGroup", "resource", "name", "uid"};
      const Value* f[4];
      GSE_RETURN_IF_ERROR(GetFields(item, ip, kRef, f));
      DraConsumerReference ref;
      const Path group_path = ip.Field("apiGroup");
      const Path resource_path = ip.Field("resource");
      const Path name_path = ip.Field("name");
      const Path uid_path = ip.Field("uid");
      GSE_RETURN_IF_ERROR(ReadString(f[0], group_path, &ref.api_group));
      GSE_RETURN_IF_ERROR(ReadName(f[1], resource_path, kMaxNameBytes, &ref.resource));
      GSE_RETURN_IF_ERROR(ReadName(f[2], name_path, kMaxNameBytes, &ref.name));
      if (f[3] == nullptr) return Error(uid_path, "missing");
      GSE_RETURN_IF_ERROR(ReadString(f[3], uid_path, &ref.uid));
      if (ref.uid.empty()) return Error(uid_path, "empty");
      if (std::string problem = UidProblem(ref.uid); !problem.empty()) return Error(uid_path, problem);
      // reservedFor is keyed by uid (a listMapKey): a repeat is not from an API server.
      for (const DraConsumerReference& other : out->reserved_for) {
        if (other.uid == ref.uid) return Error(uid_path, "repeats a consumer uid");
      }
      out->reserved_for.push_back(std::move(ref));
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeOfKind(absl::string_view kind, const Value& v, const Path& path,
                          DraObjectBatch* batch) {
  if (kind == "DeviceClass") {
    DraDeviceClass c;
    GSE_RETURN_IF_ERROR(DecodeDeviceClassAt(v, path, &c));
    batch->device_classes.push_back(std::move(c));
  } else if (kind == "ResourceSlice") {
    DraResourceSlice s;
    GSE_RETURN_IF_ERROR(DecodeResourceSliceAt(v, path, &s));
    batch->resource_slices.push_back(std::move(s));
  } else if (kind == "ResourceClaim") {
    DraResourceClaim c;
    GSE_RETURN_IF_ERROR(DecodeResourceClaimAt(v, path, &c));
    batch->resource_claims.push_back(std::move(c));
  } else {
    ++batch->ignored_objects;
  }
  return absl::OkStatus();
}

bool ListElementKind(absl::string_view kind, absl::string_view* element) {
  if (kind == "List") {
    *element = "";
    return true;
  }
  if (kind.size() > 4 && absl::EndsWith(kind, "List")) {
    *element = kind.substr(0, kind.size() - 4);
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<DraDeviceClass> DecodeDeviceClass(const Value& value, absl::string_view path) {
  DraDeviceClass out;
  const Path root(path);
  GSE_RETURN_IF_ERROR(DecodeDeviceClassAt(value, root, &out));
  return out;
}

absl::StatusOr<DraResourceSlice> DecodeResourceSlice(const Value& value, absl::string_view path) {
  DraResourceSlice out;
  const Path root(path);
  GSE_RETURN_IF_ERROR(DecodeResourceSliceAt(value, root, &out));
  return out;
}

absl::StatusOr<DraResourceClaim> DecodeResourceClaim(const Value& value, absl::string_view path) {
  DraResourceClaim out;
  const Path root(path);
  GSE_RETURN_IF_ERROR(DecodeResourceClaimAt(value, root, &out));
  return out;
}

absl::StatusOr<std::optional<DraExtendedResourceClaimStatus>> DecodeExtendedResourceClaimStatus(
    const Value& pod, absl::string_view path) {
  const Path root(path);
  GSE_RETURN_IF_ERROR(RequireObject(pod, root));
  static constexpr absl::string_view kPod[] = {"status"};
  const Value* p[1];
  GSE_RETURN_IF_ERROR(GetFields(pod, root, kPod, p));
  if (p[0] == nullptr) return std::nullopt;
  const Path status_path = root.Field("status");
  GSE_RETURN_IF_ERROR(RequireObject(*p[0], status_path));
  static constexpr absl::string_view kStatus[] = {"extendedResourceClaimStatus"};
  const Value* s[1];
  GSE_RETURN_IF_ERROR(GetFields(*p[0], status_path, kStatus, s));
  if (s[0] == nullptr) return std::nullopt;
  const Path erc_path = status_path.Field("extendedResourceClaimStatus");
  GSE_RETURN_IF_ERROR(RequireObject(*s[0], erc_path));
  static constexpr absl::string_view kErc[] = {"requestMappings", "resourceClaimName"};
  const Value* e[2];
  GSE_RETURN_IF_ERROR(GetFields(*s[0], erc_path, kErc, e));
  DraExtendedResourceClaimStatus out;
  const Path claim_path = erc_path.Field("resourceClaimName");
  GSE_RETURN_IF_ERROR(ReadName(e[1], claim_path, kMaxNameBytes, &out.resource_claim_name));
  const Path rm_path = erc_path.Field("requestMappings");
  const Value* mappings = nullptr;
  GSE_RETURN_IF_ERROR(
      ReadArray(e[0], rm_path, kDraMaxRequestMappings, "request mappings", &mappings));
  if (mappings == nullptr) return Error(rm_path, "missing");
  for (SizeType i = 0; i < mappings->Size(); ++i) {
    const Path ip = rm_path.Index(i);
    const Value& item = (*mappings)[i];
    GSE_RETURN_IF_ERROR(RequireObject(item, ip));
    static constexpr absl::string_view kMap[] = {"containerName", "resourceName", "requestName"};
    const Value* f[3];
    GSE_RETURN_IF_ERROR(GetFields(item, ip, kMap, f));
    DraExtendedResourceClaimStatus::RequestMapping m;
    const Path c = ip.Field("containerName");
    const Path r = ip.Field("resourceName");
    const Path q = ip.Field("requestName");
    GSE_RETURN_IF_ERROR(ReadName(f[0], c, kMaxNameBytes, &m.container_name));
    // Resource names hold a '/': checked for length and emptiness only.
    if (f[1] == nullptr) return Error(r, "missing");
    GSE_RETURN_IF_ERROR(ReadString(f[1], r, &m.resource_name));
    if (m.resource_name.empty() || m.resource_name.size() > kMaxNameBytes) {
      return Error(r, "not a resource name");
    }
    GSE_RETURN_IF_ERROR(ReadName(f[2], q, kDraMaxDeviceNameBytes, &m.request_name));
    out.request_mappings.push_back(std::move(m));
  }
  return std::optional<DraExtendedResourceClaimStatus>(std::move(out));
}

absl::StatusOr<DraObjectBatch> DecodeDraObjects(absl::string_view json) {
  GSE_RETURN_IF_ERROR(CheckJsonSize(json.size()));
  rapidjson::Document doc;
  GSE_RETURN_IF_ERROR(ParseJsonLimited(json, doc));
  if (!doc.IsObject()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a JSON object at the top level, got ", TypeName(doc)));
  }
  const Path root("");
  static constexpr absl::string_view kNames[] = {"kind", "items"};
  const Value* f[2];
  GSE_RETURN_IF_ERROR(GetFields(doc, root, kNames, f));
  const Path kind_path = root.Field("kind");
  if (f[0] == nullptr) return Error(kind_path, "missing");
  if (!f[0]->IsString()) return WrongType(kind_path, "a string", *f[0]);
  const absl::string_view kind = Str(*f[0]);
  DraObjectBatch batch;
  absl::string_view element_kind;
  if (!ListElementKind(kind, &element_kind)) {
    const Path object_root(kind);
    GSE_RETURN_IF_ERROR(DecodeOfKind(kind, doc, object_root, &batch));
    return batch;
  }
  const Path items_path = root.Field("items");
  if (f[1] == nullptr) return batch;
  if (!f[1]->IsArray()) return WrongType(items_path, "an array", *f[1]);
  for (SizeType i = 0; i < f[1]->Size(); ++i) {
    const Path ip = items_path.Index(i);
    const Value& item = (*f[1])[i];
    GSE_RETURN_IF_ERROR(RequireObject(item, ip));
    static constexpr absl::string_view kItem[] = {"kind"};
    const Value* k[1];
    GSE_RETURN_IF_ERROR(GetFields(item, ip, kItem, k));
    const Path ikp = ip.Field("kind");
    absl::string_view item_kind = element_kind;
    if (k[0] != nullptr) {
      if (!k[0]->IsString()) return WrongType(ikp, "a string", *k[0]);
      item_kind = Str(*k[0]);
      absl::string_view ignored;
      if (ListElementKind(item_kind, &ignored)) {
        return Error(ikp, absl::StrCat(Quote(item_kind), " lists may not be nested"));
      }
    }
    if (item_kind.empty()) return Error(ikp, "missing");
    GSE_RETURN_IF_ERROR(DecodeOfKind(item_kind, item, ip, &batch));
  }
  return batch;
}

}  // namespace gse
