// DraState's per-node indexes (state/dra_state.h): after seeded random sequences of slice and
// claim upserts, updates that move a slice or a claim's devices elsewhere, deletes, DeviceClass
// edits (selectors, extendedResourceName, a second class clashing on the name), relists (a
// fresh state moved in, as ClusterState::ReplaceDra does) and copies, every node's answers
// equal a brute-force recomputation over all objects, and CheckIndexes finds nothing stale
// (neither the per-node indexes nor the parsed selectors nor the name -> class index).
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/dra_objects.h"
#include "state/dra_state.h"
#include "tests/testing/dra_fixtures.h"
#include "tests/testing/dra_random.h"

namespace gse {
namespace {

using ::testing::IsEmpty;

constexpr char kClass[] = "mig-1g-5gb.nvidia.com";  // the fact sheet's class
constexpr char kDriver[] = "gpu.nvidia.com";
const std::vector<std::string> kNodes = {"n0", "n1", "n2", "n3"};

// The mirrored objects as the test knows them: what every answer is recomputed from.
struct Model {
  std::map<std::string, DraResourceSlice> slices;
  std::map<std::string, DraResourceClaim> claims;
  std::map<std::string, DraDeviceClass> classes;  // by name
  // The MIG profile kClass's selector asks for now; "" when its selector is not understood.
  std::string profile = "1g.5gb";
};

constexpr char kOtherClass[] = "other.nvidia.com";
constexpr char kElsewhere[] = "nvidia.com/elsewhere";

// ---- brute force: the node's walk and holders over every object, as the fact sheet defines
// them (no index).

struct WalkDevice {
  DraDeviceId id;
  const DraDevice* device;
};

std::vector<WalkDevice> BruteWalk(const Model& m, const std::string& node) {
  std::map<std::pair<std::string, std::string>, std::vector<const DraResourceSlice*>> pools;
  for (const auto& [name, s] : m.slices) {  // by name
    if (s.node_selector || s.per_device_node_selection) continue;
    if (s.node_name != node && !s.all_nodes) continue;
    pools[{s.driver, s.pool_name}].push_back(&s);
  }
  std::vector<WalkDevice> out;
  for (const auto& [pool, slices] : pools) {
    int64_t generation = 0;
    for (const DraResourceSlice* s : slices) generation = std::max(generation, s->pool_generation);
    std::vector<const DraResourceSlice*> current;
    for (const DraResourceSlice* s : slices) {
      if (s->pool_generation == generation) current.push_back(s);
    }
    const int64_t want = current.front()->resource_slice_count;
    bool ok = static_cast<int64_t>(current.size()) == want;
    std::set<std::string> names;
    for (const DraResourceSlice* s : current) {
      ok = ok && s->resource_slice_count == want;
      for (const DraDevice& d : s->devices) ok = ok && names.insert(d.name).second;
    }
    if (!ok) continue;
    for (const DraResourceSlice* s : current) {
      for (const DraDevice& d : s->devices) out.push_back({{s->driver, s->pool_name, d.name}, &d});
    }
  }
  return out;
}

std::string Render(const DraHolder& h) {
  return absl::StrCat(h.device.ToString(), " ", h.claim_key, " ", h.claim_uid, " ", h.extended,
                      " ", h.pod_name, " ", h.pod_uid, " ", h.request, " ", h.share_id);
}

std::vector<std::string> BruteHolders(const Model& m, const std::string& node) {
  std::set<DraDeviceId> on_node;
  for (const WalkDevice& w : BruteWalk(m, node)) on_node.insert(w.id);
  std::vector<std::string> out;
  for (const auto& [key, c] : m.claims) {  // by key
    if (!c.allocated) continue;
    for (const DraAllocationResult& r : c.results) {
      const DraDeviceId id{r.driver, r.pool, r.device};
      if (r.admin_access || on_node.count(id) == 0) continue;
      DraHolder h{id, key, c.uid, false, "", "", r.request, r.share_id};
      if (c.IsExtendedResourceClaim()) {
        h.extended = true;
        h.pod_name = c.owner_pod_name;
        h.pod_uid = c.owner_pod_uid;
        out.push_back(Render(h));
        continue;
      }
      bool any = false;
      for (const DraConsumerReference& ref : c.reserved_for) {
        h.pod_name = ref.name;
        h.pod_uid = ref.uid;
        out.push_back(Render(h));
        any = true;
      }
      if (!any) out.push_back(Render(h));
    }
  }
  return out;
}

// The class's devices on the node in walk order (the fact sheet class: driver, type 'mig',
// profile m.profile; every generated attribute is a string, so no CEL error).
std::vector<std::string> BruteUnits(const Model& m, const std::string& node) {
  std::vector<std::string> out;
  if (m.profile.empty()) return out;  // not understood: no units
  for (const WalkDevice& w : BruteWalk(m, node)) {
    const DraAttribute* type = w.device->Attribute(kDriver, "type");
    const DraAttribute* profile = w.device->Attribute(kDriver, "profile");
    if (w.id.driver == kDriver && type != nullptr && type->text == "mig" && profile != nullptr &&
        profile->text == m.profile) {
      out.push_back(w.id.ToString());
    }
  }
  return out;
}

// The nodes of the slices in the pools of the claim's results (not admin access); {""} when
// one of them is cluster-wide.
std::vector<std::string> BruteNodesOfClaim(const Model& m, const DraResourceClaim& c) {
  std::set<std::string> nodes;
  if (!c.allocated) return {};
  for (const DraAllocationResult& r : c.results) {
    if (r.admin_access) continue;
    for (const auto& [name, s] : m.slices) {
      if (s.driver != r.driver || s.pool_name != r.pool) continue;
      if (s.all_nodes || s.node_selector || s.per_device_node_selection) return {""};
      nodes.insert(s.node_name);
    }
  }
  return {nodes.begin(), nodes.end()};
}

// The class that maps `resource` by the fact sheet's rule (newer creationTimestamp, then the
// lower name), over every class; "" when none does.
std::string BruteClassFor(const Model& m, const std::string& resource) {
  const DraDeviceClass* best = nullptr;
  for (const auto& [name, c] : m.classes) {
    if (c.extended_resource_name != resource &&
        absl::StrCat(kImplicitExtendedResourcePrefix, name) != resource) {
      continue;
    }
    // By name: on equal timestamps the first (lower) name stays.
    if (best == nullptr || c.creation_timestamp > best->creation_timestamp) best = &c;
  }
  return best == nullptr ? "" : best->name;
}

std::string ClassFor(const DraState& s, const std::string& resource) {
  const DraDeviceClass* c = s.ClassForResource(resource);
  return c == nullptr ? "" : c->name;
}

std::vector<std::string> Holders(const DraState& s, const std::string& node) {
  std::vector<std::string> out;
  for (const DraHolder& h : s.HoldersOn(node)) out.push_back(Render(h));
  return out;
}

std::string Units(const DraNodeUnits& u) {
  std::vector<std::string> ids;
  for (const DraUnit& unit : u.units) ids.push_back(absl::StrCat(unit.id.ToString(), "@", unit.slice));
  return absl::StrCat(u.understood, " [", absl::StrJoin(ids, ","), "] {",
                      absl::StrJoin(u.problems, "; "), "}");
}

std::vector<std::string> UnitIds(const DraNodeUnits& u) {
  std::vector<std::string> out;
  for (const DraUnit& unit : u.units) out.push_back(unit.id.ToString());
  return out;
}

std::string Prediction(const DraPrediction& p) {
  std::vector<std::string> ids;
  for (const DraDeviceId& id : p.devices) ids.push_back(id.ToString());
  return absl::StrCat(p.kind, " [", absl::StrJoin(ids, ","), "] ", p.reason);
}

// A state built afresh from the model, in a shuffled order (a relist's order is the API
// server's).
DraState Fresh(const Model& m, std::mt19937_64& rng) {
  DraState s;
  for (const auto& [name, c] : m.classes) s.UpsertDeviceClass(c);
  std::vector<const DraResourceSlice*> slices;
  for (const auto& [name, sl] : m.slices) slices.push_back(&sl);
  std::shuffle(slices.begin(), slices.end(), rng);
  for (const DraResourceSlice* sl : slices) s.UpsertResourceSlice(*sl);
  std::vector<const DraResourceClaim*> claims;
  for (const auto& [key, c] : m.claims) claims.push_back(&c);
  std::shuffle(claims.begin(), claims.end(), rng);
  for (const DraResourceClaim* c : claims) s.UpsertResourceClaim(*c);
  return s;
}

void ExpectSameAnswers(const DraState& s, const Model& m, std::mt19937_64& rng,
                       const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_THAT(s.CheckIndexes(), IsEmpty());
  const DraState fresh = Fresh(m, rng);
  EXPECT_THAT(fresh.CheckIndexes(), IsEmpty());
  for (const auto& [key, c] : m.claims) {
    EXPECT_EQ(s.NodesOfClaim(c), BruteNodesOfClaim(m, c)) << key;
  }
  for (const std::string resource :
       {"nvidia.com/mig-1g.5gb", kElsewhere, "", "deviceclass.resource.kubernetes.io/mig-1g-5gb.nvidia.com",
        "deviceclass.resource.kubernetes.io/other.nvidia.com"}) {
    EXPECT_EQ(ClassFor(s, resource), BruteClassFor(m, resource)) << "'" << resource << "'";
  }
  for (const std::string& node : kNodes) {
    SCOPED_TRACE(node);
    EXPECT_EQ(Holders(s, node), BruteHolders(m, node));
    const DraNodeUnits units = s.UnitsOf(kClass, node);
    EXPECT_EQ(UnitIds(units), BruteUnits(m, node));
    EXPECT_EQ(Units(units), Units(fresh.UnitsOf(kClass, node)));
    for (bool sorted : {true, false}) {
      for (int64_t count : {1, 2}) {
        EXPECT_EQ(Prediction(s.PredictExtendedResourcePick(kClass, node, count, {sorted})),
                  Prediction(fresh.PredictExtendedResourcePick(kClass, node, count, {sorted})));
      }
    }
  }
}

// One DeviceClass change, in the model and the state: kClass's selectors edited (another
// profile, or a selector outside the understood subset), its extendedResourceName moved, or a
// second class mapping the same name (newer or older) upserted or removed.
std::string RandomClassChange(std::mt19937_64& rng, const DraDeviceClass& base, Model& m,
                              DraState& s) {
  const uint64_t which = rng() % 4;
  if (which == 2) {
    const bool removed = m.classes.erase(kOtherClass) == 1;
    EXPECT_EQ(s.RemoveDeviceClass(kOtherClass), removed);
    return "remove class other";
  }
  DraDeviceClass c = which == 1 ? base : m.classes.at(kClass);
  c.resource_version = absl::StrCat(rng() % 1000);
  std::string what;
  if (which == 0) {
    const std::string profiles[] = {"1g.5gb", "2g.10gb", ""};
    m.profile = profiles[rng() % 3];
    c.cel_selectors = base.cel_selectors;
    if (m.profile.empty()) {
      c.cel_selectors.push_back("device.driver != 'gpu.nvidia.com'");  // '!=': not understood
    } else {
      c.cel_selectors[0] = absl::StrReplaceAll(c.cel_selectors[0], {{"'1g.5gb'", "'" + m.profile + "'"}});
    }
    what = absl::StrCat("class selectors for '", m.profile, "'");
  } else if (which == 1) {
    c.name = kOtherClass;
    c.creation_timestamp = rng() % 2 == 0 ? "2026-11-21T00:00:00Z" : "2026-11-19T00:00:00Z";
    what = absl::StrCat("upsert class other created ", c.creation_timestamp);
  } else {
    c.extended_resource_name = rng() % 2 == 0 ? base.extended_resource_name : kElsewhere;
    what = absl::StrCat("class name '", c.extended_resource_name, "'");
  }
  m.classes[c.name] = c;
  s.UpsertDeviceClass(std::move(c));
  return what;
}

void RandomSequence(uint64_t seed, int steps) {
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  Model m;
  const std::vector<DraDeviceClass> classes =
      testing::DecodeDra(testing::Dra("deviceclass-mig-1g-extended.json")).device_classes;
  ASSERT_EQ(classes.size(), 1u);
  ASSERT_EQ(classes[0].name, kClass);
  m.classes[kClass] = classes[0];
  DraState s;
  s.UpsertDeviceClass(classes[0]);
  for (int step = 0; step < steps; ++step) {
    const uint64_t op = rng() % 100;
    std::string what;
    if (op < 33) {
      // A new slice, or an update (maybe moving it to another node).
      DraResourceSlice sl = testing::RandomDraSlice(rng, kNodes);
      what = absl::StrCat("upsert slice ", sl.name, " node '", sl.node_name, "'");
      m.slices[sl.name] = sl;
      s.UpsertResourceSlice(std::move(sl));
    } else if (op < 43) {
      const std::string name = absl::StrCat("s", rng() % 12);
      what = absl::StrCat("remove slice ", name);
      EXPECT_EQ(s.RemoveResourceSlice(name), m.slices.erase(name) == 1);
    } else if (op < 76) {
      // A new claim, or one re-allocated elsewhere, or deallocated.
      DraResourceClaim c = testing::RandomDraClaim(rng, kNodes, kClass);
      what = absl::StrCat("upsert claim ", c.Key(), " allocated ", c.allocated);
      m.claims[c.Key()] = c;
      s.UpsertResourceClaim(std::move(c));
    } else if (op < 86) {
      const std::string key = absl::StrCat("ns/c", rng() % 10);
      what = absl::StrCat("remove claim ", key);
      EXPECT_EQ(s.RemoveResourceClaim(key), m.claims.erase(key) == 1);
    } else if (op < 91) {
      what = RandomClassChange(rng, classes[0], m, s);
    } else if (op < 95) {
      what = "relist";
      s = Fresh(m, rng);
    } else {
      what = "copy";
      const DraState copy = s;  // the original then dies: the copy must stand alone
      s = DraState();
      s = copy;
    }
    ExpectSameAnswers(s, m, rng, absl::StrCat("step ", step, ": ", what));
    if (::testing::Test::HasFailure()) return;  // the first divergence tells it all
  }
}

TEST(DraIndexTest, RandomSequencesMatchBruteForce) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    RandomSequence(seed, 150);
    if (::testing::Test::HasFailure()) return;
  }
}

