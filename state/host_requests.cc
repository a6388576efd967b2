// ClusterState's host view: per node, the summed cpu, memory and pod-slot requests of the
// pods bound there (cluster_state.h "the host view"), against the node's allocatable.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "state/cluster_state.h"
#include "state/unit_rules.h"

namespace gse {
namespace {

// Sums wrap modulo 2^64 instead of overflowing (exact while the true sum fits, which
// kMaxHostRequest guarantees for any realistic pod count).
int64_t Wrap(int64_t a, int64_t b, int sign) {
  const uint64_t ub = static_cast<uint64_t>(b);
  return static_cast<int64_t>(static_cast<uint64_t>(a) + (sign > 0 ? ub : 0 - ub));
}

void AddTo(HostResources& sum, const HostRequest& r, int sign) {
  sum.cpu_milli = Wrap(sum.cpu_milli, r.cpu_milli, sign);
  sum.memory_bytes = Wrap(sum.memory_bytes, r.memory_bytes, sign);
  sum.pods = Wrap(sum.pods, 1, sign);
}

}  // namespace

void ClusterState::UncountHostPod(absl::string_view id) {
  auto it = host_pods_.find(id);
  if (it == host_pods_.end()) return;
  auto* node = it->second.node;
  AddTo(node->second, it->second.request, -1);
  host_pods_.erase(it);
  TouchNode(node->first);  // its host view changed
  if (node->second.pods == 0) host_requested_.erase(host_requested_.find(node->first));
}

void ClusterState::CountHostPod(const std::string& id, const PodObject& pod) {
  if (pod.node_name.empty() || pod.Terminal()) {
    UncountHostPod(id);
    return;
  }
  const HostRequest request = PodHostRequest(pod);
  if (!host_pods_.contains(id)) NoteHostArrival(request, !PodCatalogDemand(*catalog_, pod).empty());
  CountHost(id, pod.node_name, request);
}

int64_t ClusterState::NoteHostArrival(const HostRequest& request, bool asks_for_units) {
  RecentHostDemand& d = recent_host_demand_;
  const double decay = std::exp2(-1.0 / std::max(1.0, options_.host_demand_half_life_pods));
  for (double* sum : {&d.gpu_cpu_milli, &d.gpu_memory_bytes, &d.other_cpu_milli, &d.other_memory_bytes}) {
    *sum *= decay;
  }
  const auto cpu = static_cast<double>(request.cpu_milli);
  const auto memory = static_cast<double>(request.memory_bytes);
  (asks_for_units ? d.gpu_cpu_milli : d.other_cpu_milli) += cpu;
  (asks_for_units ? d.gpu_memory_bytes : d.other_memory_bytes) += memory;
  return ++d.arrivals;
}

void ClusterState::ForgetReservedArrival(const HostRequest& request, int64_t index) {
  RecentHostDemand& d = recent_host_demand_;
  if (index <= 0 || index > d.arrivals) return;  // not noted in this window
  const double half_life = std::max(1.0, options_.host_demand_half_life_pods);
  // What is left of its weight: halved every half-life of newer pods.
  const double weight = std::exp2(-static_cast<double>(d.arrivals - index) / half_life);
  // max(0, ·): the sums are rounded as they decay; never a negative demand.
  d.gpu_cpu_milli = std::max(0.0, d.gpu_cpu_milli - weight * static_cast<double>(request.cpu_milli));
  d.gpu_memory_bytes = std::max(0.0, d.gpu_memory_bytes - weight * static_cast<double>(request.memory_bytes));
  if (index == d.arrivals) {
    // The newest arrival (the usual refusal: nothing arrived since): undo its decay step too,
    // so the window is as if the reservation had never been made.
    const double decay = std::exp2(-1.0 / half_life);
    for (double* sum : {&d.gpu_cpu_milli, &d.gpu_memory_bytes, &d.other_cpu_milli, &d.other_memory_bytes}) {
      *sum /= decay;
    }
    --d.arrivals;
  }
}

void ClusterState::CountHost(const std::string& id, const std::string& node_name,
                             const HostRequest& request) {
  auto it = host_pods_.find(id);
  if (it != host_pods_.end() && it->second.node->first == node_name &&
      it->second.request == request) {
    return;  // a replay (or the watch showing our reservation bound): counted already
  }
  UncountHostPod(id);
  auto* node = &*host_requested_.try_emplace(node_name).first;
  AddTo(node->second, request, +1);
  host_pods_.emplace(id, HostPod{node, request});
  TouchNode(node_name);  // its host view changed
}

void ClusterState::InheritRecentHostDemand(const ClusterState& old) {
  const RecentHostDemand& d = old.recent_host_demand_;
  if (d.arrivals > 0) recent_host_demand_ = d;
}

HostResources ClusterState::HostRequested(absl::string_view node_name) const {
  auto it = host_requested_.find(node_name);
  return it == host_requested_.end() ? HostResources{} : it->second;
}

bool ClusterState::HostFree(const NodeState& node, int64_t* cpu_milli, int64_t* memory_bytes,
                            int64_t* pods) const {
  const HostResources& a = node.allocatable;
  if (node.removed || a.cpu_milli == kHostUnknown || a.memory_bytes == kHostUnknown ||
      a.pods == kHostUnknown) {
    return false;
  }
  const HostResources r = HostRequested(node.name);
  if (cpu_milli != nullptr) *cpu_milli = Wrap(a.cpu_milli, r.cpu_milli, -1);
  if (memory_bytes != nullptr) *memory_bytes = Wrap(a.memory_bytes, r.memory_bytes, -1);
  if (pods != nullptr) *pods = Wrap(a.pods, r.pods, -1);
  return true;
}

}  // namespace gse
