// Random DRA objects for the suites that check DraState's indexes and ClusterState's
// re-derivation against a recomputation (seeded: a failure replays). Small name spaces on
// purpose, so that upserts often update an existing object (a slice moving to another node, a
// claim re-allocated or deallocated) and results often name a device that some slice has.
#ifndef GSE_TESTS_TESTING_DRA_RANDOM_H_
#define GSE_TESTS_TESTING_DRA_RANDOM_H_

#include <random>
#include <string>
#include <vector>

#include "state/dra_objects.h"

namespace gse::testing {

// Slice s0..s11 of driver gpu.nvidia.com (sometimes another), pool p0..p2, generation and
// resourceSliceCount 1..2; on one of `nodes` (nodeName), or allNodes, or (rarely) a
// nodeSelector; 1..3 devices d0..d4 with type mig|gpu, profile 1g.5gb|2g.10gb, a uuid, and
// sometimes allowMultipleAllocations with a `shares` capacity (with or without a policy).
DraResourceSlice RandomDraSlice(std::mt19937_64& rng, const std::vector<std::string>& nodes);

// Claim ns/c0..c9 requesting `device_class`: the scheduler's extended-resource claim (owner
// pod) or a user's (reservedFor 0..2 pods); 70% allocated on one of `nodes` with 1..2 results
// naming device d0..d4 of pool p0..p2 (sometimes admin access, sometimes no consumed
// capacity).
DraResourceClaim RandomDraClaim(std::mt19937_64& rng, const std::vector<std::string>& nodes,
                                const std::string& device_class);

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_DRA_RANDOM_H_
