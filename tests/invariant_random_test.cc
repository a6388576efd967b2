// Randomized invariant test of the placement engine over the real mirror.
//
// Random clusters (MIG layouts with time-sliced small profiles at 2-7 replicas, exclusive MIG
// slices, whole GPUs, MPS with and without single-project units) receive random streams of
// pod arrivals from six projects (resolve -> FilterNodes over the candidates -> Score -> best
// node -> Mirror::ReserveWith with the policy's ChooseUnits), reservations the policy would
// not choose (any units, checked against the ledger), deletions, node count changes,
// quota changes, two-ticket pods, GPU-less pods and preemption what-ifs. After every step an
// independent checker (tests/testing/invariant_checker.h), which keeps its own ledger, asserts
// I1-I6 and cross-checks the mirror (same holdings, same usage, Audit() agreeing). Every
// per-node filter verdict is also compared with the checker's own reading of the rules.
//
// Reproduce a failure with GSE_SEED=<seed printed on failure>; GSE_INVARIANT_STEPS sets the
// steps per (seed, policy) run (default 1500, 750 under TSan).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"
#include "tests/testing/env.h"
#include "tests/testing/invariant_checker.h"

namespace gse {
namespace {

using testing::InvariantChecker;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kMig3g[] = "nvidia.com/mig-3g.20gb";
constexpr char kMig2g[] = "nvidia.com/mig-2g.10gb";
constexpr char kTs1g[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kTs1gAlias[] = "nvidia.com/mig-1g.5gb-ts";
constexpr char kTs2g[] = "nvidia.com/mig-2g.10gb.shared";
constexpr char kMps[] = "nvidia.com/gpu.mps";
constexpr char kSolo[] = "example.com/mps-solo";
constexpr char kProjectLabel[] = "gpu.themelio.io/project";
constexpr int kProjects = 6;

std::shared_ptr<const Catalog> RandomTestCatalog() {
  std::vector<Offering> v(7);
  v[0].resource = kGpu;
  v[1].resource = kMig3g;
  v[1].unit = UnitKind::kMig;
  v[1].mig_profile = "3g.20gb";
  v[2].resource = kMig2g;
  v[2].unit = UnitKind::kMig;
  v[2].mig_profile = "2g.10gb";
  v[3].resource = kTs1g;
  v[3].aliases = {kTs1gAlias};
  v[3].unit = UnitKind::kMig;
  v[3].mig_profile = "1g.5gb";
  v[3].sharing = Sharing::kTimeSliced;
  v[3].replicas = 4;
  v[4].resource = kTs2g;
  v[4].unit = UnitKind::kMig;
  v[4].mig_profile = "2g.10gb";
  v[4].sharing = Sharing::kTimeSliced;
  v[4].replicas = 3;
  v[5].resource = kMps;
  v[5].sharing = Sharing::kMps;
  v[5].replicas = 8;
  v[6].resource = kSolo;
  v[6].sharing = Sharing::kMps;
  v[6].replicas = 4;
  v[6].mps_single_project = true;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  if (!c.ok()) {
    ADD_FAILURE() << c.status();
    std::abort();
  }
  return std::make_shared<const Catalog>(*std::move(c));
}

// Steps per (seed, policy) run; 4 seeds x 2 policies. TSan runs about five times slower.
#if defined(__SANITIZE_THREAD__)
constexpr int64_t kDefaultSteps = 750;
#else
constexpr int64_t kDefaultSteps = 1500;
#endif

using gse::testing::EnvInt;

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  int64_t Uniform(int64_t lo, int64_t hi) {  // inclusive; portable across standard libraries
    return lo + static_cast<int64_t>(gen_() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(int percent) { return Uniform(0, 99) < percent; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Uniform(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  std::mt19937_64 gen_;
};

struct NodeSpec {
  std::string name;
  // resource -> (units advertised, replicas); `max_units` bounds the random count changes.
  std::map<std::string, std::pair<int32_t, int32_t>> resources;
  std::map<std::string, int32_t> max_units;
};

NodeObject ToNodeObject(const NodeSpec& spec) {
  NodeObject n;
  n.name = spec.name;
  n.uid = spec.name + "-uid";
  n.labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB";
  n.allocatable_milli["cpu"] = 64000;
  for (const auto& [resource, ur] : spec.resources) {
    std::string base = resource;
    if (base.size() > 7 && base.compare(base.size() - 7, 7, ".shared") == 0) {
      base.resize(base.size() - 7);
    }
    n.labels[base + ".count"] = std::to_string(ur.first);
    n.labels[base + ".replicas"] = std::to_string(ur.second);
    n.allocatable_milli[resource] = int64_t{ur.first} * ur.second * 1000;
  }
  return n;
}

class RandomRun {
 public:
  RandomRun(uint64_t seed, const std::string& policy_name)
      : seed_(seed),
        rng_(seed),
        catalog_(RandomTestCatalog()),
        mirror_(catalog_, MirrorOptions{}),
        checker_(*catalog_) {
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakePolicy(policy_name);
    EXPECT_TRUE(p.ok()) << p.status();
    policy_ = *std::move(p);
  }

  // Runs `steps` steps; stops at the first violation (returns false).
  bool Run(int64_t steps) {
    BuildCluster();
    for (step_ = 0; step_ < steps; ++step_) {
      Step();
      if (!failures_.empty()) break;
      Expect(mirror_.Read([&](const ClusterState& s) { return checker_.CheckState(s); }));
      if (!failures_.empty()) break;
    }
    if (!failures_.empty()) {
      ADD_FAILURE() << "seed " << seed_ << " policy " << policy_->name() << " step " << step_
                    << " (" << last_action_ << "):\n  " << absl::StrJoin(failures_, "\n  ")
                    << "\nreproduce with GSE_SEED=" << seed_;
      return false;
    }
    return true;
  }

  int64_t placements() const { return placements_; }
  int64_t arbitrary_committed() const { return arbitrary_committed_; }
  int64_t arbitrary_refused() const { return arbitrary_refused_; }
  int64_t rejections() const { return rejections_; }
  int64_t spills() const { return spills_; }

 private:
  void Expect(const std::vector<std::string>& violations) {
    failures_.insert(failures_.end(), violations.begin(), violations.end());
  }
  void Fail(const std::string& what) { failures_.push_back(what); }

  OfferingId Id(const std::string& resource) const { return catalog_->Find(resource)->id; }

  std::string Project(int i) const { return absl::StrCat("proj-", i); }
  // MakePod's UID of the pod `namespace/name`.
  static std::string UidOf(const std::string& key) { return key.substr(key.find('/') + 1) + "-uid"; }
  std::string Namespace(int i) const { return absl::StrCat("team-", i); }

  void BuildCluster() {
    mirror_.Write([&](ClusterState& s) {
      for (int i = 0; i < kProjects; ++i) {
        NamespaceObject ns;
        ns.name = Namespace(i);
        ns.labels[kProjectLabel] = Project(i);
        s.ApplyNamespace(ns);
      }
      return 0;
    });
    const int64_t nodes = rng_.Uniform(7, 12);
    for (int64_t i = 0; i < nodes; ++i) {
      NodeSpec spec;
      spec.name = absl::StrCat("node-", i < 10 ? "0" : "", i);
      auto add = [&](const char* resource, int32_t max_units, int32_t replicas) {
        const int32_t units = static_cast<int32_t>(rng_.Uniform(max_units > 1 ? 1 : 0, max_units));
        spec.resources[resource] = {units, replicas};
        spec.max_units[resource] = max_units;
      };
      auto ts_replicas = [&] { return static_cast<int32_t>(rng_.Uniform(2, 7)); };
      switch (rng_.Uniform(0, 5)) {
        case 0:  // A100 with time-sliced 1g.5gb slices and a 3g.20gb slice
          add(kTs1g, 7, ts_replicas());
          add(kMig3g, 1, 1);
          break;
        case 1:  // balanced layout, both small profiles time-sliced
          add(kTs1g, 4, ts_replicas());
          add(kTs2g, 3, ts_replicas());
          break;
        case 2:  // whole GPUs
          add(kGpu, static_cast<int32_t>(rng_.Uniform(1, 8)), 1);
          break;
        case 3:  // exclusive slices only
          add(kMig2g, 3, 1);
          add(kMig3g, 2, 1);
          break;
        case 4:  // MPS
          add(kMps, 4, static_cast<int32_t>(rng_.Uniform(4, 8)));
          add(kSolo, 2, 4);
          break;
        default:  // several A100s, time-sliced small slices
          add(kTs1g, 14, ts_replicas());
          break;
      }
      ApplyNode(spec);
      nodes_.push_back(std::move(spec));
    }
    for (int i = 0; i < kProjects; ++i) ChangeQuota(i);
  }

  void ApplyNode(const NodeSpec& spec) {
    mirror_.Write([&](ClusterState& s) { return s.ApplyNode(ToNodeObject(spec)); });
    for (const auto& [resource, ur] : spec.resources) {
      const OfferingId id = Id(resource);
      const bool exclusive = catalog_->Get(id).sharing == Sharing::kExclusive;
      checker_.SetNodeOffering(spec.name, id, ur.first, exclusive ? 1 : ur.second);
    }
  }

  void ChangeQuota(int project) {
    ResourceQuotaObject q;
    q.name = "gpu";
    q.namespace_name = Namespace(project);
    for (const Offering& o : catalog_->offerings()) {
      const OfferingId id = o.id;
      if (rng_.Chance(35)) {
        checker_.ClearQuota(Project(project), id);  // unlimited
        continue;
      }
      int64_t hard = 0;
      switch (o.sharing) {
        case Sharing::kExclusive: hard = rng_.Uniform(0, 6); break;
        case Sharing::kTimeSliced: hard = rng_.Uniform(0, 4 * o.replicas); break;  // tickets
        case Sharing::kMps: hard = rng_.Uniform(0, 3 * o.replicas); break;         // shares
      }
      q.hard_milli["requests." + o.resource] = hard * 1000;
      checker_.SetQuotaHard(Project(project), id, hard);
    }
    mirror_.Write([&](ClusterState& s) {
      s.ApplyQuota(q);
      return 0;
    });
  }

  std::vector<std::string> AllNodeNames() const {
    std::vector<std::string> names;
    for (const NodeSpec& n : nodes_) names.push_back(n.name);
    return names;
  }

  // The pod a user of `project` would submit for `amount` of `resource`, spelled in one of the
  // ways Kubernetes allows (split over containers, limits only, an init container).
  PodObject MakePod(int project, const std::string& resource, int64_t amount) {
    PodObject pod;
    pod.name = absl::StrCat("pod-", next_pod_++);
    pod.namespace_name = Namespace(project);
    pod.uid = pod.name + "-uid";
    auto container = [](const std::string& r, int64_t n, bool limits_only) {
      ContainerResources c;
      c.name = "main";
      c.requests_milli["cpu"] = 500;
      if (!r.empty() && n > 0) {
        (limits_only ? c.limits_milli : c.requests_milli)[r] = n * 1000;
        c.limits_milli[r] = n * 1000;
      }
      return c;
    };
    const bool limits_only = rng_.Chance(30);
    if (amount >= 2 && rng_.Chance(40)) {
      const int64_t first = rng_.Uniform(1, amount - 1);
      pod.containers.push_back(container(resource, first, limits_only));
      pod.containers.push_back(container(resource, amount - first, limits_only));
    } else {
      pod.containers.push_back(container(resource, amount, limits_only));
    }
    if (amount >= 1 && rng_.Chance(20)) {
      pod.init_containers.push_back(container(resource, rng_.Uniform(1, amount), false));
    }
    return pod;
  }

  void Step() {
    // Alternate fill and drain phases so that both crowded and roomy states are exercised.
    const bool filling = (step_ / 400) % 2 == 0;
    const int64_t r = rng_.Uniform(0, 99);
    const int arrive = filling ? 55 : 30;
    const int remove = filling ? 15 : 40;
    if (r < arrive) {
      Arrival();
    } else if (r < arrive + remove) {
      Deletion();
    } else if (r < arrive + remove + 7) {
      NodeUpdate();
    } else if (r < arrive + remove + 11) {
      last_action_ = "quota change";
      ChangeQuota(static_cast<int>(rng_.Uniform(0, kProjects - 1)));
    } else if (r < arrive + remove + 16) {
      TwoTickets();
    } else if (r < arrive + remove + 20) {
      NoGpuPod();
    } else if (r < arrive + remove + 25) {
      ArbitraryReservation();
    } else {
      EvictionWhatIf();
    }
  }

  // Picks an offering and amount the way users would ask (sometimes more than one unit has).
  std::pair<std::string, int64_t> RandomAsk() {
    const int64_t k = rng_.Uniform(0, 99);
    if (k < 45) return {rng_.Chance(50) ? kTs1g : kTs2g, 1};
    if (k < 75) {
      static const std::vector<std::string> exclusive = {kGpu, kMig3g, kMig2g};
      const std::string& r = rng_.Pick(exclusive);
      return {r, rng_.Chance(75) ? 1 : rng_.Uniform(2, 3)};
    }
    const std::string r = rng_.Chance(60) ? kMps : kSolo;
    const int32_t replicas = catalog_->Find(r)->replicas;
    return {r, rng_.Chance(5) ? replicas + 1 : rng_.Uniform(1, replicas)};
  }

  void Arrival() {
    const int project = static_cast<int>(rng_.Uniform(0, kProjects - 1));
    auto [resource, amount] = RandomAsk();
    // Sometimes the pod spells the time-sliced offering by its alias.
    const std::string spelled = resource == kTs1g && rng_.Chance(25) ? kTs1gAlias : resource;
    const PodObject pod = MakePod(project, spelled, amount);
    last_action_ = absl::StrCat("arrival of ", pod.Key(), " (", Project(project), ") asking ",
                                amount, " ", spelled);
    const PodRequest req = ResolvePodRequest(*catalog_, pod, Project(project));
    const OfferingId id = Id(resource);
    if (req.offering != id || req.amount != amount) {
      Fail(absl::StrCat("resolved to offering ", req.offering, " x", req.amount));
      return;
    }
    const Offering& offering = catalog_->Get(id);

    // Candidates: usually every node, sometimes the subset kube-scheduler found feasible.
    std::vector<std::string> candidates;
    for (const std::string& name : AllNodeNames()) {
      if (rng_.Chance(70) || candidates.empty()) candidates.push_back(name);
    }
    if (rng_.Chance(50)) candidates = AllNodeNames();

    FilterOutcome out;
    std::vector<int64_t> scores(candidates.size(), 0);
    mirror_.Read([&](const ClusterState& s) {
      std::vector<const NodeState*> nodes;
      for (const std::string& name : candidates) nodes.push_back(s.FindNode(name));
      out = FilterNodes(s, req, nodes);
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (out.fits[i].fits()) scores[i] = policy_->Score(s, req, *nodes[i]);
      }
      return 0;
    });

    if (!req.unresolvable.empty()) {
      // Only MPS asks beyond replicas are generated unresolvable here.
      std::vector<bool> passes;
      std::vector<std::string> messages;
      for (const NodeFit& f : out.fits) {
        passes.push_back(f.fits());
        messages.push_back(f.Message(req));
      }
      Expect(InvariantChecker::CheckRejectedEverywhere(passes, messages, "more shares"));
      ++rejections_;
      return;
    }

    // Every verdict agrees with the checker's own reading of the rules, including I3.
    const std::string proj = Project(project);
    const bool ts = offering.sharing == Sharing::kTimeSliced;
    const bool own_room_on_candidates = ts && checker_.OwnsFreeTicket(proj, id, candidates);
    bool any_pass = false;
    for (size_t i = 0; i < candidates.size(); ++i) {
      bool expected = checker_.Fits(candidates[i], id, amount, proj);
      if (expected && own_room_on_candidates) {
        expected = checker_.OwnsFreeTicket(proj, id, {candidates[i]});
      }
      any_pass = any_pass || expected;
      if (out.fits[i].fits() != expected) {
        Fail(absl::StrCat("filter on ", candidates[i], " says \"", out.fits[i].Message(req),
                          "\", checker expects ", expected ? "a fit" : "no fit"));
      }
      if (scores[i] < 0 || scores[i] > kMaxExtenderPriority) {
        Fail(absl::StrCat("score ", scores[i], " out of range on ", candidates[i]));
      }
    }
    const bool expected_spill = ts && any_pass && !own_room_on_candidates &&
                                checker_.OwnsFreeTicket(proj, id, AllNodeNames());
    if (out.spill_outside_candidates != expected_spill) {
      Fail(absl::StrCat("spill_outside_candidates ", out.spill_outside_candidates, ", expected ",
                        expected_spill));
    }
    if (!failures_.empty()) return;
    if (out.spill_outside_candidates) ++spills_;

    // kube-scheduler takes the best score (ties: first candidate).
    int best = -1;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (out.fits[i].fits() && (best < 0 || scores[i] > scores[static_cast<size_t>(best)])) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) {
      ++rejections_;
      return;
    }
    const std::string& node = candidates[static_cast<size_t>(best)];
    PodClaim claim;
    claim.key = pod.Key();
    claim.uid = pod.uid;
    claim.namespace_name = pod.namespace_name;
    claim.project = proj;
    absl::StatusOr<Assignment> a = mirror_.ReserveWith(claim, [&](const ClusterState& s) {
      return policy_->ChooseUnits(s, req, *s.FindNode(node));
    });
    if (!a.ok()) {
      Fail(absl::StrCat("ReserveWith on ", node, " refused the policy's choice: ",
                        a.status().ToString()));
      return;
    }
    if (a->node != node || a->offering != id ||
        a->amount_per_unit != (offering.sharing == Sharing::kMps ? amount : 1)) {
      Fail(absl::StrCat("assignment on ", a->node, " offering ", a->offering, " x",
                        a->amount_per_unit, " does not describe the request"));
    }
    // The score described the chosen unit: under affinity-pack a time-sliced pod scores 10
    // exactly when the node has one of the project's own units with room (which the checker's
    // I2/I3 checks then see it join).
    if (ts && policy_->name() == "affinity-pack") {
      const bool own_room = checker_.OwnsFreeTicket(proj, id, {node});
      const bool top = scores[static_cast<size_t>(best)] == kMaxExtenderPriority;
      if (own_room != top) {
        Fail(absl::StrCat("score ", scores[static_cast<size_t>(best)], " on ", node,
                          own_room ? " although the project owns a unit with room there"
                                   : " but the project owns no unit with room there"));
      }
    }
    Expect(checker_.RecordPlacement(pod.Key(), proj, *a, candidates));
    ++placements_;
    placed_.push_back(pod.Key());
  }

  // A reservation the policy would not choose (any offering, node and units, some beyond
  // what the node advertises): Reserve must commit it exactly when the checker's own ledger
  // admits it (I1 capacity and draining units, I2 owner, I4 quota), so its refusal paths are
  // exercised and cross-checked, not only the policy's good choices.
  void ArbitraryReservation() {
    const int project = static_cast<int>(rng_.Uniform(0, kProjects - 1));
    const Offering& o = catalog_->offerings()[static_cast<size_t>(
        rng_.Uniform(0, static_cast<int64_t>(catalog_->size()) - 1))];
    // Mostly a node that advertises the offering (so capacity, owner and quota decide), else
    // any node.
    std::vector<size_t> with;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].resources.count(o.resource) != 0) with.push_back(i);
    }
    const NodeSpec& spec =
        !with.empty() && rng_.Chance(85)
            ? nodes_[rng_.Pick(with)]
            : nodes_[static_cast<size_t>(rng_.Uniform(0, static_cast<int64_t>(nodes_.size()) - 1))];
    auto max_units = spec.max_units.find(o.resource);
    const int32_t top = max_units == spec.max_units.end() ? 1 : max_units->second;
    Assignment a;
    a.node = spec.name;
    a.offering = o.id;
    const int64_t n = o.sharing == Sharing::kExclusive ? rng_.Uniform(1, 2) : 1;
    std::set<int32_t> units;
    while (static_cast<int64_t>(units.size()) < n) {
      units.insert(static_cast<int32_t>(rng_.Uniform(0, top)));  // `top`: beyond the advertised
    }
    a.units.assign(units.begin(), units.end());
    a.amount_per_unit =
        o.sharing == Sharing::kMps ? static_cast<int32_t>(rng_.Uniform(1, o.replicas)) : 1;
    const std::string key = absl::StrCat(Namespace(project), "/pod-", next_pod_++);
    last_action_ = absl::StrCat("arbitrary reservation ", key, " (", Project(project), ") on ",
                                spec.name, " ", o.resource, " units [",
                                absl::StrJoin(a.units, ","), "] x", a.amount_per_unit);
    const std::vector<std::string> refusals = checker_.CheckPlacement(key, Project(project), a, {});
    PodClaim claim;
    claim.key = key;
    claim.uid = UidOf(key);
    claim.namespace_name = Namespace(project);
    claim.project = Project(project);
    absl::StatusOr<Assignment> got =
        mirror_.ReserveWith(claim, [&](const ClusterState&) { return a; });
    if (got.ok() != refusals.empty()) {
      Fail(got.ok() ? absl::StrCat("Reserve committed what the ledger refuses: ",
                                   absl::StrJoin(refusals, "; "))
                    : absl::StrCat("Reserve refused what the ledger admits: ",
                                   got.status().ToString()));
      return;
    }
    if (!got.ok()) {
      ++arbitrary_refused_;
      return;
    }
    ++arbitrary_committed_;
    Expect(checker_.RecordPlacement(key, Project(project), a, {}));
    placed_.push_back(key);
  }

