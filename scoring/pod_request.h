// What a pod asks of the GPU catalog: offering, amount, project.
//
// Pure functions, no I/O, no locks.
#ifndef GSE_SCORING_POD_REQUEST_H_
#define GSE_SCORING_POD_REQUEST_H_

#include <cstdint>
#include <string>

#include "state/catalog.h"
#include "state/k8s_objects.h"

namespace gse {

struct PodRequest {
  // kNoOffering: the pod asks for no catalog resource; it passes every node untouched (I6).
  OfferingId offering = kNoOffering;
  // Units (exclusive), tickets (time-sliced; must be 1) or shares (mps).
  int64_t amount = 0;
  std::string project;
  // Non-empty when the pod can fit on no node whatever the state (two GPU offerings, more
  // than one time-sliced ticket (I5), more shares than a unit has, a fractional amount):
  // a fixed reason, reported as unresolvable on every node.
  std::string unresolvable;
  // What the pod asks of its node's cpu and memory (PodHostRequest), for policies that count
  // host resources (fgd); host_known is false for a request built without a pod.
  HostRequest host;
  bool host_known = false;

  bool interested() const { return offering != kNoOffering || !unresolvable.empty(); }
};

// Effective amount per resource as kube-scheduler computes it: max(sum over containers,
// max over init containers), taking requests, or limits where no request is given. Aliases
// resolve to their offering; a pod naming two different offerings is unresolvable. An
// offering asked for with quantity 0 is not asked for (I6).
PodRequest ResolvePodRequest(const Catalog& catalog, const PodObject& pod, std::string project);

}  // namespace gse

#endif  // GSE_SCORING_POD_REQUEST_H_
