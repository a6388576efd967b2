// Decoding of the DRA objects (resource.k8s.io/v1) the extender mirrors in DRA mode:
// DeviceClass, ResourceSlice, ResourceClaim, and a Pod's status.extendedResourceClaimStatus
// (shared/protocol/dra/README.md, the DRA fact sheet: §1 objects, §2 KEP-5004).
//
// As state/k8s_objects.h: documents come from the strict, limited JSON reader (json_reader.h);
// only the fields the DRA model needs are kept; a key we read that appears twice is an error;
// errors are InvalidArgument naming the JSON path and the reason, e.g.
//   ResourceSlice.spec.devices[3].name: missing
//   items[0].spec.pool.generation: expected an integer, got a string
//   ResourceSlice.spec.devices: 129 devices, at most 128
// The API server's own validation limits (counts, lengths) are enforced again here: a body
// past them did not come from a conforming API server, and the model's walks stay bounded.
// Decoding never touches any state. All functions are pure and thread-safe.
#ifndef GSE_STATE_DRA_OBJECTS_H_
#define GSE_STATE_DRA_OBJECTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rapidjson/document.h"

namespace gse {

// resource.k8s.io/v1 validation limits (k8s.io/api/resource/v1 types.go), enforced here.
inline constexpr size_t kDraMaxSelectors = 32;            // DeviceSelectorsMaxSize
inline constexpr size_t kDraMaxCelBytes = 10 * 1024;      // CELSelectorExpressionMaxLength
inline constexpr size_t kDraMaxDevicesPerSlice = 128;     // ResourceSliceMaxDevices
inline constexpr size_t kDraMaxAttributesAndCapacities = 32;  // per device
inline constexpr size_t kDraMaxAttributeValueBytes = 64;  // DeviceAttributeMaxValueLength
inline constexpr size_t kDraMaxTaintsPerDevice = 16;      // DeviceTaintsMaxLength (1.35+)
inline constexpr size_t kDraMaxCountersPerDevice = 2;     // ResourceSliceMaxDeviceCounterConsumptionsPerDevice
inline constexpr size_t kDraMaxSharedCounters = 8;        // ResourceSliceMaxSharedCounters
inline constexpr size_t kDraMaxRequests = 32;             // DeviceRequestsMaxSize
inline constexpr size_t kDraMaxResults = 32;              // AllocationResultsMaxSize
inline constexpr size_t kDraMaxReservedFor = 256;         // ResourceClaimReservedForMaxSize
inline constexpr size_t kDraMaxDriverBytes = 63;          // DriverNameMaxLength
inline constexpr size_t kDraMaxDeviceNameBytes = 63;      // a DNS label
inline constexpr size_t kDraMaxRequestMappings = 1024;    // ours: containers x resources

// Annotation that marks the scheduler's extended-resource claim (fact sheet §2).
inline constexpr absl::string_view kExtendedResourceClaimAnnotation =
    "resource.kubernetes.io/extended-resource-claim";
// Annotation that `catalog render --what=device-classes` puts on each DeviceClass: the node
// label ("key=value") that marks the nodes where the DRA driver serves the class's name
// (kDefaultDraNodeLabel, the NVIDIA DRA driver's kubelet-plugin node label). DRA mode reads it
// back and reports nodes whose label and kind disagree (/debug/state).
inline constexpr absl::string_view kDraNodeLabelAnnotation = "gpu.themelio.io/dra-node-label";
inline constexpr absl::string_view kDefaultDraNodeLabel = "nvidia.com/dra-kubelet-plugin=true";
// The implicit extended resource name of every DeviceClass: this prefix + the class name.
inline constexpr absl::string_view kImplicitExtendedResourcePrefix =
    "deviceclass.resource.kubernetes.io/";

struct DraDeviceClass {
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string creation_timestamp;  // RFC 3339 as sent ("" when absent); orders name clashes
  std::vector<std::string> cel_selectors;  // spec.selectors[].cel.expression, all must match
  // Selectors of another kind than cel (none exists in v1; a newer server may add one): the
  // class cannot be evaluated and is reported, never guessed.
  int other_selectors = 0;
  std::string extended_resource_name;  // spec.extendedResourceName, "" when absent
  // kDraNodeLabelAnnotation split at its first '=' (both "" when absent or unusable). Read
  // leniently: a bad value never costs the class its name mapping; `node_label_problem`
  // names the field and the reason instead.
  std::string node_label_key;
  std::string node_label_value;
  std::string node_label_problem;
};

struct DraAttribute {
  enum Kind { kInt, kBool, kString, kVersion };
  Kind kind = kString;
  int64_t int_value = 0;
  bool bool_value = false;
  std::string text;  // kString and kVersion
};

struct DraCapacity {
  int64_t value_milli = 0;  // capacity.value (a Quantity) in milli-units
  // requestPolicy: only with allowMultipleAllocations. Without one a share consumes the full
  // value (fact sheet §3).
  bool has_policy = false;
  std::optional<int64_t> default_milli;  // requestPolicy.default
  // requestPolicy.validRange (min, max?, step?) or validValues; kept for rounding.
  std::optional<int64_t> range_min_milli, range_max_milli, range_step_milli;
  std::vector<int64_t> valid_values_milli;
};

struct DraDeviceTaint {
  std::string key, value, effect;  // effect None | NoSchedule | NoExecute
};

struct DraDevice {
  std::string name;
  // Attribute names qualified with their domain: an unqualified name ("type") is in the
  // driver's domain and kept as "<driver>/type"; "resource.kubernetes.io/pciBusID" as given.
  std::map<std::string, DraAttribute> attributes;
  std::map<std::string, DraCapacity> capacity;
  bool allow_multiple_allocations = false;
  int consumes_counters = 0;  // consumesCounters entries (partitionable devices)
  std::vector<DraDeviceTaint> taints;
  // Per-device node fields (perDeviceNodeSelection slices): nodeName, nodeSelector, allNodes.
  std::string node_name;
  bool node_selector = false;
  bool all_nodes = false;
  bool binds_to_node = false;
  bool binding_conditions = false;

