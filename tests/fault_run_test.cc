// The randomized fault run (issue 12, "prove the class is gone"): the real gpu-slice-extender
// binary, two replicas with --leader-elect, against the local Kubernetes API server
// (testsupport/fake_apiserver.h), scheduled by several concurrent kube-scheduler-like clients
// (filter -> prioritize -> bind over HTTP, tests/testing/scheduler_clients.h), while the run
// injects faults: binds whose answer is lost after they committed, 5xx after and before commit,
// 409s, binds that commit after the extender gave up, failing read-backs, watch drops, cut
// watch events, failing watch requests, compaction (410) and relists (also every 4 s), held
// watches (a lagging watch cache), pods deleted, completed and recreated under their name (a new
// UID), namespaces relabelled, quotas lowered and raised, nodes shrinking and growing back,
// the leader SIGKILLed or SIGTERMed (hand-over) and every replica SIGKILLed and restarted.
// The cluster is mixed (tests/testing/fault_cluster.h): two of its nodes are DRA nodes
// (--dra-mode=auto), where the clients play kube-scheduler's DRA allocator, PreBind and
// Unreserve (testsupport/dra_allocator.h), so every fault above also meets DRA binds.
//
// The run is a sequence of phases (tests/testing/fault_plan.h). Each phase: wait until the
// replicas' watches have caught up, make the phase's changes, schedule every pending pod while
// the phase's actions fire at given numbers of bind calls, stop the faults, wait until the API
// server has no request in flight (no held write can still commit), then audit. The referee
// (tests/testing/api_audit.h) reads the API server's objects alone — never the extender — and
// checks I1 (no unit over capacity, no new holder beyond the node's allocatable units, every
// bound GPU pod accounted for), I2 (one project per time-sliced unit) and I4 (quota, counting
// only excess the extender could have refused; and the charged project), and on DRA nodes the
// same from the ResourceClaims of bound pods (a device over capacity or shared by two
// projects, annotations naming other devices than the claim). I3 (affinity) is
// not judged: under deletions and failing binds an extra unit can be legitimate, and telling
// when it is needs the timing of each bind.
//
// Determinism: GSE_SEED fixes the sequence of phases, pods, changes and faults; the
// interleaving of concurrent binds is the machine's. No verdict depends on that timing: the
// facts a phase is judged against are the most lenient of those in force during it.
// Each phase prints its plan as it starts; a violation prints the seed, the phase and the
// evidence: the pods, their UIDs, nodes, gpu.themelio.io/* annotations, the phase each was
// bound in and the faults its binding met.
//
// Short run (ctest): GSE_SEED=1, 20 phases, each of the ten kinds of fault featured twice;
// about 40 s in the normal tree on 2 cores. The sanitizer trees run 10 phases with half the
// pods: their extender binary is several times slower, and the faults are in the phases.
// Long run (hours, a new seed each time):
//   GSE_SEED=$RANDOM GSE_CHAOS_SECONDS=3600 build/tests/fault_run_test
// GSE_CHAOS_PHASES=N runs N phases instead; GSE_CHAOS_CLIENTS sets the scheduler clients (6);
// GSE_CHAOS_LOG_DIR=DIR keeps every replica process's stderr there (reflector and bind logs;
// GSE_CHAOS_DECISION_LOG=all logs every bind decision, not only failures).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/api_audit.h"
#include "tests/testing/env.h"
#include "tests/testing/extender_replicas.h"
#include "tests/testing/fault_cluster.h"
#include "tests/testing/fault_plan.h"
#include "tests/testing/http_fixture.h"
#include "tests/testing/scheduler_clients.h"
#include "testsupport/fake_apiserver.h"

