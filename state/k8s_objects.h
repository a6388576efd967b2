// Decoding of Kubernetes objects (Node, Pod, Namespace, ResourceQuota) from their JSON.
//
// One decoder serves every source: snapshot files (`kubectl get ... -o json`), the objects
// embedded in kube-scheduler's extender requests (no kind/apiVersion), and the API server's
// list and watch responses. Only the fields the extender needs are kept. Errors are
// InvalidArgument and name the JSON path and the reason, e.g.
//   items[2].metadata.name: missing
//   items[0].status.allocatable["nvidia.com/gpu"]: "-1" is negative
// Decoding never touches the mirror: a batch is applied only after it decoded completely.
// All functions are pure and thread-safe.
#ifndef GSE_STATE_K8S_OBJECTS_H_
#define GSE_STATE_K8S_OBJECTS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/strings/string_view.h"
#include "rapidjson/document.h"
#include "state/json_reader.h"

namespace gse {

// Longest object name we accept (documents themselves are limited by json_reader.h).
inline constexpr size_t kMaxNameBytes = 253;  // DNS subdomain, as Kubernetes

// Why `uid` cannot be a Kubernetes UID ("" when it can): longer than kMaxNameBytes, or a
// control character inside (the mirror keys pods by UID, see cluster_state.h PodIdOf). Every
// decoded metadata.uid passes this check.
std::string UidProblem(absl::string_view uid);

// The order of two resourceVersions of one object: -1 when `a` is older, 0 the same, +1
// newer. Since Kubernetes 1.35 (KEP-5504, stable) they are comparable: positive decimal
// integers without leading zeros, of any length, larger is newer. nullopt when either is not
// one (an older server's opaque value, "0", a hostile string): then nothing may be assumed.
std::optional<int> CompareResourceVersions(absl::string_view a, absl::string_view b);

struct NodeObject {
  std::string name;
  std::string uid;
  std::string resource_version;
  std::map<std::string, std::string> labels;
  // status.allocatable, parsed to milli-units (cpu "127500m" -> 127500, "7" -> 7000).
  std::map<std::string, int64_t> allocatable_milli;
  bool unschedulable = false;
  struct Taint {
    std::string key, value, effect;
  };
  std::vector<Taint> taints;
  // The value of the node agent's gpu.themelio.io/inventory annotation (state/assignment.h),
  // nullopt when the Node carries none (no agent publishes there). The only annotation kept.
  std::optional<std::string> agent_inventory;
};

// Longest gpu.themelio.io/inventory value decoded (Kubernetes caps all of an object's
// annotations together at 256 KiB).
inline constexpr size_t kMaxInventoryAnnotationBytes = 256 * 1024;

struct ContainerResources {
  std::string name;
  std::map<std::string, int64_t> requests_milli;
  std::map<std::string, int64_t> limits_milli;
  // An init container with `restartPolicy: Always`: a sidecar (KEP-753), which keeps running
  // beside the app containers, so its requests add to theirs instead of being reused by them.
  // Always false for app containers.
  bool restartable = false;
};

// One requirement of a node selector term (key, operator In/NotIn/Exists/DoesNotExist/Gt/Lt,
// values), as kube-scheduler's NodeAffinity reads it.
struct NodeSelectorRequirement {
  std::string key;
  std::string op;
  std::vector<std::string> values;
};

// Bounds on spec.affinity.nodeAffinity's required terms: far beyond any real pod (the API
// server caps a whole object at 1.5 MiB), small enough that a hostile body costs little.
inline constexpr size_t kMaxNodeSelectorTerms = 64;
inline constexpr size_t kMaxTermRequirements = 64;
inline constexpr size_t kMaxRequirementValues = 1024;

struct PodObject {
  std::string name;
  std::string namespace_name;
  std::string uid;
  std::string resource_version;
  std::string node_name;  // spec.nodeName, "" while pending
  std::string phase;      // status.phase
  std::string scheduler_name;
  bool terminating = false;  // metadata.deletionTimestamp set
  // status.conditions[type=PodScheduled, status=True].lastTransitionTime: when the binding
  // committed (the API server's clock; the binding subresource sets it). InfinitePast when
  // absent; a condition that is not readable is ignored (a hint only: the node agent's gate
  // counts its wait from it, and from the first sight of the pod without it).
  absl::Time scheduled_at = absl::InfinitePast();
  // status.extendedResourceClaimStatus.resourceClaimName: the claim kube-scheduler's PreBind
  // made for the pod's extended resources on a DRA node (DRA fact sheet §2). "" when absent or
  // not readable: read leniently, like scheduled_at, since a failed attempt's claim is told
  // apart by it only (PodRecord::dra_claim), never a reason to refuse the pod.
  std::string extended_resource_claim;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> node_selector;
  // spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.
  // nodeSelectorTerms[].matchExpressions (terms ORed, requirements ANDed); matchFields and
  // preferred terms are not kept. kube-scheduler filters on them before asking us; fgd's task
  // mix reads which GPU products a pod accepts from them.
  std::vector<std::vector<NodeSelectorRequirement>> required_node_terms;
  std::vector<ContainerResources> containers;
  std::vector<ContainerResources> init_containers;
  std::map<std::string, int64_t> overhead_milli;  // spec.overhead (RuntimeClass), milli-units

