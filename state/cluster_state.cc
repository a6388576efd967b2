// ClusterState: construction, lookups and whole documents. The rest of the class lives in one
// file per concept (see cluster_state_internal.h for the list).
#include "state/cluster_state.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gse {

bool OfferingSelectsNode(const Offering& offering, const NodeState& node) {
  for (const auto& [key, value] : offering.node_selector) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return false;
  }
  return true;
}

const NodeOffering* NodeState::Find(OfferingId id) const {
  for (const NodeOffering& no : offerings) {
    if (no.offering == id) return &no;
  }
  return nullptr;
}

NodeOffering* NodeState::Find(OfferingId id) {
  for (NodeOffering& no : offerings) {
    if (no.offering == id) return &no;
  }
  return nullptr;
}

ClusterState::ClusterState(std::shared_ptr<const Catalog> catalog, MirrorOptions options)
    : catalog_(std::move(catalog)),
      options_(std::move(options)),
      room_rows_(catalog_->size(), std::vector<RoomRow>(1)),
      open_units_(catalog_->size(), 0) {
  BumpNodeSetVersion();
  RecomputeQuotas();  // the static quotas apply before any ResourceQuota arrives
  RefreshDraDrift();  // DRA mode: every catalog DeviceClass is missing until one arrives
}

void ClusterState::BumpNodeSetVersion() {
  // Process-wide, so that a fresh state (Mirror::ReplaceAll) never repeats an old value.
  static std::atomic<uint64_t> next{1};
  node_set_version_ = next.fetch_add(1, std::memory_order_relaxed);
}

void ClusterState::TouchNode(NodeState& node) {
  // Process-wide like the node set's version: a value names one state of one node of one
  // ClusterState, so a cache keyed by it never confuses two states or two nodes.
  static std::atomic<uint64_t> next{1};
  node.version = next.fetch_add(1, std::memory_order_relaxed);
  if (node.slot != kUnknownSlot && node.slot < slot_versions_.size()) {
    slot_versions_[node.slot] = node.version;
  }
}

void ClusterState::TouchNode(absl::string_view name) {
  auto it = nodes_.find(name);
  if (it != nodes_.end()) TouchNode(*it->second);
}

const NodeState* ClusterState::FindNode(absl::string_view name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : it->second.get();
}

std::vector<const NodeState*> ClusterState::FindNodes(
    const std::vector<absl::string_view>& names) const {
  // Hash-table slots are fetched kAhead names early, each found node as it is found (the
  // caller reads it next), so that the lookups overlap their cache misses.
  constexpr size_t kAhead = 8;
  std::vector<const NodeState*> out(names.size(), nullptr);
  for (size_t i = 0; i < names.size() && i < kAhead; ++i) nodes_.prefetch(names[i]);
  for (size_t i = 0; i < names.size(); ++i) {
    if (i + kAhead < names.size()) nodes_.prefetch(names[i + kAhead]);
    auto it = nodes_.find(names[i]);
    if (it == nodes_.end()) continue;
    const NodeState* node = it->second.get();
    __builtin_prefetch(node);
    out[i] = node;
  }
  return out;
}


void ClusterState::ApplyBatch(const ObjectBatch& batch, const DraObjectBatch* dra) {
  // Namespaces and quotas first (projects and quotas are then right for the pods), with one
  // quota recomputation instead of one per object.
  for (const NamespaceObject& ns : batch.namespaces) {
    std::map<std::string, std::string> kept;
    auto label = ns.labels.find(options_.project_label);
    if (label != ns.labels.end()) kept.emplace(label->first, label->second);
    namespace_labels_[ns.name] = std::move(kept);
  }
  for (const ResourceQuotaObject& quota : batch.quotas) {
    quotas_[absl::StrCat(quota.namespace_name, "/", quota.name)] = quota;
  }
  RecomputeQuotas();
  // DRA objects before the nodes (their DRA-backed offerings) and the pods (their claims).
  if (dra != nullptr) ReplaceDra(*dra);
  for (const NodeObject& node : batch.nodes) ApplyNode(node);
  for (const PodObject& pod : batch.pods) ApplyPod(pod);
}


}  // namespace gse