namespace gse {
namespace {

using testing::ApiAudit;
using testing::ApiFault;
using testing::AuditFacts;
using testing::AuditSnapshot;
using testing::AuditViolation;
using testing::FakeApiServer;
using testing::FaultCluster;
using testing::PhasePlan;
using testing::PlannedAction;

constexpr int kReplicas = 2;
constexpr int kMaxPending = 40;  // older pending pods are deleted (their users gave up)
// The extender's bind budget and the faults timed against it. Held writes stay below the
// Lease duration (see fault_plan.h).
constexpr absl::Duration kBindTimeout = absl::Seconds(2);
constexpr absl::Duration kLostAnswerDelay = absl::Milliseconds(2300);
constexpr absl::Duration kLateCommitDelay = absl::Milliseconds(2400);

using testing::EnvInt;

// The sanitizer trees build this test and the extender binary it runs with the sanitizer.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerBuild = true;
#else
constexpr bool kSanitizerBuild = false;
#endif
// scripts/test.sh sets GSE_SANITIZER_BUILD to the variant it runs: "normal", "asan", "tsan".
// GSE_CHAOS_DECISION_LOG=all logs every bind decision of the replicas (default: failures).
std::string DecisionLogLevel() {
  const char* v = std::getenv("GSE_CHAOS_DECISION_LOG");
  return v != nullptr && *v != '\0' ? v : "failures";
}

bool SanitizerBuild() {
  const char* variant = std::getenv("GSE_SANITIZER_BUILD");
  return kSanitizerBuild ||
         (variant != nullptr && (std::string(variant) == "asan" || std::string(variant) == "tsan"));
}

struct RunConfig {
  uint64_t seed = 1;
  int phases = 2 * testing::kFeaturedKinds;
  absl::Duration budget = absl::ZeroDuration();  // > 0: phases until it is spent
  double scale = 1.0;
  int clients = 6;
};

RunConfig ConfigFromEnv() {
  RunConfig c;
  c.seed = static_cast<uint64_t>(std::max<int64_t>(0, EnvInt("GSE_SEED", 1)));
  // Every featured kind twice; once in the sanitizer trees (see below).
  c.phases = static_cast<int>(std::max<int64_t>(
      1, EnvInt("GSE_CHAOS_PHASES", (SanitizerBuild() ? 1 : 2) * testing::kFeaturedKinds)));
  c.budget = absl::Seconds(std::max<int64_t>(0, EnvInt("GSE_CHAOS_SECONDS", 0)));
  // The sanitizer builds run the same phases with half the pods: their extender binary is
  // several times slower, and the phases, not the pod count, carry the faults.
  c.scale = SanitizerBuild() ? 0.5 : 1.0;
  c.clients = static_cast<int>(std::clamp<int64_t>(EnvInt("GSE_CHAOS_CLIENTS", 6), 1, 64));
  return c;
}

struct Report {
  std::map<std::string, int64_t> operations;  // what the harness did to the cluster
  std::map<std::string, int64_t> faults;      // faults that fired
  std::map<std::string, int64_t> violations;  // distinct violations per kind
  std::vector<std::string> violation_texts;
  testing::SchedulerCounters scheduler;
  std::set<std::string> dra_bound;  // UIDs of pods seen bound on a DRA node at a phase's end
  int phases = 0;
  int64_t barrier_timeouts = 0;

  std::string Format(uint64_t seed) const {
    auto join = [](const std::map<std::string, int64_t>& m) {
      return m.empty() ? std::string("none") : absl::StrJoin(m, ", ", absl::PairFormatter(": "));
    };
    const testing::SchedulerCounters& s = scheduler;
    return absl::StrCat(
        "[fault run] seed=", seed, " phases=", phases, "\n  scheduler calls: filter ", s.filter,
        ", prioritize ", s.prioritize, ", bind ", s.bind, " (bound ", s.bound, ", bind errors ",
        s.bind_errors, "), unschedulable ", s.unschedulable, ", extender unavailable or erring ",
        s.extender_errors, "\n  DRA: pods bound on DRA nodes ", dra_bound.size(),
        ", allocations failed at PreBind ", s.dra_prebind_failed, ", claims unreserved after a failed bind ",
        s.dra_unreserved, "\n  operations: ", join(operations), "\n  faults injected: ",
        join(faults), "\n  barrier timeouts (phase judged more leniently): ", barrier_timeouts,
        "\n  violations: ", join(violations), "\n");
  }
};

class FaultRun {
 public:
  explicit FaultRun(RunConfig config)
      : config_(config),
        cluster_(&fake_),
        audit_(FaultCluster::Offerings(), FaultCluster::kProjectLabel, FaultCluster::DraNodes()),
        allocator_(fake_) {}