  std::string Key() const { return namespace_name + "/" + name; }
  // Succeeded or Failed: holds nothing any more.
  bool Terminal() const { return phase == "Succeeded" || phase == "Failed"; }
};

// a + b with both taken within [0, cap] and the sum saturating at cap (> 0): no overflow for
// any inputs.
inline int64_t SaturatingAddUpTo(int64_t a, int64_t b, int64_t cap) {
  a = std::clamp<int64_t>(a, 0, cap);
  b = std::clamp<int64_t>(b, 0, cap);
  return a > cap - b ? cap : a + b;
}

// A pod's request for one resource as Kubernetes aggregates its containers' (component-
// helpers' AggregateContainerRequests, which kube-scheduler's NodeResourcesFit, the DRA
// extended-resource claim and, device by device, kubelet's device manager all follow):
//   max(sum over app containers and sidecars,
//       max over each other init container i of (its request + the sidecars before i)).
// An init container's devices pass to the containers after it; a sidecar's stay its own.
// `of(container)` is one container's request; each is taken within [0, cap] and every sum
// saturates at `cap` (> 0), so hostile quantities never overflow.
template <typename Of>
int64_t AggregatePodRequest(const PodObject& pod, const Of& of, int64_t cap) {
  auto add = [cap](int64_t a, int64_t b) { return SaturatingAddUpTo(a, b, cap); };
  int64_t running = 0;  // app containers and sidecars: they run together
  for (const ContainerResources& c : pod.containers) running = add(running, of(c));
  int64_t sidecars = 0;   // the sidecars started so far
  int64_t init_peak = 0;  // the most any init container needs while it runs
  for (const ContainerResources& c : pod.init_containers) {
    const int64_t own = of(c);
    if (c.restartable) {
      running = add(running, own);
      sidecars = add(sidecars, own);
      init_peak = std::max(init_peak, sidecars);
    } else {
      init_peak = std::max(init_peak, add(own, sidecars));
    }
  }
  return std::max(running, init_peak);
}

// What a pod asks of its node's cpu and memory as kube-scheduler counts it (its
// NodeResourcesFit computePodResourceRequest): per resource, AggregatePodRequest +
// spec.overhead. Not modelled: in-place resize (status.containerStatuses[].allocatedResources):
// spec requests are counted. Each result is capped at kMaxHostRequest so that sums over any number of
// pods stay exact in 64 bits (ClusterState keeps them; pods beyond it are hostile input).
inline constexpr int64_t kMaxHostRequest = int64_t{1} << 44;
struct HostRequest {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;  // milli-units rounded up to whole bytes, as Quantity.Value()
  bool operator==(const HostRequest& o) const {
    return cpu_milli == o.cpu_milli && memory_bytes == o.memory_bytes;
  }
};
HostRequest PodHostRequest(const PodObject& pod);

struct NamespaceObject {
  std::string name;
  std::map<std::string, std::string> labels;
};

struct ResourceQuotaObject {
  std::string name;
  std::string namespace_name;
  std::map<std::string, int64_t> hard_milli;  // spec.hard
};

// Everything one document held, in document order per kind.
struct ObjectBatch {
  std::vector<NodeObject> nodes;
  std::vector<PodObject> pods;
  std::vector<NamespaceObject> namespaces;
  std::vector<ResourceQuotaObject> quotas;
  int ignored_objects = 0;  // other kinds (Services, ...) in a mixed List
};

// Parses a document: a single object with `kind`, or a List/NodeList/PodList/... whose items
// carry `kind` (or take it from the list's kind). Unknown kinds are counted and skipped.
absl::StatusOr<ObjectBatch> DecodeObjects(absl::string_view json);

// One line of a watch stream, `{"type":"ADDED","object":{...}}`, parsed strictly (json_reader.h)
// into `doc`. Returns the event's object and sets `type` (not checked against the known
// types: the caller decides). InvalidArgument naming the offset or the field otherwise:
//   invalid JSON at offset 40: Unescaped control character U+001A.
//   watch event: type: missing (or not a non-empty string)
//   watch event: object: missing (or not an object)
absl::StatusOr<const rapidjson::Value*> ParseWatchEventLine(absl::string_view line,
                                                            rapidjson::Document& doc,
                                                            std::string* type);

// Decoders for objects whose kind is known from context (extender requests send no kind).
// `path` prefixes error messages ("Pod", "Nodes.items[3]").
absl::StatusOr<NodeObject> DecodeNode(const rapidjson::Value& value, absl::string_view path);
absl::StatusOr<PodObject> DecodePod(const rapidjson::Value& value, absl::string_view path);

// A Node's metadata.name and metadata.resourceVersion, validated exactly as DecodeNode
// validates them, without decoding the rest: callers that already applied a node at that
// resourceVersion (kube-scheduler resends the same Node objects on every filter call) skip
// the full decode.
struct ObjectIdentity {
  std::string name;
  std::string resource_version;
};
absl::StatusOr<ObjectIdentity> DecodeNodeIdentity(const rapidjson::Value& value,
                                                  absl::string_view path);
absl::StatusOr<NamespaceObject> DecodeNamespace(const rapidjson::Value& value,
                                                absl::string_view path);
absl::StatusOr<ResourceQuotaObject> DecodeResourceQuota(const rapidjson::Value& value,
                                                        absl::string_view path);

// DecodeNodeIdentity, from `captured` (the parser's note on this item) when it suffices.
absl::StatusOr<ObjectIdentity> DecodeNodeIdentity(const rapidjson::Value& value,
                                                  absl::string_view path,
                                                  const ListIdentities::Item* captured);

}  // namespace gse

#endif  // GSE_STATE_K8S_OBJECTS_H_