// The cases a stale index would get wrong, one by one.
TEST(DraIndexTest, ASliceMovedToAnotherNodeLeavesTheFirst) {
  std::mt19937_64 rng(7);
  DraState s;
  DraResourceSlice sl = testing::RandomDraSlice(rng, kNodes);
  sl.node_selector = sl.all_nodes = false;
  sl.node_name = "n0";
  sl.resource_slice_count = 1;
  s.UpsertResourceSlice(sl);
  DraResourceClaim c = testing::RandomDraClaim(rng, kNodes, kClass);
  c.allocated = true;
  c.results.resize(1);
  c.results[0].admin_access = false;
  c.results[0].driver = sl.driver;
  c.results[0].pool = sl.pool_name;
  c.results[0].device = sl.devices[0].name;
  s.UpsertResourceClaim(c);
  EXPECT_EQ(s.HoldersOn("n0").size(), c.IsExtendedResourceClaim() || c.reserved_for.empty()
                                          ? 1u
                                          : c.reserved_for.size());
  sl.node_name = "n1";
  s.UpsertResourceSlice(sl);
  EXPECT_THAT(s.HoldersOn("n0"), IsEmpty());
  EXPECT_FALSE(s.HoldersOn("n1").empty());
  // Deallocated: it holds nothing anywhere.
  c.allocated = false;
  c.results.clear();
  s.UpsertResourceClaim(c);
  EXPECT_THAT(s.HoldersOn("n1"), IsEmpty());
  EXPECT_TRUE(s.RemoveResourceSlice(sl.name));
  const DraResourceSlice* gone = s.ResourceSlice(sl.name);
  EXPECT_EQ(gone, nullptr);
  EXPECT_THAT(s.CheckIndexes(), IsEmpty());
}

}  // namespace
}  // namespace gse