  ~FaultRun() {
    if (clients_) clients_->Join();
    replicas_.reset();
    fake_.Stop();
  }

  absl::Status Setup() {
    if (absl::Status s = fake_.Start(); !s.ok()) return s;
    if (absl::Status s = cluster_.Load(); !s.ok()) return s;
    dir_.Write("kubeconfig", fake_.Kubeconfig());
    replicas_ = std::make_unique<testing::ExtenderReplicas>(
        testing::ExtenderBinary(),
        std::vector<std::string>{
            absl::StrCat("--kubeconfig=", dir_.File("kubeconfig")), "--in-cluster=false",
            "--leader-elect", "--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s",
            "--leader-elect-retry-period=250ms", absl::StrCat("--bind-timeout=", absl::FormatDuration(kBindTimeout)),
            "--api-timeout=3s", "--watch-timeout=5s", "--resync-period=4s", "--audit-interval=1s",
            "--api-qps=1000", "--api-burst=1000", "--dra-mode=auto",
            absl::StrCat("--decision-log=", DecisionLogLevel())},
        kReplicas);
    if (const char* dir = std::getenv("GSE_CHAOS_LOG_DIR"); dir != nullptr && *dir != '\0') {
      replicas_->KeepLogsIn(dir);
    }
    if (absl::Status s = replicas_->Start(); !s.ok()) return s;
    if (!replicas_->WaitReady(absl::Seconds(30))) {
      return absl::DeadlineExceededError(absl::StrCat("no extender replica became ready:\n",
                                                      replicas_->StderrTail(0)));
    }
    clients_ = std::make_unique<testing::SchedulerClients>(
        &fake_, [this] { return replicas_->ReadyPort(); }, FaultCluster::NodeNames(), config_.seed,
        testing::SchedulerClients::Dra{&allocator_, &FaultCluster::IsDraNode});
    previous_ = AuditSnapshot{};
    previous_.facts = audit_.Snapshot(fake_).facts;
    return absl::OkStatus();
  }

  void RunPhase(int index) {
    const PhasePlan plan = testing::MakePhasePlan(config_.seed, index, config_.scale);
    std::printf("[fault run] seed=%llu phase %d starts at %s: %s\n", static_cast<unsigned long long>(config_.seed),
                index, absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()).c_str(),
                testing::DescribePlan(plan).c_str());
    std::vector<const AuditFacts*> earlier = {&previous_.facts};
    if (!Barrier()) {
      // The replicas may not have seen the last phase's changes: judge this one as if the
      // facts before them were still in force too.
      ++report_.barrier_timeouts;
      earlier.push_back(&older_facts_);
    }
    Housekeeping();
    if (plan.hold_watches) {
      fake_.HoldWatches(true);
      ++report_.faults["watches held"];
    }
    recreated_.clear();
    ApplyStartChanges(plan);
    if (!plan.facts_mid_phase) ApplyFacts(plan);
    start_changes_rv_ = fake_.resource_version_number();
    const AuditSnapshot start = audit_.Snapshot(fake_);
    InstallFaults(plan);

