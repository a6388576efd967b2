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
  // Devices are whole numbers: limits (== requests for extended resources) in milli-units,
  // aggregated as kubelet's device manager hands them out (AggregatePodRequest: an init
  // container's devices pass to later containers, a sidecar's stay its own).
  static constexpr int64_t kCap = int64_t{1} << 62;
  std::map<std::string, int64_t> app;
  for (const auto* list : {&pod->containers, &pod->init_containers}) {
    for (const ContainerResources& c : *list) {
      for (const auto* m : {&c.limits_milli, &c.requests_milli}) {
        for (const auto& entry : *m) app.emplace(entry.first, 0);
      }
    }
  }
  for (auto& [name, count] : app) {
    const std::string& resource = name;
    count = AggregatePodRequest(
                *pod,
                [&](const ContainerResources& c) -> int64_t {
                  auto limit = c.limits_milli.find(resource);
                  if (limit != c.limits_milli.end()) return std::clamp<int64_t>(limit->second, 0, kCap) / 1000;
                  auto request = c.requests_milli.find(resource);
                  if (request == c.requests_milli.end()) return int64_t{0};
                  return std::clamp<int64_t>(request->second, 0, kCap) / 1000;
                },
                kCap);
  }
  for (const auto& [name, count] : app) {
    if (count > 0) out.device_needs[name] = count;
  }
  return out;
}

}  // namespace gse::agent
