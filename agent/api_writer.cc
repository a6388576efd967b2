// ApiWriter: merge patches and Events.
#include "agent/api_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "agent/node_audit.h"
#include "agent/published_inventory.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::agent {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void Str(Writer& w, absl::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}
void Field(Writer& w, absl::string_view key, absl::string_view value) {
  Str(w, key);
  Str(w, value);
}

// Cuts at `max` bytes without splitting a UTF-8 sequence.
absl::string_view Truncated(absl::string_view s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

std::string AnnotationPatch(absl::string_view key, absl::string_view value,
                            absl::string_view uid) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  Str(w, "metadata");
  w.StartObject();
  if (!uid.empty()) Field(w, "uid", uid);
  Str(w, "annotations");
  w.StartObject();
  Field(w, key, value);
  w.EndObject();
  w.EndObject();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

std::string PodEventJson(const PodRef& pod, absl::string_view node, absl::string_view type,
                         absl::string_view reason, absl::string_view message, absl::Time now,
                         uint64_t unique) {
  // Object names are at most 253 characters: keep room for ".<16 hex>".
  const std::string name =
      absl::StrFormat("%s.%016x", Truncated(pod.name, 253 - 17), unique);
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", now, absl::UTCTimeZone());
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  Field(w, "apiVersion", "v1");
  Field(w, "kind", "Event");
  Str(w, "metadata");
  w.StartObject();
  Field(w, "name", name);
  Field(w, "namespace", pod.namespace_name);
  w.EndObject();
  Str(w, "involvedObject");
  w.StartObject();
  Field(w, "apiVersion", "v1");
  Field(w, "kind", "Pod");
  Field(w, "namespace", pod.namespace_name);
  Field(w, "name", pod.name);
  if (!pod.uid.empty()) Field(w, "uid", pod.uid);
  w.EndObject();
  Field(w, "type", type);
  Field(w, "reason", reason);
  Field(w, "message", Truncated(message, kMaxEventMessage));
  Str(w, "source");
  w.StartObject();
  Field(w, "component", kAgentComponent);
  Field(w, "host", node);
  w.EndObject();
  Field(w, "reportingComponent", kAgentComponent);
  Field(w, "reportingInstance", node);
  Field(w, "firstTimestamp", ts);
  Field(w, "lastTimestamp", ts);
  Str(w, "count");
  w.Int(1);
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

ApiWriter::ApiWriter(KubeClient* client, std::string node)
    : client_(client), node_(std::move(node)) {}

absl::Status ApiWriter::ConfirmAllocation(const PodRef& pod, absl::string_view ids) {
  const std::string path =
      absl::StrCat("/api/v1/namespaces/", pod.namespace_name, "/pods/", pod.name);
  return client_->Patch(path, AnnotationPatch(kAnnotationAllocated, ids, pod.uid)).status();
}

absl::Status ApiWriter::PublishInventory(absl::string_view inventory_json) {
  return client_
      ->Patch(absl::StrCat("/api/v1/nodes/", node_),
              AnnotationPatch(kAnnotationInventory, inventory_json, ""))
      .status();
}

absl::Status ApiWriter::PostPodEvent(const PodRef& pod, absl::string_view reason,
                                     absl::string_view message) {
  const absl::Time now = absl::Now();
  const uint64_t unique = static_cast<uint64_t>(absl::ToUnixNanos(now));
  return client_
      ->Post(absl::StrCat("/api/v1/namespaces/", pod.namespace_name, "/events"),
             PodEventJson(pod, node_, "Warning", reason, message, now, unique))
      .status();
}

}  // namespace gse::agent