  void Deletion() {
    if (placed_.empty()) {
      Arrival();
      return;
    }
    const size_t i = static_cast<size_t>(rng_.Uniform(0, static_cast<int64_t>(placed_.size()) - 1));
    const std::string key = placed_[i];
    last_action_ = "deletion of " + key;
    placed_.erase(placed_.begin() + static_cast<std::ptrdiff_t>(i));
    if (!mirror_.Release(UidOf(key))) Fail("mirror released nothing for " + key);
    checker_.RecordRelease(key);
  }

  void NodeUpdate() {
    const int64_t pick = rng_.Uniform(0, static_cast<int64_t>(nodes_.size()) - 1);
    NodeSpec& spec = nodes_[static_cast<size_t>(pick)];
    for (auto& [resource, ur] : spec.resources) {
      if (rng_.Chance(50)) {
        ur.first = static_cast<int32_t>(rng_.Uniform(0, spec.max_units[resource] + 1));
      }
    }
    std::vector<std::string> counts;
    for (const auto& [resource, ur] : spec.resources) {
      counts.push_back(absl::StrCat(resource, "=", ur.first));
    }
    last_action_ = absl::StrCat("node update ", spec.name, " ", absl::StrJoin(counts, " "));
    ApplyNode(spec);
  }

  void TwoTickets() {
    const int project = static_cast<int>(rng_.Uniform(0, kProjects - 1));
    PodObject pod = MakePod(project, rng_.Chance(50) ? kTs1g : kTs2g, 2);
    last_action_ = "two-ticket pod " + pod.Key();
    const PodRequest req = ResolvePodRequest(*catalog_, pod, Project(project));
    std::vector<bool> passes;
    std::vector<std::string> messages;
    mirror_.Read([&](const ClusterState& s) {
      std::vector<const NodeState*> nodes;
      for (const std::string& name : AllNodeNames()) nodes.push_back(s.FindNode(name));
      nodes.push_back(nullptr);
      const FilterOutcome out = FilterNodes(s, req, nodes);
      for (const NodeFit& f : out.fits) {
        passes.push_back(f.fits());
        messages.push_back(f.Message(req));
      }
      // Nor can a bind sneak it in.
      const int64_t pick = rng_.Uniform(0, static_cast<int64_t>(nodes.size()) - 2);
      const NodeState* some = nodes[static_cast<size_t>(pick)];
      if (policy_->ChooseUnits(s, req, *some).ok()) {
        passes.push_back(true);
        messages.push_back("ChooseUnits accepted a two-ticket pod");
      }
      return 0;
    });
    Expect(InvariantChecker::CheckRejectedEverywhere(passes, messages,
                                                     "more than one time-sliced ticket"));
    ++rejections_;
  }

