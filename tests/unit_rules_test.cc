// state/unit_rules.h: the one statement of which project may join a unit (I2), what a join
// costs a project's quota (I4) and a unit's share of a GPU. Feasibility, Reserve, Audit and
// the policies all read these, so a change here changes every one of them at once.
#include "state/unit_rules.h"

#include <string>

#include "gtest/gtest.h"
#include "state/catalog.h"
#include "state/cluster_state.h"

namespace gse {
namespace {

constexpr ProjectId kA = 0;
constexpr ProjectId kB = 1;

Offering Of(Sharing sharing, bool single_project = false) {
  Offering o;
  o.resource = "r";
  o.sharing = sharing;
  o.replicas = 4;
  o.mps_single_project = single_project;
  return o;
}

Unit Held(ProjectId owner, int32_t capacity, int holders, int32_t amount = 1) {
  Unit u;
  u.capacity = capacity;
  u.owner = owner;
  for (int i = 0; i < holders; ++i) {
    u.holders.push_back(Holding{"pod-" + std::to_string(i), amount});
    u.used += amount;
  }
  return u;
}

TEST(UnitAdmits, EmptyUnitsAdmitAnyone) {
  for (Sharing s : {Sharing::kExclusive, Sharing::kTimeSliced, Sharing::kMps}) {
    EXPECT_TRUE(UnitAdmits(Of(s), /*empty=*/true, kNoProject, kA));
    EXPECT_TRUE(UnitAdmits(Of(s), /*empty=*/true, kNoProject, kNoProject));
  }
}

TEST(UnitAdmits, ExclusiveUnitsAdmitNoSecondHolder) {
  EXPECT_FALSE(UnitAdmits(Of(Sharing::kExclusive), false, kA, kA));
  EXPECT_FALSE(UnitAdmits(Of(Sharing::kExclusive), false, kA, kB));
}

TEST(UnitAdmits, TimeSlicedUnitsAdmitOnlyTheirOwner) {
  const Offering ts = Of(Sharing::kTimeSliced);
  EXPECT_TRUE(UnitAdmits(ts, false, kA, kA));
  EXPECT_FALSE(UnitAdmits(ts, false, kA, kB));
  // Holders of several (or unknown) projects: no owner, nobody joins.
  EXPECT_FALSE(UnitAdmits(ts, false, kNoProject, kA));
  // A project never seen cannot own anything.
  EXPECT_FALSE(UnitAdmits(ts, false, kNoProject, kNoProject));
}

TEST(UnitAdmits, MpsUnitsAreSharedUnlessSingleProject) {
  EXPECT_TRUE(UnitAdmits(Of(Sharing::kMps), false, kA, kB));
  EXPECT_TRUE(UnitAdmits(Of(Sharing::kMps), false, kNoProject, kB));
  const Offering single = Of(Sharing::kMps, /*single_project=*/true);
  EXPECT_TRUE(UnitAdmits(single, false, kA, kA));
  EXPECT_FALSE(UnitAdmits(single, false, kA, kB));
  EXPECT_TRUE(OneProjectPerUnit(single));
  EXPECT_FALSE(OneProjectPerUnit(Of(Sharing::kMps)));
  EXPECT_TRUE(OneProjectPerUnit(Of(Sharing::kTimeSliced)));
}

TEST(JoinCharge, TimeSlicedChargesTheWholeSliceOnceAndJoiningItsOwnNothing) {
  const Offering ts = Of(Sharing::kTimeSliced);
  const Unit empty = Held(kNoProject, /*capacity=*/4, 0);
  EXPECT_EQ(JoinCharge(ts, empty, ProjectHold{}, 1), 4);  // the slice's real ticket count
  const Unit own = Held(kA, 4, 2);
  EXPECT_EQ(JoinCharge(ts, own, HoldOf(own, kA, [](const Holding&) { return kA; }), 1), 0);
}

TEST(JoinCharge, ExclusiveChargesAUnitMpsItsShares) {
  EXPECT_EQ(JoinCharge(Of(Sharing::kExclusive), Held(kNoProject, 1, 0), ProjectHold{}, 1), 1);
  const Unit mps = Held(kA, 4, 1, /*amount=*/2);
  EXPECT_EQ(JoinCharge(Of(Sharing::kMps), mps, HoldOf(mps, kA, [](const Holding&) { return kA; }), 2),
            2);
}

TEST(HoldOf, CountsOnlyTheProjectsHolders) {
  const Unit u = Held(kA, 4, 3, /*amount=*/1);
  auto project_of = [](const Holding& h) { return h.pod_id == "pod-1" ? kB : kA; };
  const ProjectHold a = HoldOf(u, kA, project_of);
  EXPECT_EQ(a.holdings, 2);
  EXPECT_EQ(a.amount, 2);
  EXPECT_EQ(HoldOf(u, kB, project_of).holdings, 1);
  EXPECT_EQ(HoldOf(u, kNoProject, project_of).holdings, 0);
}

TEST(UnitGpuFraction, WholeGpusAndMigSlicesOfSeven) {
  Offering gpu;
  gpu.unit = UnitKind::kGpu;
  EXPECT_DOUBLE_EQ(UnitGpuFraction(gpu), 1.0);
  Offering mig;
  mig.unit = UnitKind::kMig;
  mig.mig_profile = "3g.20gb";
  EXPECT_DOUBLE_EQ(UnitGpuFraction(mig), 3.0 / 7.0);
  mig.mig_profile = "7g.80gb";
  EXPECT_DOUBLE_EQ(UnitGpuFraction(mig), 1.0);
  // A profile that names no compute slices counts as the smallest slice.
  mig.mig_profile = "odd";
  EXPECT_DOUBLE_EQ(UnitGpuFraction(mig), 1.0 / 7.0);
}

}  // namespace
}  // namespace gse