    // Round 1: every pending pod (the recreated ones first: while watches are held, the
    // replicas still see their predecessors), the actions firing as bind calls are sent.
    std::vector<std::string> queue = recreated_;
    for (const std::string& key : cluster_.PendingPods()) {
      if (std::find(recreated_.begin(), recreated_.end(), key) == recreated_.end()) queue.push_back(key);
    }
    const int64_t binds_before = clients_->bind_calls();
    size_t next = 0;
    clients_->Start(queue, config_.clients, /*max_tries=*/10);
    while (clients_->Running()) {
      while (next < plan.actions.size() &&
             clients_->bind_calls() - binds_before >= plan.actions[next].after_binds) {
        RunAction(plan, plan.actions[next++]);
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    clients_->Join();
    // Work ran out before some actions' turn: they fire now, and a second round schedules
    // what they left pending (a recreated pod, pods of a restarted leader).
    while (next < plan.actions.size()) RunAction(plan, plan.actions[next++]);
    clients_->Start(cluster_.PendingPods(), config_.clients, /*max_tries=*/6);
    clients_->Join();

    Quiesce();
    const AuditSnapshot end = audit_.Snapshot(fake_);
    NoteHistory(index, end);
    std::vector<AuditViolation> found = audit_.Judge(previous_, earlier, start, end);
    for (const std::string& exit : replicas_->TakeUnexpectedExits()) {
      found.push_back({"extender exit", exit, exit});
    }
    Record(plan, found);
    older_facts_ = previous_.facts;
    previous_ = end;
    ++report_.phases;
    report_.scheduler = clients_->counters();
    for (const testing::AuditHolder& h : end.holders) {
      if (FaultCluster::IsDraNode(h.node)) report_.dra_bound.insert(h.uid);
    }
    std::printf("[fault run] seed=%llu phase %d done: %zu bound pods, %lld bound so far, %zu violation(s) in all\n",
                static_cast<unsigned long long>(config_.seed), index, end.bound_uids.size(),
                static_cast<long long>(report_.scheduler.bound), report_.violation_texts.size());
    std::fflush(stdout);
  }

  const Report& report() const { return report_; }
  Report& mutable_report() { return report_; }

 private:
  // What each replica watches: the reflector's four kinds (DRA mode is off here) and the
  // agents' heartbeat Leases. A barrier that counted all watches together (it once waited for
  // 4 per replica while each opens 5) passed with one replica's pod watch still reconnecting,
  // and judged a phase against facts that replica had not seen.
  static constexpr const char* kWatchedResources[] = {"nodes",          "pods",          "namespaces",
                                                      "resourcequotas", "leases",        "deviceclasses",
                                                      "resourceslices", "resourceclaims"};

  bool EveryReplicaWatches(int alive) const {
    for (const char* resource : kWatchedResources) {
      if (fake_.open_watches(resource) < alive) return false;
    }
    return true;
  }

  // Until the ready replica is back and every open watch has been sent every event so far
  // (the replicas then know the facts the phase is judged against).
  bool Barrier() {
    const absl::Time until = absl::Now() + absl::Seconds(20);
    while (absl::Now() < until) {
      int alive = 0;
      for (int i = 0; i < replicas_->size(); ++i) alive += replicas_->Alive(i) ? 1 : 0;
      if (replicas_->ReadyPort() >= 0 && EveryReplicaWatches(alive) && fake_.WatchesCaughtUp()) {
        absl::SleepFor(absl::Milliseconds(50));  // what was sent is applied within microseconds
        return true;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // A controller's work between phases: completed pods are removed; when too many pods wait,
  // the first ones are removed (their users gave up).
  void Housekeeping() {
    for (const std::string& key : cluster_.TerminalPods()) {
      if (cluster_.DeletePod(key).ok()) ++report_.operations["completed pods removed"];
    }
    std::vector<std::string> pending = cluster_.PendingPods();
    for (size_t i = 0; i + kMaxPending < pending.size(); ++i) {
      if (cluster_.DeletePod(pending[i]).ok()) ++report_.operations["pending pods given up"];
    }
  }

  static std::optional<std::string> Pick(const std::vector<std::string>& keys, uint64_t rank) {
    if (keys.empty()) return std::nullopt;
    return keys[rank % keys.size()];
  }

  void ApplyStartChanges(const PhasePlan& plan) {
    for (uint64_t rank : plan.delete_bound) {
      if (std::optional<std::string> key = Pick(cluster_.BoundPods(), rank); key && cluster_.DeletePod(*key).ok()) {
        ++report_.operations["bound pods deleted"];
      }
    }
    for (uint64_t rank : plan.complete_bound) {
      if (std::optional<std::string> key = Pick(cluster_.BoundPods(), rank); key && cluster_.CompletePod(*key).ok()) {
        ++report_.operations["bound pods completed"];
      }
    }
    for (uint64_t rank : plan.recreate) {
      if (std::optional<std::string> key = Pick(cluster_.BoundPods(), rank); key && Recreate(*key, plan.index)) {
        ++report_.operations["pods recreated (new UID)"];
      }
    }
    for (const testing::PodPlan& pod : plan.new_pods) {
      if (cluster_.CreatePod(pod).ok()) ++report_.operations["pods created"];
    }
  }

  bool Recreate(const std::string& key, int index) {
    if (!cluster_.RecreatePod(key).ok()) return false;
    recreated_.push_back(key);
    audit_.Note(key, absl::StrCat("recreated under its name (new UID) in phase ", index));
    return true;
  }

  void ApplyFacts(const PhasePlan& plan) {
    for (const testing::FactChange& f : plan.facts) {
      absl::Status s;
      switch (f.kind) {
        case testing::FactChange::kRelabel:
          s = cluster_.Relabel(f.target, f.label);
          if (s.ok()) ++report_.operations["namespaces relabelled"];
          break;
        case testing::FactChange::kQuota:
          s = cluster_.SetQuota(f.target, f.resource, f.value);
          if (s.ok()) ++report_.operations["quotas changed"];
          break;
        case testing::FactChange::kNodeUnits:
          s = cluster_.SetNodeUnits(f.target, f.value);
          if (s.ok()) {
            ++report_.operations[f.value < FaultCluster::FullUnits(f.target) ? "nodes shrunk" : "nodes restored"];
          }
          break;
      }
      EXPECT_TRUE(s.ok()) << f.Describe() << ": " << s;
    }
  }

  void InstallFaults(const PhasePlan& plan) {
    for (const testing::PlannedFault& p : plan.faults) {
      FakeApiServer::Fault f;
      f.times = p.times;
      f.label = testing::ApiFaultName(p.kind);
      f.method = "POST";
      f.path_contains = "/binding";
      switch (p.kind) {
        case ApiFault::kLostAnswer:
          f.delay_after = kLostAnswerDelay;
          break;
        case ApiFault::kErrorAfterCommit:
          f.status = p.status;
          f.status_after_commit = true;
          break;
        case ApiFault::kErrorBeforeCommit:
          f.status = p.status;
          break;
        case ApiFault::kConflict:
          f.status = 409;
          break;
        case ApiFault::kLateCommit:
          f.delay_before = kLateCommitDelay;
          break;
        case ApiFault::kReadBackFails:
          f.method = "GET";
          f.path_contains = "/pods/";
          f.status = 500;
          break;
        case ApiFault::kWatchRequestFails:
          f.method = "GET";
          f.path_contains = "";
          f.query_contains = "watch=1";
          f.status = 500;
          break;
      }
      fake_.AddFault(f);
    }
  }

  void RunAction(const PhasePlan& plan, const PlannedAction& a) {
    const std::string name = testing::ActionName(a.kind);
    switch (a.kind) {
      case testing::Action::kDropWatches:
        fake_.DropWatches();
        break;
      case testing::Action::kCompactAndDrop:
        fake_.Compact();
        fake_.DropWatches();
        break;
      case testing::Action::kTruncateEvent:
        fake_.TruncateWatchEvents(1);
        break;
      case testing::Action::kReleaseWatchesPartly:
        fake_.HoldWatchesAfter(start_changes_rv_);
        break;
      case testing::Action::kReleaseWatches:
        fake_.HoldWatches(false);
        break;
      case testing::Action::kDeleteBound:
        if (std::optional<std::string> key = Pick(cluster_.BoundPods(), a.pick); !key || !cluster_.DeletePod(*key).ok()) return;
        break;
      case testing::Action::kRecreate:
        if (std::optional<std::string> key = Pick(cluster_.BoundPods(), a.pick); !key || !Recreate(*key, plan.index)) return;
        break;
      case testing::Action::kCompleteBound:
        if (std::optional<std::string> key = Pick(cluster_.BoundPods(), a.pick); !key || !cluster_.CompletePod(*key).ok()) return;
        break;
      case testing::Action::kApplyFacts:
        ApplyFacts(plan);
        break;
      case testing::Action::kKillLeader:
      case testing::Action::kTerminateLeader: {
        int leader = replicas_->ReadyReplica();
        if (leader < 0) leader = static_cast<int>(a.pick % static_cast<uint64_t>(replicas_->size()));
        replicas_->Kill(leader, a.kind == testing::Action::kKillLeader ? SIGKILL : SIGTERM);
        Restart(leader);
        break;
      }
      case testing::Action::kRestartAll:
        for (int i = 0; i < replicas_->size(); ++i) replicas_->Kill(i, SIGKILL);
        for (int i = 0; i < replicas_->size(); ++i) Restart(i);
        break;
    }
    ++report_.faults[name];
  }

  void Restart(int index) {
    if (absl::Status s = replicas_->Restart(index); !s.ok()) {
      const std::string text = std::string(s.message());
      report_.violation_texts.push_back(absl::StrCat("seed ", config_.seed, ": ", text));
      ++report_.violations["extender restart"];
    }
  }

  // Watches flowing, faults off, and no request left in the API server (a held write that
  // could still commit would change what the audit sees).
  void Quiesce() {
    fake_.HoldWatches(false);
    // Watch faults meet the replicas' reconnections, which may come after the last bind:
    // they are cleared once every watch is open again (or after 10 s).
    const absl::Time watches_by = absl::Now() + absl::Seconds(10);
    while (absl::Now() < watches_by) {
      int alive = 0;
      for (int i = 0; i < replicas_->size(); ++i) alive += replicas_->Alive(i) ? 1 : 0;
      if (EveryReplicaWatches(alive)) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    fake_.ClearFaults();
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (fake_.InFlightRequests() > 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_EQ(fake_.InFlightRequests(), 0) << "requests still in the API server after 30 s";
    for (const auto& [label, hits] : fake_.FaultHits()) report_.faults[label] = hits;
  }

  // What the evidence of a later violation should say about a pod: when it was bound, and
  // which faults its binding and read-backs met.
  void NoteHistory(int index, const AuditSnapshot& end) {
    for (const testing::AuditHolder& h : end.holders) {
      if (previous_.bound_uids.count(h.uid) == 0) audit_.Note(h.uid, absl::StrCat("bound in phase ", index));
    }
    const std::vector<FakeApiServer::FaultHit> log = fake_.FaultLog();
    for (size_t i = fault_log_seen_; i < log.size(); ++i) {
      const std::vector<std::string> parts = absl::StrSplit(log[i].request, '/');
      // "POST /api/v1/namespaces/NS/pods/NAME[/binding]"
      if (parts.size() < 7 || parts[3] != "namespaces" || parts[5] != "pods") continue;
      audit_.Note(absl::StrCat(parts[4], "/", parts[6]),
                  absl::StrCat("phase ", index, ": its ", parts.size() > 7 ? "binding" : "read-back",
                               " met \"", log[i].label, "\""));
    }
    fault_log_seen_ = log.size();
  }

  void Record(const PhasePlan& plan, const std::vector<AuditViolation>& found) {
    for (const AuditViolation& v : found) {
      if (!seen_.insert(v.key).second) continue;  // the same violation, still visible
      ++report_.violations[v.kind];
      const std::string text = absl::StrCat("seed ", config_.seed, " phase ", plan.index, ": ", v.kind,
                                            ": ", v.evidence);
      report_.violation_texts.push_back(text);
      std::printf("[fault run] VIOLATION %s\n", text.c_str());
    }
    std::fflush(stdout);
  }

  const RunConfig config_;
  FakeApiServer fake_;
  testing::ScratchDir dir_;
  FaultCluster cluster_;
  ApiAudit audit_;
  testing::DraTestAllocator allocator_;  // kube-scheduler's DRA part (SchedulerClients)
  std::unique_ptr<testing::ExtenderReplicas> replicas_;
  std::unique_ptr<testing::SchedulerClients> clients_;
  AuditSnapshot previous_;  // at the end of the last phase
  AuditFacts older_facts_;  // at the end of the phase before that
  std::set<std::string> seen_;
  size_t fault_log_seen_ = 0;
  std::vector<std::string> recreated_;  // this phase's, in order
  int64_t start_changes_rv_ = 0;        // resourceVersion after this phase's start changes
  Report report_;
};

TEST(FaultRunTest, RandomizedFaultsNeverBreakTheInvariantsOnTheApiServer) {
  const RunConfig config = ConfigFromEnv();
  std::printf("[fault run] seed=%llu (reproduce with GSE_SEED=%llu) phases=%d budget=%s scale=%.2f clients=%d\n",
              static_cast<unsigned long long>(config.seed), static_cast<unsigned long long>(config.seed),
              config.phases, absl::FormatDuration(config.budget).c_str(), config.scale, config.clients);
  std::fflush(stdout);
  FaultRun run(config);
  absl::Status setup = run.Setup();
  ASSERT_TRUE(setup.ok()) << setup;
  const absl::Time started = absl::Now();
  for (int i = 0;; ++i) {
    const bool more = config.budget > absl::ZeroDuration() ? absl::Now() - started < config.budget
                                                           : i < config.phases;
    if (!more) break;
    run.RunPhase(i);
  }
  const Report& report = run.report();
  std::printf("%s", report.Format(config.seed).c_str());
  std::fflush(stdout);

  EXPECT_EQ(report.violation_texts.size(), 0u)
      << "violations (each printed above as [fault run] VIOLATION with its evidence); reproduce "
         "with GSE_SEED="
      << config.seed;

  // The run must have done what it claims: binds through every phase, and each kind of fault
  // actually fired (a fault that never met a request proves nothing).
  EXPECT_GE(report.scheduler.bound, report.phases) << report.Format(config.seed);
  // DRA nodes were scheduled onto, not only present.
  EXPECT_GE(report.dra_bound.size(), 1u) << report.Format(config.seed);
  if (report.phases >= testing::kFeaturedKinds) {
    for (ApiFault f : {ApiFault::kLostAnswer, ApiFault::kErrorAfterCommit, ApiFault::kLateCommit,
                       ApiFault::kReadBackFails, ApiFault::kWatchRequestFails, ApiFault::kConflict,
                       ApiFault::kErrorBeforeCommit}) {
      EXPECT_GE(report.faults.count(testing::ApiFaultName(f)), 1u) << testing::ApiFaultName(f);
    }
    for (testing::Action a : {testing::Action::kKillLeader, testing::Action::kTerminateLeader,
                              testing::Action::kRestartAll, testing::Action::kCompactAndDrop,
                              testing::Action::kRecreate, testing::Action::kDropWatches,
                              testing::Action::kTruncateEvent, testing::Action::kReleaseWatchesPartly,
                              testing::Action::kReleaseWatches}) {
      EXPECT_GE(report.faults.count(testing::ActionName(a)), 1u) << testing::ActionName(a);
    }
    for (const char* op : {"namespaces relabelled", "quotas changed", "nodes shrunk",
                           "pods recreated (new UID)", "bound pods deleted"}) {
      EXPECT_GE(report.operations.count(op), 1u) << op;
    }
  }
}

}  // namespace
}  // namespace gse