  // The attribute in `domain` named `name`, nullptr when absent.
  const DraAttribute* Attribute(absl::string_view domain, absl::string_view name) const;
};

struct DraResourceSlice {
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string driver;
  std::string pool_name;
  int64_t pool_generation = 0;
  int64_t resource_slice_count = 0;
  // Exactly one of these four is set (validated).
  std::string node_name;
  bool node_selector = false;
  bool all_nodes = false;
  bool per_device_node_selection = false;
  std::vector<DraDevice> devices;
  int shared_counters = 0;  // sharedCounters entries (a counter slice has no devices)
};

struct DraDeviceRequest {
  std::string name;
  bool first_available = false;  // a prioritized list: not "exactly"
  std::string device_class_name;  // exactly.deviceClassName ("" with first_available)
  std::string allocation_mode = "ExactCount";  // ExactCount | All
  int64_t count = 1;
  int selectors = 0;  // exactly.selectors count
  bool admin_access = false;
  std::map<std::string, int64_t> capacity_requests_milli;  // exactly.capacity.requests
};

struct DraAllocationResult {
  std::string request;  // "req" or "req/sub"
  std::string driver;
  std::string pool;
  std::string device;
  bool admin_access = false;
  std::string share_id;  // set for shares of an allowMultipleAllocations device
  std::map<std::string, int64_t> consumed_capacity_milli;
};

struct DraConsumerReference {
  std::string api_group;
  std::string resource;  // "pods" for pods
  std::string name;
  std::string uid;
};

struct DraResourceClaim {
  std::string name;
  std::string namespace_name;
  std::string uid;
  std::string resource_version;
  bool terminating = false;  // metadata.deletionTimestamp set
  // Annotation resource.kubernetes.io/extended-resource-claim == "true".
  bool extended_resource_annotation = false;
  // The controller ownerReference when it is a v1 Pod (name, uid); empty otherwise.
  std::string owner_pod_name;
  std::string owner_pod_uid;
  std::vector<DraDeviceRequest> requests;
  bool allocated = false;  // status.allocation present
  std::vector<DraAllocationResult> results;
  // The node of status.allocation.nodeSelector when it is the allocator's single
  // matchFields metadata.name In [node] term; "" otherwise.
  std::string allocation_node;
  std::vector<DraConsumerReference> reserved_for;

  // The scheduler's extended-resource claim: annotated and controlled by its Pod.
  bool IsExtendedResourceClaim() const {
    return extended_resource_annotation && !owner_pod_uid.empty();
  }
  std::string Key() const { return namespace_name + "/" + name; }
};

// A Pod's status.extendedResourceClaimStatus (KEP-5004), written at PreBind.
struct DraExtendedResourceClaimStatus {
  struct RequestMapping {
    std::string container_name;
    std::string resource_name;
    std::string request_name;
  };
  std::vector<RequestMapping> request_mappings;
  std::string resource_claim_name;
};

// Decoders for objects whose kind is known; `path` prefixes errors ("ResourceSlice",
// "items[3]"). `kind` and `apiVersion` are not required (list items may lack them); when
// present, apiVersion must be resource.k8s.io/v1 (v1beta1/v1beta2 have other shapes).
absl::StatusOr<DraDeviceClass> DecodeDeviceClass(const rapidjson::Value& value,
                                                 absl::string_view path);
absl::StatusOr<DraResourceSlice> DecodeResourceSlice(const rapidjson::Value& value,
                                                     absl::string_view path);
absl::StatusOr<DraResourceClaim> DecodeResourceClaim(const rapidjson::Value& value,
                                                     absl::string_view path);
// From a whole Pod object: nullopt when status.extendedResourceClaimStatus is absent.
absl::StatusOr<std::optional<DraExtendedResourceClaimStatus>> DecodeExtendedResourceClaimStatus(
    const rapidjson::Value& pod, absl::string_view path);

// Everything one document held: a single DeviceClass/ResourceSlice/ResourceClaim, or a
// List / DeviceClassList / ResourceSliceList / ResourceClaimList whose items carry a kind or
// take it from the list's. Other kinds are counted and skipped.
struct DraObjectBatch {
  std::vector<DraDeviceClass> device_classes;
  std::vector<DraResourceSlice> resource_slices;
  std::vector<DraResourceClaim> resource_claims;
  int ignored_objects = 0;
};
absl::StatusOr<DraObjectBatch> DecodeDraObjects(absl::string_view json);

}  // namespace gse

#endif  // GSE_STATE_DRA_OBJECTS_H_
