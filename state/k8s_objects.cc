// Decoding of Kubernetes objects: strict on the fields we keep, blind to everything else.
//
// How it stays fast on 5,000-node filter requests: each JSON object is walked once, its
// members dispatched by key (no repeated FindMember scans); map keys arrive sorted from Go's
// encoder, so std::map inserts use an end() hint; the JSON path of a field is a chain of
// stack frames that is rendered into a string only when an error is reported.
//
// How it stays safe on hostile bodies: documents come from the strict, limited reader
// (json_reader.h: size, depth, UTF-8, control characters, trailing garbage); a key we read
// that appears twice is an error rather than a silent first-or-last-wins choice.
#include "state/k8s_objects.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/strings/str_cat.h"
#include "state/assignment.h"
#include "state/json_fields.h"
#include "state/quantity.h"

namespace gse {
namespace {

using rapidjson::SizeType;
using rapidjson::Value;
using json_fields::Error;
using json_fields::GetFields;
using json_fields::Path;
using json_fields::Quote;
using json_fields::ReadBool;
using json_fields::ReadQuantity;
using json_fields::ReadString;
using json_fields::RequireObject;
using json_fields::Str;
using json_fields::TypeName;
using json_fields::WrongType;

// ---------------------------------------------------------------------------------------
// Field readers beyond json_fields.h. A null field pointer means "absent or JSON null":
// optional fields take their default.

absl::Status ReadStringMap(const Value* v, const Path& path,
                           std::map<std::string, std::string>* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsObject()) return WrongType(path, "an object", *v);
  for (const auto& member : v->GetObject()) {
    const absl::string_view key = Str(member.name);
    if (!member.value.IsString()) return WrongType(path.Key(key), "a string", member.value);
    const size_t before = out->size();
    out->emplace_hint(out->end(), std::piecewise_construct,
                      std::forward_as_tuple(key.data(), key.size()),
                      std::forward_as_tuple(member.value.GetString(),
                                            member.value.GetStringLength()));
    if (out->size() == before) return Error(path.Key(key), "duplicate key");
  }
  return absl::OkStatus();
}

// Resource lists (allocatable, requests, limits, hard): quantity strings, never negative.
absl::Status ReadQuantityMap(const Value* v, const Path& path,
                             std::map<std::string, int64_t>* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsObject()) return WrongType(path, "an object", *v);
  for (const auto& member : v->GetObject()) {
    const absl::string_view key = Str(member.name);
    const Path key_path = path.Key(key);
    int64_t milli = 0;
    if (absl::Status s = ReadQuantity(member.value, key_path, &milli); !s.ok()) return s;
    const size_t before = out->size();
    out->emplace_hint(out->end(), std::string(key.data(), key.size()), milli);
    if (out->size() == before) return Error(key_path, "duplicate key");
  }
  return absl::OkStatus();
}

// Object names and namespaces, as json_fields::CheckName with the Kubernetes bound.
absl::Status CheckName(const Path& path, absl::string_view name) {
  return json_fields::CheckName(path, name, kMaxNameBytes);
}

}  // namespace

std::string UidProblem(absl::string_view uid) {
  if (uid.size() > kMaxNameBytes) {
    return absl::StrCat(Quote(uid), " is longer than ", kMaxNameBytes, " bytes");
  }
  for (char c : uid) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return absl::StrCat(Quote(uid), " contains a control character");
  }
  return "";
}