  void NoGpuPod() {
    const int project = static_cast<int>(rng_.Uniform(0, kProjects - 1));
    PodObject pod = MakePod(project, "", 0);
    last_action_ = "GPU-less pod " + pod.Key();
    const PodRequest req = ResolvePodRequest(*catalog_, pod, Project(project));
    std::vector<bool> passes;
    mirror_.Read([&](const ClusterState& s) {
      std::vector<const NodeState*> nodes;
      for (const std::string& name : AllNodeNames()) nodes.push_back(s.FindNode(name));
      nodes.push_back(nullptr);  // even a node the mirror does not know
      for (const NodeFit& f : FilterNodes(s, req, nodes).fits) passes.push_back(f.fits());
      return 0;
    });
    Expect(InvariantChecker::CheckPassesEverywhere(passes));
  }

  // Preemption what-if: with some pods evicted, does each node fit a hypothetical pod? The
  // mirror's overlay must agree with the checker's ledger minus the victims.
  void EvictionWhatIf() {
    if (placed_.empty()) return;
    const int project = static_cast<int>(rng_.Uniform(0, kProjects - 1));
    auto [resource, amount] = RandomAsk();
    const PodRequest req =
        ResolvePodRequest(*catalog_, MakePod(project, resource, amount), Project(project));
    if (!req.unresolvable.empty()) return;
    Evictions evicted;
    std::set<std::string> victims;
    const int64_t n = rng_.Uniform(1, 3);
    for (int64_t i = 0; i < n; ++i) {
      const std::string& key = rng_.Pick(placed_);
      evicted.insert(UidOf(key));  // the mirror knows pods by UID
      victims.insert(key);
    }
    last_action_ = absl::StrCat("eviction what-if for ", Project(project), " asking ", amount, " ",
                                resource, " evicting ", absl::StrJoin(victims, ","));
    const OfferingId id = Id(resource);
    // (C++17 lambdas cannot capture a structured binding; clang refuses it, GCC allows it.)
    mirror_.Read([&, amount = amount](const ClusterState& s) {
      for (const NodeSpec& spec : nodes_) {
        const NodeFit fit = CheckNode(s, req, s.FindNode(spec.name), evicted);
        const bool expected = checker_.Fits(spec.name, id, amount, Project(project), victims);
        if (fit.fits() != expected) {
          Fail(absl::StrCat("with evictions, ", spec.name, " says \"", fit.Message(req),
                            "\", checker expects ", expected ? "a fit" : "no fit"));
        }
      }
      return 0;
    });
  }

