// Trace format reading and writing (see trace.h and docs/replay.md).
#include "perf/trace.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/quantity.h"

namespace gse::replay {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

absl::Status Bad(absl::string_view field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

absl::StatusOr<std::string> GetString(const rapidjson::Value& obj, const char* key, bool required) {
  auto it = obj.FindMember(key);
  if (it == obj.MemberEnd() || it->value.IsNull()) {
    if (required) return Bad(key, "missing");
    return std::string();
  }
  if (!it->value.IsString()) return Bad(key, "must be a string");
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

absl::Status StringMap(const rapidjson::Value& obj, const char* key,
                       std::map<std::string, std::string>* out) {
  auto it = obj.FindMember(key);
  if (it == obj.MemberEnd() || it->value.IsNull()) return absl::OkStatus();
  if (!it->value.IsObject()) return Bad(key, "must be an object of strings");
  for (auto m = it->value.MemberBegin(); m != it->value.MemberEnd(); ++m) {
    const std::string k(m->name.GetString(), m->name.GetStringLength());
    if (!m->value.IsString()) return Bad(absl::StrCat(key, "[\"", k, "\"]"), "must be a string");
    (*out)[k] = std::string(m->value.GetString(), m->value.GetStringLength());
  }
  return absl::OkStatus();
}

std::string Serialize(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  v.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

absl::Status CheckAllowed(const rapidjson::Value& obj, std::initializer_list<const char*> allowed) {
  for (auto m = obj.MemberBegin(); m != obj.MemberEnd(); ++m) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || m->name == a;
    if (!ok) return Bad(m->name.GetString(), "unknown field");
  }
  return absl::OkStatus();
}

absl::Status ParsePod(const rapidjson::Value& obj, bool arrive, PodArrival* pod) {
  absl::StatusOr<std::string> ns = GetString(obj, "namespace", true);
  if (!ns.ok()) return ns.status();
  absl::StatusOr<std::string> name = GetString(obj, "name", true);
  if (!name.ok()) return name.status();
  if (ns->empty()) return Bad("namespace", "empty");
  if (name->empty()) return Bad("name", "empty");
  if (ns->size() > kMaxNameBytes || name->size() > kMaxNameBytes) {
    return Bad(ns->size() > kMaxNameBytes ? "namespace" : "name", "longer than 253 bytes");
  }
  pod->namespace_name = *ns;
  pod->name = *name;
  if (!arrive) return absl::OkStatus();
  absl::StatusOr<std::string> project = GetString(obj, "project", false);
  if (!project.ok()) return project.status();
  pod->project = *project;
  if (absl::Status s = StringMap(obj, "resources", &pod->resources); !s.ok()) return s;
  for (const auto& [k, v] : pod->resources) {
    absl::StatusOr<int64_t> q = ParseQuantityMilli(v);
    if (!q.ok()) return Bad(absl::StrCat("resources[\"", k, "\"]"), q.status().message());
    if (*q < 0) return Bad(absl::StrCat("resources[\"", k, "\"]"), "negative");
  }
  if (absl::Status s = StringMap(obj, "node_selector", &pod->node_selector); !s.ok()) return s;
  auto aff = obj.FindMember("affinity");
  if (aff != obj.MemberEnd() && !aff->value.IsNull()) {
    if (!aff->value.IsArray()) return Bad("affinity", "must be an array of requirements");
    for (rapidjson::SizeType i = 0; i < aff->value.Size(); ++i) {
      const rapidjson::Value& r = aff->value[i];
      const std::string path = absl::StrCat("affinity[", i, "]");
      if (!r.IsObject()) return Bad(path, "must be an object");
      SelectorRequirement req;
      absl::StatusOr<std::string> key = GetString(r, "key", true);
      if (!key.ok()) return Bad(path, key.status().message());
      absl::StatusOr<std::string> op = GetString(r, "operator", true);
      if (!op.ok()) return Bad(path, op.status().message());
      req.key = *key;
      req.op = *op;
      if (req.op != "In" && req.op != "NotIn" && req.op != "Exists" && req.op != "DoesNotExist") {
        return Bad(path + ".operator", absl::StrCat("\"", req.op, "\" is not In, NotIn, Exists or DoesNotExist"));
      }
      auto vals = r.FindMember("values");
      if (vals != r.MemberEnd() && !vals->value.IsNull()) {
        if (!vals->value.IsArray()) return Bad(path + ".values", "must be an array of strings");
        for (rapidjson::SizeType j = 0; j < vals->value.Size(); ++j) {
          if (!vals->value[j].IsString()) return Bad(absl::StrCat(path, ".values[", j, "]"), "must be a string");
          req.values.emplace_back(vals->value[j].GetString(), vals->value[j].GetStringLength());
        }
      }
      if ((req.op == "In" || req.op == "NotIn") && req.values.empty()) {
        return Bad(path + ".values", "must not be empty for In and NotIn");
      }
      pod->affinity.push_back(std::move(req));
    }
  }
  auto gpu = obj.FindMember("gpu");
  if (gpu != obj.MemberEnd() && !gpu->value.IsNull()) {
    if (!gpu->value.IsNumber() || !std::isfinite(gpu->value.GetDouble()) || gpu->value.GetDouble() < 0) {
      return Bad("gpu", "must be a number >= 0");
    }
    pod->gpu = gpu->value.GetDouble();
  }
  return absl::OkStatus();
}

absl::Status ParseEventObject(const rapidjson::Value& obj, Event* ev, bool* is_header,
                              TraceHeader* header) {
  *is_header = false;
  if (!obj.IsObject()) return Bad("line", "must be a JSON object");
  absl::StatusOr<std::string> type = GetString(obj, "type", true);
  if (!type.ok()) return type.status();
  auto t = obj.FindMember("t");
  if (t != obj.MemberEnd() && !t->value.IsNull()) {
    if (!t->value.IsNumber()) return Bad("t", "must be a number");
    ev->t = t->value.GetDouble();
  }
  if (*type == "header") {
    *is_header = true;
    if (absl::Status s = CheckAllowed(obj, {"type", "format", "catalog", "twins", "source", "t"}); !s.ok()) return s;
    absl::StatusOr<std::string> format = GetString(obj, "format", true);
    if (!format.ok()) return format.status();
    if (*format != kTraceFormat) return Bad("format", absl::StrCat("\"", *format, "\" is not \"", kTraceFormat, "\""));
    absl::StatusOr<std::string> catalog = GetString(obj, "catalog", false);
    if (!catalog.ok()) return catalog.status();
    absl::StatusOr<std::string> source = GetString(obj, "source", false);
    if (!source.ok()) return source.status();
    header->catalog = *catalog;
    header->source = *source;
    auto tw = obj.FindMember("twins");
    if (tw != obj.MemberEnd() && !tw->value.IsNull()) {
      if (!tw->value.IsArray()) return Bad("twins", "must be an array of [exclusive, mps] pairs");
      for (rapidjson::SizeType i = 0; i < tw->value.Size(); ++i) {
        const rapidjson::Value& p = tw->value[i];
        if (!p.IsArray() || p.Size() != 2 || !p[0].IsString() || !p[1].IsString()) {
          return Bad(absl::StrCat("twins[", i, "]"), "must be a pair of resource names");
        }
        header->twins.emplace_back(p[0].GetString(), p[1].GetString());
      }
    }
    return absl::OkStatus();
  }
  if (*type == "objects") {
    ev->type = EventType::kObjects;
    if (absl::Status s = CheckAllowed(obj, {"type", "list", "t"}); !s.ok()) return s;
    auto l = obj.FindMember("list");
    if (l == obj.MemberEnd() || !l->value.IsObject()) return Bad("list", "must be a List object");
    ev->json = Serialize(l->value);
    absl::StatusOr<ObjectBatch> batch = DecodeObjects(ev->json);
    if (!batch.ok()) return Bad("list", batch.status().message());
    return absl::OkStatus();
  }
  if (*type == "node_add" || *type == "node_update") {
    ev->type = *type == "node_add" ? EventType::kNodeAdd : EventType::kNodeUpdate;
    if (absl::Status s = CheckAllowed(obj, {"type", "node", "t"}); !s.ok()) return s;
    auto n = obj.FindMember("node");
    if (n == obj.MemberEnd() || !n->value.IsObject()) return Bad("node", "must be a Node object");
    absl::StatusOr<NodeObject> node = DecodeNode(n->value, "node");
    if (!node.ok()) return node.status();
    ev->name = node->name;
    ev->json = Serialize(n->value);
    return absl::OkStatus();
  }
  if (*type == "node_remove") {
    ev->type = EventType::kNodeRemove;
    if (absl::Status s = CheckAllowed(obj, {"type", "name", "t"}); !s.ok()) return s;
    absl::StatusOr<std::string> name = GetString(obj, "name", true);
    if (!name.ok()) return name.status();
    if (name->empty()) return Bad("name", "empty");
    ev->name = *name;
    return absl::OkStatus();
  }
  if (*type == "pod_arrive") {
    ev->type = EventType::kPodArrive;
    if (absl::Status s = CheckAllowed(obj, {"type", "namespace", "name", "project", "resources",
                                            "node_selector", "affinity", "gpu", "t"});
        !s.ok()) {
      return s;
    }
    return ParsePod(obj, true, &ev->pod);
  }
  if (*type == "pod_delete") {
    ev->type = EventType::kPodDelete;
    if (absl::Status s = CheckAllowed(obj, {"type", "namespace", "name", "t"}); !s.ok()) return s;
    return ParsePod(obj, false, &ev->pod);
  }
  return Bad("type", absl::StrCat("unknown event type \"", *type,
                                  "\" (header, objects, node_add, node_update, node_remove, "
                                  "pod_arrive, pod_delete)"));
}

void Str(Writer& w, absl::string_view s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

void RawObject(Writer& w, const std::string& json) {
  rapidjson::Document d;
  d.Parse(json.c_str(), json.size());
  d.Accept(w);
}

}  // namespace

absl::string_view EventTypeName(EventType type) {
  switch (type) {
    case EventType::kObjects: return "objects";
    case EventType::kNodeAdd: return "node_add";
    case EventType::kNodeUpdate: return "node_update";
    case EventType::kNodeRemove: return "node_remove";
    case EventType::kPodArrive: return "pod_arrive";
    case EventType::kPodDelete: return "pod_delete";
  }
  return "unknown";
}

absl::StatusOr<Event> ParseEventLine(absl::string_view line) {
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(line, doc); !s.ok()) return s;
  Event ev;
  bool is_header = false;
  TraceHeader header;
  if (absl::Status s = ParseEventObject(doc, &ev, &is_header, &header); !s.ok()) return s;
  if (is_header) return Bad("type", "header is only allowed on the first line");
  return ev;
}

absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view origin) {
  Trace trace;
  int line_no = 0;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == absl::string_view::npos) continue;
    auto fail = [&](const absl::Status& s) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":", line_no, ": ", s.message()));
    };
    rapidjson::Document doc;
    if (absl::Status s = ParseJsonLimited(line, doc); !s.ok()) return fail(s);
    Event ev;
    bool is_header = false;
    if (absl::Status s = ParseEventObject(doc, &ev, &is_header, &trace.header); !s.ok()) return fail(s);
    if (is_header && !first) return fail(Bad("type", "header is only allowed on the first line"));
    first = false;
    if (!is_header) trace.events.push_back(std::move(ev));
  }
  return trace;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return out.str();
}

