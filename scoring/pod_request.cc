// ResolvePodRequest: what a pod asks of the GPU catalog, computed the way kube-scheduler
// computes a pod's effective request (PodCatalogDemand, state/unit_rules.h), so
// that our view of "how much" never disagrees with the scheduler's own resource fit.
#include "scoring/pod_request.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "state/assignment.h"
#include "state/unit_rules.h"

namespace gse {
namespace {

constexpr int64_t kMilli = 1000;

// Fixed reasons (kube-scheduler groups identical messages; no names or numbers inside).
constexpr char kTwoOfferings[] = "pod requests more than one GPU offering";
constexpr char kTwoTickets[] = "more than one time-sliced ticket requested";
constexpr char kTooManyShares[] = "more shares than one unit has";
constexpr char kFractional[] = "GPU resource amount must be a whole number";
constexpr char kTooManyUnits[] = "more GPU units than one pod may hold";

}  // namespace

PodRequest ResolvePodRequest(const Catalog& catalog, const PodObject& pod, std::string project) {
  PodRequest request;
  request.project = std::move(project);
  request.host = PodHostRequest(pod);
  request.host_known = true;

  // Every offering some container names, with the pod's aggregate request of it.
  std::set<OfferingId> fractional;
  std::map<OfferingId, int64_t> demand = PodCatalogDemand(catalog, pod, &fractional);

  // A resource named with quantity 0 asks for nothing: kube-scheduler sends such pods because
  // the name matches managedResources, and the mirror does not count them either.
  for (auto it = demand.begin(); it != demand.end();) {
    if (fractional.count(it->first) == 0 && it->second <= 0) {
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

  const auto& [id, milli] = *demand.begin();
  const Offering& offering = catalog.Get(id);
  request.offering = id;
  if (fractional.count(id) != 0 || milli % kMilli != 0) {
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
