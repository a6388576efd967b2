// NodePod decoding on top of the project's Pod decoder (state/k8s_objects.h), which validates
// names, annotations and quantities; only creationTimestamp is read here in addition.
#include "agent/node_pods.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "state/k8s_objects.h"

namespace gse::agent {

absl::StatusOr<NodePod> DecodeNodePod(const rapidjson::Value& value, absl::string_view path) {
  auto pod = DecodePod(value, path);
  if (!pod.ok()) return pod.status();
  NodePod out;
  out.namespace_name = std::move(pod->namespace_name);
  out.name = std::move(pod->name);
  out.uid = std::move(pod->uid);
  out.node = std::move(pod->node_name);
  out.phase = std::move(pod->phase);
  out.terminating = pod->terminating;
  out.annotations = std::move(pod->annotations);
  if (value.IsObject()) {
    auto meta = value.FindMember("metadata");
    if (meta != value.MemberEnd() && meta->value.IsObject()) {
      auto ts = meta->value.FindMember("creationTimestamp");
      if (ts != meta->value.MemberEnd() && ts->value.IsString() &&
          ts->value.GetStringLength() <= 64) {
        out.creation_timestamp = ts->value.GetString();
      }
    }
  }
  // Devices are whole numbers: limits (== requests for extended resources) in milli-units.
  std::map<std::string, int64_t> app;
  for (const ContainerResources& c : pod->containers) {
    for (const auto& [name, milli] : c.limits_milli) app[name] += milli / 1000;
    for (const auto& [name, milli] : c.requests_milli) {
      if (c.limits_milli.count(name) == 0) app[name] += milli / 1000;
    }
  }
  for (const ContainerResources& c : pod->init_containers) {
    for (const auto& [name, milli] : c.limits_milli) {
      app[name] = std::max(app[name], milli / 1000);
    }
  }
  for (const auto& [name, count] : app) {
    if (count > 0) out.device_needs[name] = count;
  }
  return out;
}

}  // namespace gse::agent