absl::StatusOr<Trace> LoadTraceFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseTrace(*text, path);
}

std::string HeaderJson(const TraceHeader& header) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("type");
  w.String("header");
  w.Key("format");
  Str(w, kTraceFormat);
  if (!header.catalog.empty()) {
    w.Key("catalog");
    Str(w, header.catalog);
  }
  if (!header.twins.empty()) {
    w.Key("twins");
    w.StartArray();
    for (const auto& [a, b] : header.twins) {
      w.StartArray();
      Str(w, a);
      Str(w, b);
      w.EndArray();
    }
    w.EndArray();
  }
  if (!header.source.empty()) {
    w.Key("source");
    Str(w, header.source);
  }
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

std::string EventJson(const Event& ev) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("type");
  Str(w, EventTypeName(ev.type));
  if (ev.t >= 0) {
    w.Key("t");
    w.Double(ev.t);
  }
  switch (ev.type) {
    case EventType::kObjects:
      w.Key("list");
      RawObject(w, ev.json);
      break;
    case EventType::kNodeAdd:
    case EventType::kNodeUpdate:
      w.Key("node");
      RawObject(w, ev.json);
      break;
    case EventType::kNodeRemove:
      w.Key("name");
      Str(w, ev.name);
      break;
    case EventType::kPodArrive:
    case EventType::kPodDelete: {
      const PodArrival& p = ev.pod;
      w.Key("namespace");
      Str(w, p.namespace_name);
      w.Key("name");
      Str(w, p.name);
      if (ev.type == EventType::kPodDelete) break;
      if (!p.project.empty()) {
        w.Key("project");
        Str(w, p.project);
      }
      w.Key("resources");
      w.StartObject();
      for (const auto& [k, v] : p.resources) {
        Str(w, k);
        Str(w, v);
      }
      w.EndObject();
      if (!p.node_selector.empty()) {
        w.Key("node_selector");
        w.StartObject();
        for (const auto& [k, v] : p.node_selector) {
          Str(w, k);
          Str(w, v);
        }
        w.EndObject();
      }
      if (!p.affinity.empty()) {
        w.Key("affinity");
        WriteSelectorRequirements(w, p.affinity);
      }
      if (p.gpu >= 0) {
        w.Key("gpu");
        w.Double(p.gpu);
      }
      break;
    }
  }
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path,
                                                               const TraceHeader& header) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat("--record=", path, ": cannot create"));
  std::unique_ptr<TraceWriter> w(new TraceWriter(f, path));
  const std::string line = HeaderJson(header);
  std::fwrite(line.data(), 1, line.size(), f);
  std::fputc('\n', f);
  return w;
}

