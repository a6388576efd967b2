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

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rapidjson/document.h"

namespace gse {

// Hard limits on hostile input, applied by every decoder.
inline constexpr size_t kMaxJsonBytes = 256u << 20;  // whole document
inline constexpr int kMaxJsonDepth = 64;             // nesting of objects/arrays
inline constexpr size_t kMaxNameBytes = 253;          // DNS subdomain, as Kubernetes

// Why `uid` cannot be a Kubernetes UID ("" when it can): longer than kMaxNameBytes, or a
// control character inside (the mirror keys pods by UID, see cluster_state.h PodIdOf). Every
// decoded metadata.uid passes this check.
std::string UidProblem(absl::string_view uid);

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
};

struct ContainerResources {
  std::string name;
  std::map<std::string, int64_t> requests_milli;
  std::map<std::string, int64_t> limits_milli;
};

struct PodObject {
  std::string name;
  std::string namespace_name;
  std::string uid;
  std::string resource_version;
  std::string node_name;  // spec.nodeName, "" while pending
  std::string phase;      // status.phase
  std::string scheduler_name;
  bool terminating = false;  // metadata.deletionTimestamp set
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> node_selector;
  std::vector<ContainerResources> containers;
  std::vector<ContainerResources> init_containers;

  std::string Key() const { return namespace_name + "/" + name; }
  // Succeeded or Failed: holds nothing any more.
  bool Terminal() const { return phase == "Succeeded" || phase == "Failed"; }
};

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

// Parses JSON with the limits above (size; depth, refused before the parser nests deeper, so
// hostile nesting cannot overflow the stack). This overload copies the strings into `doc`.
absl::Status ParseJsonLimited(absl::string_view text, rapidjson::Document& doc);

// A member of the top-level object that is an array of strings (or null), collected while
// parsing instead of stored in the document: kube-scheduler's 5,000-name candidate list then
// costs no DOM values and no second walk over them. The member is left out of the document.
// Each element is checked as it arrives; the first bad one stops the parse with `error` set
// to an InvalidArgument that names it ("NodeNames[3]: must be a string, got number"), as do
// a value that is neither an array nor null and a second occurrence of the key.
struct StringListMember {
  explicit StringListMember(absl::string_view k, size_t max) : key(k), max_bytes(max) {}
  const absl::string_view key;
  const size_t max_bytes;  // longest element allowed; empty elements are refused too
  bool present = false;    // the member was given with an array (absent and null: false)
  std::vector<absl::string_view> values;  // views into the parsed buffer
  // No element holds a character that JSON must escape: each can be written back between
  // quotes as it is (NeedsJsonEscaping, checked only when the text holds a backslash).
  bool plain = true;
  absl::Status error;
};

// The identities (metadata.name, metadata.resourceVersion) of the items of a List-valued
// top-level member (kube-scheduler's "Nodes"), noted while parsing, as views into the buffer:
// by the time a decoder walks 5,000 parsed Node objects they have left the caches, and
// finding two strings in each then costs more than the parse. Nothing is validated here;
// DecodeNodeIdentity uses an item's capture only when it shows that the item passes the same
// checks (one metadata object, one name string, no repeated key it reads) and decodes the
// item itself otherwise, so results and errors are the same either way.
struct ListIdentities {
  explicit ListIdentities(absl::string_view k) : key(k) {}
  const absl::string_view key;  // the top-level member holding {"items":[...]}
  struct Item {
    absl::string_view name;
    absl::string_view resource_version;
    bool complete = false;  // the capture alone decides this item's identity
  };
  // Parallel to the member's items, when `usable` (the member and its items given once).
  std::vector<Item> items;
  bool usable = true;
};

// DecodeNodeIdentity, from `captured` (the parser's note on this item) when it suffices.
absl::StatusOr<ObjectIdentity> DecodeNodeIdentity(const rapidjson::Value& value,
                                                  absl::string_view path,
                                                  const ListIdentities::Item* captured);

// Whether `s` holds a character that a JSON string must escape (a control character, '"' or
// '\\'), 8 bytes at a time.
bool NeedsJsonEscaping(absl::string_view s);

// In-situ variant: parses `buffer` in place (about twice as fast on big bodies); `buffer`
// must be NUL-terminated and outlive `doc`. With `list`, that member is collected on the way
// (its `error`, when set, is the returned status).
// With `identities`, those are noted too.
absl::Status ParseJsonInSituLimited(char* buffer, size_t length, rapidjson::Document& doc,
                                    StringListMember* list = nullptr,
                                    ListIdentities* identities = nullptr);

}  // namespace gse

#endif  // GSE_STATE_K8S_OBJECTS_H_