std::optional<int> CompareResourceVersions(absl::string_view a, absl::string_view b) {
  auto comparable = [](absl::string_view rv) {
    return !rv.empty() && rv[0] != '0' &&
           std::all_of(rv.begin(), rv.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!comparable(a) || !comparable(b)) return std::nullopt;
  // Without leading zeros, the longer number is the larger; equal lengths compare digit by
  // digit (no parse: the KEP sets no length limit).
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

namespace {

absl::Status ReadName(const Value* v, const Path& path, std::string* out) {
  return json_fields::ReadName(v, path, kMaxNameBytes, out);
}

// The metadata fields any of our kinds keeps; a null pointer means the kind does not keep it.
struct MetaOut {
  std::string* name = nullptr;
  std::string* namespace_name = nullptr;  // required when requested
  std::string* uid = nullptr;
  std::string* resource_version = nullptr;
  std::map<std::string, std::string>* labels = nullptr;
  std::map<std::string, std::string>* annotations = nullptr;
  // Only the node agent's inventory annotation (Nodes keep no other annotation).
  std::optional<std::string>* agent_inventory = nullptr;
  bool* terminating = nullptr;  // deletionTimestamp set
};

absl::Status ReadAgentInventory(const Value* annotations, const Path& path,
                                std::optional<std::string>* out) {
  if (annotations == nullptr) return absl::OkStatus();
  if (!annotations->IsObject()) return WrongType(path, "an object", *annotations);
  const auto it = annotations->FindMember(
      Value(rapidjson::StringRef(kAnnotationInventory.data(), kAnnotationInventory.size())));
  if (it == annotations->MemberEnd()) return absl::OkStatus();
  const Path p = path.Key(kAnnotationInventory);
  if (!it->value.IsString()) return WrongType(p, "a string", it->value);
  if (it->value.GetStringLength() > kMaxInventoryAnnotationBytes) {
    return Error(p, absl::StrCat(it->value.GetStringLength(), " bytes, at most ",
                                 kMaxInventoryAnnotationBytes));
  }
  out->emplace(it->value.GetString(), it->value.GetStringLength());
  return absl::OkStatus();
}

absl::Status DecodeMeta(const Value* meta, const Path& object_path, const MetaOut& out) {
  const Path path = object_path.Field("metadata");
  if (meta == nullptr) {
    const Path name_path = path.Field("name");
    return Error(name_path, "missing");
  }
  if (absl::Status s = RequireObject(*meta, path); !s.ok()) return s;
  static constexpr absl::string_view kNames[] = {
      "name", "namespace", "uid", "resourceVersion", "labels", "annotations",
      "deletionTimestamp"};
  const Value* f[7];
  if (absl::Status s = GetFields(*meta, path, kNames, f); !s.ok()) return s;

  const Path name_path = path.Field("name");
  if (absl::Status s = ReadName(f[0], name_path, out.name); !s.ok()) return s;
  if (out.namespace_name != nullptr) {
    const Path ns_path = path.Field("namespace");
    if (absl::Status s = ReadName(f[1], ns_path, out.namespace_name); !s.ok()) return s;
  }
  if (out.uid != nullptr) {
    const Path p = path.Field("uid");
    if (absl::Status s = ReadString(f[2], p, out.uid); !s.ok()) return s;
    // The mirror identifies pods by UID (cluster_state.h, PodIdOf).
    if (std::string problem = UidProblem(*out.uid); !problem.empty()) return Error(p, problem);
  }
  if (out.resource_version != nullptr) {
    const Path p = path.Field("resourceVersion");
    if (absl::Status s = ReadString(f[3], p, out.resource_version); !s.ok()) return s;
  }
  if (out.labels != nullptr) {
    const Path p = path.Field("labels");
    if (absl::Status s = ReadStringMap(f[4], p, out.labels); !s.ok()) return s;
  }
  if (out.annotations != nullptr) {
    const Path p = path.Field("annotations");
    if (absl::Status s = ReadStringMap(f[5], p, out.annotations); !s.ok()) return s;
  }
  if (out.agent_inventory != nullptr) {
    const Path p = path.Field("annotations");
    if (absl::Status s = ReadAgentInventory(f[5], p, out.agent_inventory); !s.ok()) return s;
  }
  if (out.terminating != nullptr && f[6] != nullptr) {
    const Path p = path.Field("deletionTimestamp");
    if (!f[6]->IsString()) return WrongType(p, "a timestamp string", *f[6]);
    *out.terminating = true;
  }
  return absl::OkStatus();
}

// metadata / spec / status of a top-level object, each an object when present.
struct Sections {
  const Value* metadata;
  const Value* spec;
  const Value* status;
};

absl::Status GetSections(const Value& value, const Path& path, Sections* out) {
  if (absl::Status s = RequireObject(value, path); !s.ok()) return s;
  static constexpr absl::string_view kNames[] = {"metadata", "spec", "status"};
  const Value* f[3];
  if (absl::Status s = GetFields(value, path, kNames, f); !s.ok()) return s;
  out->metadata = f[0];
  out->spec = f[1];
  out->status = f[2];
  if (out->spec != nullptr) {
    const Path p = path.Field("spec");
    if (absl::Status s = RequireObject(*out->spec, p); !s.ok()) return s;
  }
  if (out->status != nullptr) {
    const Path p = path.Field("status");
    if (absl::Status s = RequireObject(*out->status, p); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DecodeTaints(const Value* v, const Path& path,
                          std::vector<NodeObject::Taint>* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsArray()) return WrongType(path, "an array", *v);
  out->reserve(v->Size());
  for (SizeType i = 0; i < v->Size(); ++i) {
    const Path item_path = path.Index(i);
    const Value& item = (*v)[i];
    if (absl::Status s = RequireObject(item, item_path); !s.ok()) return s;
    static constexpr absl::string_view kNames[] = {"key", "value", "effect"};
    const Value* f[3];
    if (absl::Status s = GetFields(item, item_path, kNames, f); !s.ok()) return s;
    NodeObject::Taint taint;
    for (int k = 0; k < 3; ++k) {
      std::string* dest = k == 0 ? &taint.key : k == 1 ? &taint.value : &taint.effect;
      const Path p = item_path.Field(kNames[k]);
      if (absl::Status s = ReadString(f[k], p, dest); !s.ok()) return s;
    }
    out->push_back(std::move(taint));
  }
  return absl::OkStatus();
}

// `init`: initContainers, whose `restartPolicy: Always` marks a sidecar. App containers'
// restartPolicy (container restart rules) changes nothing counted here and is not read.
absl::Status DecodeContainers(const Value* v, const Path& path, bool init,
                              std::vector<ContainerResources>* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsArray()) return WrongType(path, "an array", *v);
  out->reserve(v->Size());
  for (SizeType i = 0; i < v->Size(); ++i) {
    const Path item_path = path.Index(i);
    const Value& item = (*v)[i];
    if (absl::Status s = RequireObject(item, item_path); !s.ok()) return s;
    static constexpr absl::string_view kNames[] = {"name", "resources", "restartPolicy"};
    const Value* f[3];
    if (absl::Status s = GetFields(item, item_path, kNames, f); !s.ok()) return s;
    ContainerResources container;
    const Path name_path = item_path.Field("name");
    if (absl::Status s = ReadString(f[0], name_path, &container.name); !s.ok()) return s;
    if (init && f[2] != nullptr) {
      // The API server admits only "Always" here; any other string is a plain init container.
      std::string policy;
      if (absl::Status s = ReadString(f[2], item_path.Field("restartPolicy"), &policy); !s.ok()) {
        return s;
      }
      container.restartable = policy == "Always";
    }
    if (f[1] != nullptr) {
      const Path res_path = item_path.Field("resources");
      if (absl::Status s = RequireObject(*f[1], res_path); !s.ok()) return s;
      static constexpr absl::string_view kResNames[] = {"requests", "limits"};
      const Value* r[2];
      if (absl::Status s = GetFields(*f[1], res_path, kResNames, r); !s.ok()) return s;
      const Path req_path = res_path.Field("requests");
      if (absl::Status s = ReadQuantityMap(r[0], req_path, &container.requests_milli); !s.ok()) {
        return s;
      }
      const Path lim_path = res_path.Field("limits");
      if (absl::Status s = ReadQuantityMap(r[1], lim_path, &container.limits_milli); !s.ok()) {
        return s;
      }
    }
    out->push_back(std::move(container));
  }
  return absl::OkStatus();
}

absl::Status DecodeRequirement(const Value& item, const Path& path, NodeSelectorRequirement* out) {
  if (absl::Status s = RequireObject(item, path); !s.ok()) return s;
  static constexpr absl::string_view kNames[] = {"key", "operator", "values"};
  const Value* f[3];
  if (absl::Status s = GetFields(item, path, kNames, f); !s.ok()) return s;
  if (absl::Status s = ReadString(f[0], path.Field("key"), &out->key); !s.ok()) return s;
  if (absl::Status s = ReadString(f[1], path.Field("operator"), &out->op); !s.ok()) return s;
  const Path values_path = path.Field("values");
  const Value* values = nullptr;
  if (absl::Status s = json_fields::ReadArray(f[2], values_path, kMaxRequirementValues, "values", &values);
      !s.ok()) {
    return s;
  }
  if (values == nullptr) return absl::OkStatus();
  out->values.reserve(values->Size());
  for (SizeType i = 0; i < values->Size(); ++i) {
    if (!(*values)[i].IsString()) return WrongType(values_path.Index(i), "a string", (*values)[i]);
    out->values.emplace_back(Str((*values)[i]));
  }
  return absl::OkStatus();
}

// The one member of `obj` named `name` (nullptr when absent or null); `obj` nullptr or null
// reads as absent too.
absl::Status OneField(const Value* obj, const Path& path, absl::string_view name, const Value** out) {
  *out = nullptr;
  if (obj == nullptr || obj->IsNull()) return absl::OkStatus();
  if (absl::Status s = RequireObject(*obj, path); !s.ok()) return s;
  const absl::string_view names[] = {name};
  const Value* f[1];
  if (absl::Status s = GetFields(*obj, path, names, f); !s.ok()) return s;
  *out = f[0] != nullptr && f[0]->IsNull() ? nullptr : f[0];
  return absl::OkStatus();
}

absl::Status DecodeTerm(const Value& item, const Path& path, std::vector<NodeSelectorRequirement>* out) {
  if (absl::Status s = RequireObject(item, path); !s.ok()) return s;
  const Value* v = nullptr;
  if (absl::Status s = OneField(&item, path, "matchExpressions", &v); !s.ok()) return s;
  const Path exprs_path = path.Field("matchExpressions");
  const Value* exprs = nullptr;
  if (absl::Status s = json_fields::ReadArray(v, exprs_path, kMaxTermRequirements, "matchExpressions", &exprs);
      !s.ok()) {
    return s;
  }
  if (exprs == nullptr) return absl::OkStatus();
  out->resize(exprs->Size());
  for (SizeType k = 0; k < exprs->Size(); ++k) {
    if (absl::Status s = DecodeRequirement((*exprs)[k], exprs_path.Index(k), &(*out)[k]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// spec.affinity: only nodeAffinity's required terms are kept (PodObject::required_node_terms);
// the other members are skipped unread, as any field we do not keep.
absl::Status DecodeRequiredNodeTerms(const Value* affinity, const Path& path,
                                     std::vector<std::vector<NodeSelectorRequirement>>* out) {
  const Value* node_affinity = nullptr;
  if (absl::Status s = OneField(affinity, path, "nodeAffinity", &node_affinity); !s.ok()) return s;
  const Path na_path = path.Field("nodeAffinity");
  const Value* required = nullptr;
  if (absl::Status s = OneField(node_affinity, na_path, "requiredDuringSchedulingIgnoredDuringExecution", &required);
      !s.ok()) {
    return s;
  }
  const Path req_path = na_path.Field("requiredDuringSchedulingIgnoredDuringExecution");
  const Value* v = nullptr;
  if (absl::Status s = OneField(required, req_path, "nodeSelectorTerms", &v); !s.ok()) return s;
  const Path terms_path = req_path.Field("nodeSelectorTerms");
  const Value* terms = nullptr;
  if (absl::Status s = json_fields::ReadArray(v, terms_path, kMaxNodeSelectorTerms, "nodeSelectorTerms", &terms);
      !s.ok()) {
    return s;
  }
  if (terms == nullptr) return absl::OkStatus();
  out->resize(terms->Size());
  for (SizeType i = 0; i < terms->Size(); ++i) {
    if (absl::Status s = DecodeTerm((*terms)[i], terms_path.Index(i), &(*out)[i]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DecodeNodeAt(const Value& value, const Path& path, NodeObject* node) {
  Sections sec;
  if (absl::Status s = GetSections(value, path, &sec); !s.ok()) return s;
  MetaOut meta;
  meta.name = &node->name;
  meta.uid = &node->uid;
  meta.resource_version = &node->resource_version;
  meta.labels = &node->labels;
  meta.agent_inventory = &node->agent_inventory;
  if (absl::Status s = DecodeMeta(sec.metadata, path, meta); !s.ok()) return s;
  if (sec.spec != nullptr) {
    const Path spec_path = path.Field("spec");
    static constexpr absl::string_view kNames[] = {"unschedulable", "taints"};
    const Value* f[2];
    if (absl::Status s = GetFields(*sec.spec, spec_path, kNames, f); !s.ok()) return s;
    const Path unsched_path = spec_path.Field("unschedulable");
    if (absl::Status s = ReadBool(f[0], unsched_path, &node->unschedulable); !s.ok()) return s;
    const Path taints_path = spec_path.Field("taints");
    if (absl::Status s = DecodeTaints(f[1], taints_path, &node->taints); !s.ok()) return s;
  }
  if (sec.status != nullptr) {
    const Path status_path = path.Field("status");
    static constexpr absl::string_view kNames[] = {"allocatable"};
    const Value* f[1];
    if (absl::Status s = GetFields(*sec.status, status_path, kNames, f); !s.ok()) return s;
    const Path alloc_path = status_path.Field("allocatable");
    if (absl::Status s = ReadQuantityMap(f[0], alloc_path, &node->allocatable_milli); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DecodePodAt(const Value& value, const Path& path, PodObject* pod) {
  Sections sec;
  if (absl::Status s = GetSections(value, path, &sec); !s.ok()) return s;
  MetaOut meta;
  meta.name = &pod->name;
  meta.namespace_name = &pod->namespace_name;
  meta.uid = &pod->uid;
  meta.resource_version = &pod->resource_version;
  meta.labels = &pod->labels;
  meta.annotations = &pod->annotations;
  meta.terminating = &pod->terminating;
  if (absl::Status s = DecodeMeta(sec.metadata, path, meta); !s.ok()) return s;
  if (sec.spec != nullptr) {
    const Path spec_path = path.Field("spec");
    static constexpr absl::string_view kNames[] = {"nodeName",       "schedulerName", "nodeSelector",
                                                   "containers",     "initContainers", "overhead",
                                                   "affinity"};
    const Value* f[7];
    if (absl::Status s = GetFields(*sec.spec, spec_path, kNames, f); !s.ok()) return s;
    const Path node_path = spec_path.Field("nodeName");
    if (absl::Status s = ReadString(f[0], node_path, &pod->node_name); !s.ok()) return s;
    const Path sched_path = spec_path.Field("schedulerName");
    if (absl::Status s = ReadString(f[1], sched_path, &pod->scheduler_name); !s.ok()) return s;
    const Path sel_path = spec_path.Field("nodeSelector");
    if (absl::Status s = ReadStringMap(f[2], sel_path, &pod->node_selector); !s.ok()) return s;
    const Path c_path = spec_path.Field("containers");
    if (absl::Status s = DecodeContainers(f[3], c_path, /*init=*/false, &pod->containers);
        !s.ok()) {
      return s;
    }
    const Path ic_path = spec_path.Field("initContainers");
    if (absl::Status s = DecodeContainers(f[4], ic_path, /*init=*/true, &pod->init_containers);
        !s.ok()) {
      return s;
    }
    const Path oh_path = spec_path.Field("overhead");
    if (absl::Status s = ReadQuantityMap(f[5], oh_path, &pod->overhead_milli); !s.ok()) return s;
    const Path affinity_path = spec_path.Field("affinity");
    if (absl::Status s = DecodeRequiredNodeTerms(f[6], affinity_path, &pod->required_node_terms); !s.ok()) {
      return s;
    }
  }
  if (sec.status != nullptr) {
    const Path status_path = path.Field("status");
    static constexpr absl::string_view kNames[] = {"phase", "conditions",
                                                   "extendedResourceClaimStatus"};
    const Value* f[3];
    if (absl::Status s = GetFields(*sec.status, status_path, kNames, f); !s.ok()) return s;
    if (f[2] != nullptr && f[2]->IsObject()) {
      auto claim = f[2]->FindMember("resourceClaimName");
      if (claim != f[2]->MemberEnd() && claim->value.IsString() &&
          claim->value.GetStringLength() > 0 && claim->value.GetStringLength() <= kMaxNameBytes) {
        std::string name(claim->value.GetString(), claim->value.GetStringLength());
        if (UidProblem(name).empty() && name.find('/') == std::string::npos) {
          pod->extended_resource_claim = std::move(name);
        }
      }
    }
    const Path phase_path = status_path.Field("phase");
    if (absl::Status s = ReadString(f[0], phase_path, &pod->phase); !s.ok()) return s;
    // PodScheduled's lastTransitionTime (see PodObject::scheduled_at): read leniently, as a
    // hint; nothing else of the conditions is used.
    if (f[1] != nullptr && f[1]->IsArray()) {
      for (const Value& c : f[1]->GetArray()) {
        if (!c.IsObject()) continue;
        auto type = c.FindMember("type");
        auto status = c.FindMember("status");
        auto at = c.FindMember("lastTransitionTime");
        if (type == c.MemberEnd() || !type->value.IsString() || status == c.MemberEnd() ||
            !status->value.IsString() || at == c.MemberEnd() || !at->value.IsString()) {
          continue;
        }
        if (absl::string_view(type->value.GetString()) != "PodScheduled" ||
            absl::string_view(status->value.GetString()) != "True" || at->value.GetStringLength() > 64) {
          continue;
        }
        absl::Time t;
        std::string err;
        if (absl::ParseTime(absl::RFC3339_full, at->value.GetString(), &t, &err) &&
            t != absl::InfinitePast() && t != absl::InfiniteFuture()) {
          pod->scheduled_at = t;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeNamespaceAt(const Value& value, const Path& path, NamespaceObject* ns) {
  Sections sec;
  if (absl::Status s = GetSections(value, path, &sec); !s.ok()) return s;
  MetaOut meta;
  meta.name = &ns->name;
  meta.labels = &ns->labels;
  return DecodeMeta(sec.metadata, path, meta);
}

absl::Status DecodeQuotaAt(const Value& value, const Path& path, ResourceQuotaObject* quota) {
  Sections sec;
  if (absl::Status s = GetSections(value, path, &sec); !s.ok()) return s;
  MetaOut meta;
  meta.name = &quota->name;
  meta.namespace_name = &quota->namespace_name;
  if (absl::Status s = DecodeMeta(sec.metadata, path, meta); !s.ok()) return s;
  if (sec.spec != nullptr) {
    const Path spec_path = path.Field("spec");
    static constexpr absl::string_view kNames[] = {"hard"};
    const Value* f[1];
    if (absl::Status s = GetFields(*sec.spec, spec_path, kNames, f); !s.ok()) return s;
    const Path hard_path = spec_path.Field("hard");
    if (absl::Status s = ReadQuantityMap(f[0], hard_path, &quota->hard_milli); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Documents of mixed kinds.

// The element kind of a list kind ("PodList" -> "Pod"); "" for a plain "List" whose items
// must name their own kind. Returns false when `kind` is not a list kind.
bool ListElementKind(absl::string_view kind, absl::string_view* element) {
  if (kind == "List") {
    *element = absl::string_view();
    return true;
  }
  if (kind == "NodeList" || kind == "PodList" || kind == "NamespaceList" ||
      kind == "ResourceQuotaList") {
    *element = kind.substr(0, kind.size() - 4);
    return true;
  }
  return false;
}

absl::Status DecodeOfKind(absl::string_view kind, const Value& value, const Path& path,
                          ObjectBatch* batch) {
  if (kind == "Node") {
    NodeObject node;
    if (absl::Status s = DecodeNodeAt(value, path, &node); !s.ok()) return s;
    batch->nodes.push_back(std::move(node));
  } else if (kind == "Pod") {
    PodObject pod;
    if (absl::Status s = DecodePodAt(value, path, &pod); !s.ok()) return s;
    batch->pods.push_back(std::move(pod));
  } else if (kind == "Namespace") {
    NamespaceObject ns;
    if (absl::Status s = DecodeNamespaceAt(value, path, &ns); !s.ok()) return s;
    batch->namespaces.push_back(std::move(ns));
  } else if (kind == "ResourceQuota") {
    ResourceQuotaObject quota;
    if (absl::Status s = DecodeQuotaAt(value, path, &quota); !s.ok()) return s;
    batch->quotas.push_back(std::move(quota));
  } else {
    ++batch->ignored_objects;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NodeObject> DecodeNode(const rapidjson::Value& value, absl::string_view path) {
  NodeObject node;
  const Path root(path);
  if (absl::Status s = DecodeNodeAt(value, root, &node); !s.ok()) return s;
  return node;
}

absl::StatusOr<ObjectIdentity> DecodeNodeIdentity(const rapidjson::Value& value,
                                                  absl::string_view path) {
  const Path root(path);
  Sections sec;
  if (absl::Status s = GetSections(value, root, &sec); !s.ok()) return s;
  ObjectIdentity id;
  MetaOut meta;
  meta.name = &id.name;
  meta.resource_version = &id.resource_version;
  if (absl::Status s = DecodeMeta(sec.metadata, root, meta); !s.ok()) return s;
  return id;
}

absl::StatusOr<ObjectIdentity> DecodeNodeIdentity(const rapidjson::Value& value,
                                                  absl::string_view path,
                                                  const ListIdentities::Item* captured) {
  if (captured == nullptr || !captured->complete) return DecodeNodeIdentity(value, path);
  // What the capture cannot check: the name's own rules (errors name the path as usual).
  const Path root(path);
  const Path meta_path = root.Field("metadata");
  const Path name_path = meta_path.Field("name");
  if (absl::Status s = CheckName(name_path, captured->name); !s.ok()) return s;
  ObjectIdentity id;
  id.name = std::string(captured->name);
  id.resource_version = std::string(captured->resource_version);
  return id;
}

absl::StatusOr<PodObject> DecodePod(const rapidjson::Value& value, absl::string_view path) {
  PodObject pod;
  const Path root(path);
  if (absl::Status s = DecodePodAt(value, root, &pod); !s.ok()) return s;
  return pod;
}

absl::StatusOr<NamespaceObject> DecodeNamespace(const rapidjson::Value& value,
                                                absl::string_view path) {
  NamespaceObject ns;
  const Path root(path);
  if (absl::Status s = DecodeNamespaceAt(value, root, &ns); !s.ok()) return s;
  return ns;
}

absl::StatusOr<ResourceQuotaObject> DecodeResourceQuota(const rapidjson::Value& value,
                                                        absl::string_view path) {
  ResourceQuotaObject quota;
  const Path root(path);
  if (absl::Status s = DecodeQuotaAt(value, root, &quota); !s.ok()) return s;
  return quota;
}

absl::StatusOr<const rapidjson::Value*> ParseWatchEventLine(absl::string_view line,
                                                            rapidjson::Document& doc,
                                                            std::string* type) {
  if (absl::Status s = ParseJsonLimited(line, doc); !s.ok()) return s;
  if (!doc.IsObject()) return absl::InvalidArgumentError("watch event: must be an object");
  const auto t = doc.FindMember("type");
  if (t == doc.MemberEnd() || !t->value.IsString() || t->value.GetStringLength() == 0) {
    return absl::InvalidArgumentError("watch event: type: missing (or not a non-empty string)");
  }
  const auto object = doc.FindMember("object");
  if (object == doc.MemberEnd() || !object->value.IsObject()) {
    return absl::InvalidArgumentError("watch event: object: missing (or not an object)");
  }
  type->assign(t->value.GetString(), t->value.GetStringLength());
  return &object->value;
}

absl::StatusOr<ObjectBatch> DecodeObjects(absl::string_view json) {
  if (absl::Status s = CheckJsonSize(json.size()); !s.ok()) return s;
  // One copy buys in-situ parsing (strings stay in the buffer), about twice as fast as
  // copying every string into the document's allocator.
  std::string buffer(json.data(), json.size());
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonInSituLimited(buffer.data(), buffer.size(), doc); !s.ok()) {
    return s;
  }
  if (!doc.IsObject()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a JSON object at the top level, got ", TypeName(doc)));
  }
  const Path root("");
  static constexpr absl::string_view kNames[] = {"kind", "items"};
  const Value* f[2];
  if (absl::Status s = GetFields(doc, root, kNames, f); !s.ok()) return s;
  const Path kind_path = root.Field("kind");
  if (f[0] == nullptr) return Error(kind_path, "missing");
  if (!f[0]->IsString()) return WrongType(kind_path, "a string", *f[0]);
  const absl::string_view kind = Str(*f[0]);

  ObjectBatch batch;
  absl::string_view element_kind;
  if (!ListElementKind(kind, &element_kind)) {
    const Path object_root(kind);
    if (absl::Status s = DecodeOfKind(kind, doc, object_root, &batch); !s.ok()) return s;
    return batch;
  }

  const Path items_path = root.Field("items");
  if (f[1] == nullptr) return batch;  // an empty list may come as "items": null
  if (!f[1]->IsArray()) return WrongType(items_path, "an array", *f[1]);
  const Value& items = *f[1];
  for (SizeType i = 0; i < items.Size(); ++i) {
    const Path item_path = items_path.Index(i);
    const Value& item = items[i];
    if (absl::Status s = RequireObject(item, item_path); !s.ok()) return s;
    static constexpr absl::string_view kItemNames[] = {"kind"};
    const Value* k[1];
    if (absl::Status s = GetFields(item, item_path, kItemNames, k); !s.ok()) return s;
    const Path item_kind_path = item_path.Field("kind");
    absl::string_view item_kind = element_kind;
    if (k[0] != nullptr) {
      if (!k[0]->IsString()) return WrongType(item_kind_path, "a string", *k[0]);
      item_kind = Str(*k[0]);
      if (item_kind.empty()) return Error(item_kind_path, "empty");
      absl::string_view ignored;
      if (ListElementKind(item_kind, &ignored)) {
        return Error(item_kind_path, absl::StrCat(Quote(item_kind), " lists may not be nested"));
      }
    }
    if (item_kind.empty()) return Error(item_kind_path, "missing");
    if (absl::Status s = DecodeOfKind(item_kind, item, item_path, &batch); !s.ok()) return s;
  }
  return batch;
}

namespace {

// max(sum over containers, each init container) + overhead, in milli-units, each term and
// sum capped at `cap` (<= 2^62: the sum of two capped values cannot overflow).
int64_t PodRequestMilli(const PodObject& pod, const std::string& resource, int64_t cap) {
  auto of = [&](const std::map<std::string, int64_t>& m) {
    auto it = m.find(resource);
    return it == m.end() ? 0 : std::clamp<int64_t>(it->second, 0, cap);
  };
  const int64_t containers = AggregatePodRequest(
      pod, [&](const ContainerResources& c) { return of(c.requests_milli); }, cap);
  return SaturatingAddUpTo(containers, of(pod.overhead_milli), cap);
}

}  // namespace

HostRequest PodHostRequest(const PodObject& pod) {
  static const std::string kCpu = "cpu";
  static const std::string kMemory = "memory";
  HostRequest r;
  r.cpu_milli = PodRequestMilli(pod, kCpu, kMaxHostRequest);
  // The cap is on what is kept, whole bytes: capping the milli-bytes at kMaxHostRequest would
  // count a pod asking for more than 16 GiB as 16 GiB.
  const int64_t memory_milli = PodRequestMilli(pod, kMemory, kMaxHostRequest * 1000);
  r.memory_bytes = memory_milli / 1000 + (memory_milli % 1000 != 0 ? 1 : 0);
  return r;
}

}  // namespace gse