TraceWriter::~TraceWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void TraceWriter::Write(const Event& event) {
  if (f_ == nullptr) return;
  const std::string line = EventJson(event);
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fputc('\n', f_);
}

absl::Status TraceWriter::Close() {
  if (f_ == nullptr) return absl::OkStatus();
  const bool err = std::ferror(f_) != 0;
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (err || rc != 0) return absl::DataLossError(absl::StrCat("--record=", path_, ": write failed"));
  return absl::OkStatus();
}

void WriteProjectNamespace(rapidjson::Writer<rapidjson::StringBuffer>& w,
                           absl::string_view namespace_name, absl::string_view project) {
  w.StartObject();
  w.Key("apiVersion");
  w.String("v1");
  w.Key("kind");
  w.String("Namespace");
  w.Key("metadata");
  w.StartObject();
  w.Key("name");
  Str(w, namespace_name);
  w.Key("labels");
  w.StartObject();
  Str(w, MirrorOptions().project_label);
  Str(w, project);
  w.EndObject();
  w.EndObject();
  w.EndObject();
}

void WriteSelectorRequirements(rapidjson::Writer<rapidjson::StringBuffer>& w,
                               const std::vector<SelectorRequirement>& reqs) {
  w.StartArray();
  for (const SelectorRequirement& r : reqs) {
    w.StartObject();
    w.Key("key");
    Str(w, r.key);
    w.Key("operator");
    Str(w, r.op);
    if (!r.values.empty()) {
      w.Key("values");
      w.StartArray();
      for (const std::string& v : r.values) Str(w, v);
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace gse::replay