  uint64_t seed_;
  Rng rng_;
  std::shared_ptr<const Catalog> catalog_;
  Mirror mirror_;
  InvariantChecker checker_;
  std::unique_ptr<PlacementPolicy> policy_;
  std::vector<NodeSpec> nodes_;
  std::vector<std::string> placed_;
  std::vector<std::string> failures_;
  std::string last_action_;
  int64_t step_ = 0;
  int64_t next_pod_ = 0;
  int64_t placements_ = 0;
  int64_t rejections_ = 0;
  int64_t spills_ = 0;
  int64_t arbitrary_committed_ = 0;
  int64_t arbitrary_refused_ = 0;
};

std::vector<uint64_t> Seeds() {
  const int64_t env = EnvInt("GSE_SEED", -1);
  if (env >= 0) return {static_cast<uint64_t>(env)};
  const uint64_t now = static_cast<uint64_t>(
      std::chrono::system_clock::now().time_since_epoch().count() % 1000000007);
  return {1, 2, 3, now};
}

void RunPolicy(const std::string& policy) {
  const int64_t steps = std::max<int64_t>(1, EnvInt("GSE_INVARIANT_STEPS", kDefaultSteps));
  int64_t placements = 0, rejections = 0, spills = 0, committed = 0, refused = 0;
  for (uint64_t seed : Seeds()) {
    std::printf("[invariant] policy=%s seed=%llu steps=%lld\n", policy.c_str(),
                static_cast<unsigned long long>(seed), static_cast<long long>(steps));
    std::fflush(stdout);
    RandomRun run(seed, policy);
    const bool ok = run.Run(steps);
    placements += run.placements();
    rejections += run.rejections();
    spills += run.spills();
    committed += run.arbitrary_committed();
    refused += run.arbitrary_refused();
    if (!ok) return;
  }
  std::printf("[invariant] policy=%s placements=%lld rejections=%lld spills=%lld "
              "arbitrary_reservations committed=%lld refused=%lld\n",
              policy.c_str(), static_cast<long long>(placements),
              static_cast<long long>(rejections), static_cast<long long>(spills),
              static_cast<long long>(committed), static_cast<long long>(refused));
  // The stream must actually exercise placement, not only rejections, and Reserve's
  // refusal paths as well as its commits of choices the policy would not make.
  EXPECT_GT(placements, steps / 10);
  EXPECT_GT(committed, 0);
  EXPECT_GT(refused, steps / 100);
}

TEST(InvariantRandomTest, AffinityPack) { RunPolicy("affinity-pack"); }
TEST(InvariantRandomTest, Spread) { RunPolicy("spread"); }

}  // namespace
}  // namespace gse
