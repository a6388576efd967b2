// ResolvePodRequest: what a pod asks of the GPU catalog, computed the way kube-scheduler
// computes a pod's effective request (max(sum over containers, max over init containers)), so
// that our view of "how much" never disagrees with the scheduler's own resource fit.
#include "scoring/pod_request.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "state/assignment.h"

namespace gse {
namespace {

constexpr int64_t kMilli = 1000;

// Fixed reasons (kube-scheduler groups identical messages; no names or numbers inside).
constexpr char kTwoOfferings[] = "pod requests more than one GPU offering";
constexpr char kTwoTickets[] = "more than one time-sliced ticket requested";
constexpr char kTooManyShares[] = "more shares than one unit has";
constexpr char kFractional[] = "GPU resource amount must be a whole number";
constexpr char kTooManyUnits[] = "more GPU units than one pod may hold";

// Hostile specs may carry huge quantities; saturate instead of overflowing.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > std::numeric_limits<int64_t>::max() - b) {
    return std::numeric_limits<int64_t>::max();
  }
  if (b < 0 && a < std::numeric_limits<int64_t>::min() - b) {
    return std::numeric_limits<int64_t>::min();
  }
  return a + b;
}

struct Demand {
  int64_t sum_milli = 0;       // over regular containers
  int64_t max_init_milli = 0;  // over init containers
  bool fractional = false;     // some container asked for a fraction of a unit
};

// Adds one container's catalog resources to `demand`, per offering. A container that names an
// offering twice (canonical name and alias) asks for both amounts of the same thing.
void AddContainer(const Catalog& catalog, const ContainerResources& c, bool init,
                  std::map<OfferingId, Demand>& demand) {
  std::map<OfferingId, int64_t> per_container;
  auto take = [&](const std::string& key, int64_t milli) {
    const Offering* o = catalog.Find(key);
    if (o == nullptr) return;  // cpu, memory, other vendors' resources: not ours
    Demand& d = demand[o->id];
    if (milli % kMilli != 0) d.fractional = true;
    per_container[o->id] = SaturatingAdd(per_container[o->id], milli);
  };
  // Kubernetes defaults a missing request to the limit; a present request wins.
  for (const auto& [key, milli] : c.requests_milli) take(key, milli);
  for (const auto& [key, milli] : c.limits_milli) {
    if (c.requests_milli.count(key) == 0) take(key, milli);
  }
  for (const auto& [id, milli] : per_container) {
    Demand& d = demand[id];
    if (init) {
      d.max_init_milli = std::max(d.max_init_milli, milli);
    } else {
      d.sum_milli = SaturatingAdd(d.sum_milli, milli);
    }
  }
}

}  // namespace

PodRequest ResolvePodRequest(const Catalog& catalog, const PodObject& pod, std::string project) {
  PodRequest request;
  request.project = std::move(project);
  request.host = PodHostRequest(pod);
  request.host_known = true;

  std::map<OfferingId, Demand> demand;
  for (const auto& c : pod.containers) AddContainer(catalog, c, /*init=*/false, demand);
  for (const auto& c : pod.init_containers) AddContainer(catalog, c, /*init=*/true, demand);

  // A resource named with quantity 0 asks for nothing: kube-scheduler sends such pods because
  // the name matches managedResources, and the mirror does not count them either.
  for (auto it = demand.begin(); it != demand.end();) {
    const Demand& d = it->second;
    if (!d.fractional && std::max(d.sum_milli, d.max_init_milli) <= 0) {
      it = demand.erase(it);
    } else {
      ++it;
    }
  }
  if (demand.empty()) return request;  // I6: not ours, passes every node untouched
  if (demand.size() > 1) {
    // One pod, one offering: a unit choice covers exactly one resource name.
    request.unresolvable = kTwoOfferings;
    return request;
  }

  const auto& [id, d] = *demand.begin();
  const Offering& offering = catalog.Get(id);
  request.offering = id;
  const int64_t milli = std::max(d.sum_milli, d.max_init_milli);
  if (d.fractional || milli % kMilli != 0) {
    request.unresolvable = kFractional;
    return request;
  }
  request.amount = milli / kMilli;
  switch (offering.sharing) {
    case Sharing::kTimeSliced:
      // I5: a ticket is shared access, not capacity; two tickets would promise nothing more.
      if (request.amount != 1) request.unresolvable = kTwoTickets;
      break;
    case Sharing::kMps:
      if (request.amount > offering.replicas || request.amount > kMaxAmountPerUnit) {
        request.unresolvable = kTooManyShares;
      }
      break;
    case Sharing::kExclusive:
      if (request.amount > kMaxUnitsPerPod) request.unresolvable = kTooManyUnits;
      break;
  }
  return request;
}

}  // namespace gse
