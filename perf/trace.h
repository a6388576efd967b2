// The replayer's trace format (docs/replay.md): JSON lines, one event per line, replayed in
// file order against a cluster given as a `kubectl get ... -o json` List snapshot.
//
//   {"type":"header","format":"gse-replay/v1","catalog":"<GpuCatalog YAML or JSON text>",
//    "twins":[["nvidia.com/gpu","nvidia.com/gpu.mps"]],"source":"openb default seed 1"}
//   {"type":"objects","list":{"kind":"List","items":[...Namespaces, ResourceQuotas, Nodes]}}
//   {"type":"node_add","node":{...Node...}}    {"type":"node_update","node":{...}}
//   {"type":"node_remove","name":"n1"}
//   {"type":"pod_arrive","namespace":"team-a","name":"p1","project":"team-a",
//    "resources":{"cpu":"4","memory":"8Gi","nvidia.com/gpu":"1"},
//    "node_selector":{"k":"v"},
//    "affinity":[{"key":"nvidia.com/gpu.product","operator":"In","values":["T4","P100"]}],
//    "gpu":1.0}
//   {"type":"pod_delete","namespace":"team-a","name":"p1"}
// Every event may carry "t" (seconds, informational). The header is optional and only first.
// "affinity" is one required nodeSelectorTerm (its matchExpressions, ANDed; operators In,
// NotIn, Exists, DoesNotExist). "gpu" is the pod's GPU request counted for GPU allocation
// (GPU-equivalents); absent = derived from the catalog resource. "project" absent = the
// namespace's project.
//
// Parsing is strict: unknown types or fields, wrong types and bad quantities are errors that
// name the origin, the line and the field ("trace.jsonl:12: resources[\"cpu\"]: ...").
// Pure functions; the writer is single-threaded.
#ifndef GSE_PERF_TRACE_H_
#define GSE_PERF_TRACE_H_

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::replay {

inline constexpr absl::string_view kTraceFormat = "gse-replay/v1";

struct SelectorRequirement {
  std::string key;
  std::string op;  // In, NotIn, Exists, DoesNotExist
  std::vector<std::string> values;
};

// Writes `reqs` as a JSON array of Kubernetes NodeSelectorRequirements
// ({"key","operator","values"}), as both the trace format and Pod objects spell them.
void WriteSelectorRequirements(rapidjson::Writer<rapidjson::StringBuffer>& w,
                               const std::vector<SelectorRequirement>& reqs);

// Writes a v1 Namespace object whose project label (MirrorOptions' default key) names
// `project`: how the openb importer and the replayer's trace events declare projects.
void WriteProjectNamespace(rapidjson::Writer<rapidjson::StringBuffer>& w,
                           absl::string_view namespace_name, absl::string_view project);

struct PodArrival {
  std::string namespace_name;
  std::string name;
  std::string project;  // "" = the namespace's project
  std::map<std::string, std::string> resources;  // requests, Kubernetes quantities
  std::map<std::string, std::string> node_selector;
  std::vector<SelectorRequirement> affinity;
  double gpu = -1;  // < 0: derived

  std::string Key() const { return namespace_name + "/" + name; }
};

enum class EventType { kObjects, kNodeAdd, kNodeUpdate, kNodeRemove, kPodArrive, kPodDelete };
absl::string_view EventTypeName(EventType type);

struct Event {
  EventType type = EventType::kPodArrive;
  double t = -1;           // < 0: absent
  std::string json;        // kObjects: the List; kNodeAdd/kNodeUpdate: the Node object
  std::string name;        // kNodeRemove: node name
  PodArrival pod;          // kPodArrive; kPodDelete uses namespace_name and name
};

struct TraceHeader {
  std::string catalog;  // catalog text; "" = built-in (or --catalog)
  std::vector<std::pair<std::string, std::string>> twins;
  std::string source;
};

struct Trace {
  TraceHeader header;
  std::vector<Event> events;
};

// Parses a whole trace. `origin` names the file in errors.
absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view origin);
absl::StatusOr<Trace> LoadTraceFile(const std::string& path);
// One event from one line (exposed for tests and the writer's round trip).
absl::StatusOr<Event> ParseEventLine(absl::string_view line);

std::string HeaderJson(const TraceHeader& header);
std::string EventJson(const Event& event);

// Appends events to a file as they are replayed (--record).
class TraceWriter {
 public:
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Open(const std::string& path,
                                                           const TraceHeader& header);
  ~TraceWriter();
  void Write(const Event& event);
  absl::Status Close();

 private:
  explicit TraceWriter(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  std::FILE* f_;
  std::string path_;
};

// Reads a whole file ("" and an error naming the path when it cannot).
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace gse::replay

#endif  // GSE_PERF_TRACE_H_
