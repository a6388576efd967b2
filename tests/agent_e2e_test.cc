// End to end: the extender binary in live mode (--kubeconfig to the local test API server),
// one node agent per node (in-process NodeAgent, as gpu-slice-agent runs it) and one test
// kubelet per node (real gRPC device-plugin and pod-resources APIs), driven as a cluster would
// drive them:
//   * kube-scheduler: filter, prioritize, bind over HTTP, one pod at a time from its queue;
//   * kubelet: sees a pod once it is bound (polling the API server), admits the pods of each
//     batch one at a time (GetPreferredAllocation, Allocate), starts the container
//     (PreStartContainer), writes the phase (Running, or Failed when admission is refused);
//     a failed start leaves the pod Pending and the test kubelet retries it after a backoff
//     on its own thread (as kubelet's pod worker does), writing Running when a retry succeeds;
//   * a controller: replaces a refused pod with a new one, as a ReplicaSet or notebook
//     controller does.
// Two A100 nodes, each with one GPU in MIG mode (7 time-sliced 1g.5gb slices x 4 tickets)
// and two whole GPUs. The referee reads what each container really got (its
// NVIDIA_VISIBLE_DEVICES and kubelet's device IDs) against the unit annotation on its pod:
//   every container's NVIDIA_VISIBLE_DEVICES is the UUID of its annotated unit; all of a
//   project's pods on a unit share that UUID; no UUID serves two projects; no exclusive UUID
//   is given twice.
// Faults: kubelet restart and agent restart mid-burst, a pod deleted between bind and
// admission, two pods of different projects scheduled onto one node at the same instant (the
// extender's per-node gate binds the second only after the agent confirmed the first, so the
// agent never has to fail closed; the counts are printed), a kubelet that offers another
// unit's IDs, an unhealthy MIG device.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "agent/agent_log.h"
#include "agent/node_agent.h"
#include "agent/published_inventory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/assignment.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/kubelet/test_kubelet.h"
#include "testsupport/paths.h"
#include "tests/testing/eventually.h"

namespace gse::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::Eventually;
using testing::FakeApiServer;
using testing::PodView;
using testsupport::AdmitResult;
using testsupport::TestKubelet;
using testsupport::TestPod;

constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kGpu[] = "nvidia.com/gpu";
constexpr int kSlices = 7;
constexpr int kTickets = 4;
const std::vector<std::string> kNodes = {"gpu-a", "gpu-b"};
// The extender's --agent-heartbeat-timeout here; the agents renew every second. Long enough
// that a sanitizer build's slow renewals never make a live agent stale.
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(6);
const std::vector<std::string> kProjects = {"team-a", "team-b", "team-c"};

// ---------------------------------------------------------------- the cluster's facts

std::string MigUuid(const std::string& node, int unit) { return absl::StrCat("MIG-", node, "-", unit); }
std::string GpuUuid(const std::string& node, int unit) { return absl::StrCat("GPU-", node, "-", unit + 1); }
std::string UnitUuid(const std::string& node, const std::string& resource, int unit) {
  return resource == kShared ? MigUuid(node, unit) : GpuUuid(node, unit);
}

// GPU 0 in MIG mode (slices listed out of placement order, as NVML may), GPUs 1 and 2 whole.
std::string InventoryJson(const std::string& node) {
  std::string migs;
  for (int k = 0; k < kSlices; ++k) {
    const int p = (k * 3) % kSlices;  // a permutation of 0..6
    absl::StrAppend(&migs, k ? "," : "", R"({"uuid":")", MigUuid(node, p),
                    R"(","profile":"1g.5gb","memoryMiB":4864,"placementStart":)", p,
                    R"(,"gpuInstanceId":)", 7 + p, "}");
  }
  return absl::StrCat(R"({"gpus":[{"index":0,"uuid":"GPU-)", node, R"(-0","product":"NVIDIA A100-SXM4-40GB",)",
                      R"("memoryMiB":40960,"migEnabled":true,"migDevices":[)", migs, "]},",
                      R"({"index":1,"uuid":")", GpuUuid(node, 0), R"(","product":"NVIDIA A100-SXM4-40GB","memoryMiB":40960},)",
                      R"({"index":2,"uuid":")", GpuUuid(node, 1), R"(","product":"NVIDIA A100-SXM4-40GB","memoryMiB":40960}]})");
}

// The Node as GPU feature discovery and the device plugins (here: the agent) make it.
std::string NodeJson(const std::string& node) {
  return absl::StrCat(R"({"metadata":{"name":")", node, R"(","labels":{)",
                      R"("kubernetes.io/hostname":")", node, R"(",)",
                      R"("nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB",)",
                      R"("nvidia.com/gpu.count":"2","nvidia.com/mig.strategy":"mixed",)",
                      R"("nvidia.com/mig-1g.5gb.count":"7","nvidia.com/mig-1g.5gb.replicas":"4",)",
                      R"("nvidia.com/mig-1g.5gb.sharing-strategy":"time-slicing",)",
                      R"("nvidia.com/mig-1g.5gb.product":"NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"}},)",
                      R"("spec":{},"status":{"allocatable":{"cpu":"64","memory":"512Gi","pods":"110",)",
                      R"("nvidia.com/mig-1g.5gb.shared":"28","nvidia.com/gpu":"2"},)",
                      R"("capacity":{"cpu":"64","memory":"512Gi","pods":"110",)",
                      R"("nvidia.com/mig-1g.5gb.shared":"28","nvidia.com/gpu":"2"}}})");
}

// ---------------------------------------------------------------- processes

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

pid_t Spawn(const std::string& binary, std::vector<std::string> args, const std::string& log) {
  args.insert(args.begin(), binary);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &actions, &attr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return pid;
}

// ---------------------------------------------------------------- kubelet's pod loop

// What kubelet did with one pod.
struct Admission {
  std::string key;
  std::string node;
  bool admitted = false;
  std::string refusal;  // kubelet's rejection message
  bool started = false;
  std::string start_error;  // of the last attempt
  int start_retries = 0;    // retries by the test kubelet after a failed start
  std::string resource;
  std::vector<std::string> ids;
  std::string visible;  // NVIDIA_VISIBLE_DEVICES
};

// Kubelet's side of a node: pods bound here are admitted in batches, one at a time.
class KubeletLoop {
 public:
  KubeletLoop(FakeApiServer* fake, TestKubelet* kubelet, std::string node)
      : fake_(fake), kubelet_(kubelet), node_(std::move(node)) {}
  ~KubeletLoop() { Stop(); }

  void Start() {
    kubelet_->SetStartListener(
        [this](const std::string& key, const std::string&, const absl::Status& s) { OnRetriedStart(key, s); });
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    kubelet_->SetStartListener(nullptr);
  }
  void SetPaused(bool paused) {
    absl::MutexLock lock(&mu_);
    paused_ = paused;
  }
  // Admits `pod` now, whatever the API server says (a kubelet whose view is stale).
  Admission AdmitNow(const PodView& pod) {
    {
      absl::MutexLock lock(&mu_);
      admitted_keys_.insert(pod.key);  // killed once the loop sees it is gone
    }
    return Admit(pod);
  }
  std::vector<Admission> admissions() const {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  // Pods bound here that are neither admitted nor refused yet.
  bool Idle() const {
    absl::MutexLock lock(&mu_);
    return idle_;
  }

 private:
  static TestPod ToTestPod(const PodView& p) {
    const size_t slash = p.key.find('/');
    TestPod t{p.key.substr(0, slash), p.key.substr(slash + 1), {}};
    testsupport::TestContainer c{"main", {}};
    for (const auto& [r, q] : p.requests) {
      if (absl::StartsWith(r, "nvidia.com/")) c.devices[r] = std::atoi(q.c_str());
    }
    t.containers.push_back(c);
    return t;
  }

  // The record goes into done_ before the phase is written (Settle() reads both) and before
  // the start, whose retries update it.
  Admission Admit(const PodView& p) {
    const TestPod t = ToTestPod(p);
    Admission a;
    a.key = p.key;
    a.node = node_;
    AdmitResult r = kubelet_->Admit(t);
    a.admitted = r.status.ok();
    if (!a.admitted) {
      a.refusal = std::string(r.status.message());
      {
        absl::MutexLock lock(&mu_);
        done_.push_back(a);
      }
      (void)fake_->SetPodPhase(t.namespace_name, t.name, "Failed");
      return a;
    }
    auto c = r.containers.find("main");
    if (c != r.containers.end()) {
      a.resource = c->second.resource;
      a.ids = c->second.ids;
      auto env = c->second.envs.find("NVIDIA_VISIBLE_DEVICES");
      if (env != c->second.envs.end()) a.visible = env->second;
    }
    size_t index;
    {
      absl::MutexLock lock(&mu_);
      index = done_.size();
      done_.push_back(a);
    }
    absl::Status s = kubelet_->StartContainer(p.key, "main");
    {
      absl::MutexLock lock(&mu_);
      Admission& rec = done_[index];
      if (rec.start_retries == 0) {  // a retry may already have answered
        rec.started = s.ok();
        rec.start_error = std::string(s.message());
      }
      a = rec;
    }
    if (s.ok()) (void)fake_->SetPodPhase(t.namespace_name, t.name, "Running");
    return a;
  }

  // The test kubelet retried a failed start (its retry thread).
  void OnRetriedStart(const std::string& key, const absl::Status& s) {
    {
      absl::MutexLock lock(&mu_);
      for (auto it = done_.rbegin(); it != done_.rend(); ++it) {
        if (it->key != key || !it->admitted) continue;
        it->started = s.ok();
        it->start_error = std::string(s.message());
        ++it->start_retries;
        break;
      }
    }
    const size_t slash = key.find('/');
    if (s.ok()) (void)fake_->SetPodPhase(key.substr(0, slash), key.substr(slash + 1), "Running");
  }

  void Loop() {
    while (!stop_.load()) {
      bool paused;
      {
        absl::MutexLock lock(&mu_);
        paused = paused_;
      }
      std::vector<PodView> batch;
      std::set<std::string> present;
      for (const PodView& p : fake_->Pods()) {
        if (p.node != node_) continue;
        present.insert(p.key);
        if (p.phase != "Pending" || p.terminating || seen_.count(p.uid) != 0) continue;
        batch.push_back(p);
      }
      {
        absl::MutexLock lock(&mu_);
        // Deleted pods: kubelet kills them and frees their devices.
        for (auto it = admitted_keys_.begin(); it != admitted_keys_.end();) {
          if (present.count(*it) == 0) {
            kubelet_->RemovePod(*it);
            it = admitted_keys_.erase(it);
          } else {
            ++it;
          }
        }
        idle_ = batch.empty() || paused;
      }
      if (paused || batch.empty()) {
        absl::SleepFor(absl::Milliseconds(3));
        continue;
      }
      for (const PodView& p : batch) {
        seen_.insert(p.uid);
        {
          absl::MutexLock lock(&mu_);
          admitted_keys_.insert(p.key);
        }
        Admit(p);
      }
    }
  }

  FakeApiServer* fake_;
  TestKubelet* kubelet_;
  const std::string node_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::set<std::string> seen_;  // loop thread only
  mutable absl::Mutex mu_;
  std::set<std::string> admitted_keys_ ABSL_GUARDED_BY(mu_);
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Admission> done_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------- the fixture

class AgentEndToEnd : public ::testing::Test {
 protected:
  struct Node {
    std::string name;
    std::unique_ptr<TestKubelet> kubelet;
    std::unique_ptr<KubeClient> client;
    std::unique_ptr<NodeAgent> agent;
    std::unique_ptr<KubeletLoop> loop;
  };

  void SetUp() override {
    SetLogSinkForTest([this](const std::string& line) {
      absl::MutexLock lock(&log_mu_);
      log_.push_back(line);
    });
    ASSERT_TRUE(fake_.Start().ok());
    for (const std::string& p : kProjects) {
      ASSERT_TRUE(fake_.Apply("namespaces", absl::StrCat(R"({"metadata":{"name":")", p,
                                                         R"(","labels":{"gpu.themelio.io/project":")", p, R"("}}})"))
                      .ok());
    }
    for (const std::string& n : kNodes) ASSERT_TRUE(fake_.Apply("nodes", NodeJson(n)).ok());
    dir_.Write("kubeconfig", fake_.Kubeconfig());
    StartExtender();
    for (const std::string& n : kNodes) {
      auto node = std::make_unique<Node>();
      node->name = n;
      // Kubelet retries a failed container start after 10 s; a shorter wait keeps the test short.
      node->kubelet = std::make_unique<TestKubelet>(
          TestKubelet::Options{dir_.File("kubelet-" + n), 11, absl::Milliseconds(200)});
      ASSERT_TRUE(node->kubelet->Start().ok());
      auto config = LoadKubeconfig(dir_.File("kubeconfig"));
      ASSERT_TRUE(config.ok()) << config.status();
      auto client = KubeClient::Create(*config);
      ASSERT_TRUE(client.ok());
      node->client = *std::move(client);
      StartAgent(*node);
      node->loop = std::make_unique<KubeletLoop>(&fake_, node->kubelet.get(), n);
      node->loop->Start();
      nodes_.push_back(std::move(node));
    }
  }

  void TearDown() override {
    for (auto& n : nodes_) n->loop->Stop();
    for (auto& n : nodes_) {
      if (n->agent) n->agent->Stop();
      n->kubelet->Stop();
    }
    if (extender_ > 0) {
      kill(extender_, SIGTERM);
      waitpid(extender_, nullptr, 0);
    }
    SetLogSinkForTest(nullptr);
    if (HasFailure()) {
      absl::MutexLock lock(&log_mu_);
      const size_t from = log_.size() > 60 ? log_.size() - 60 : 0;
      for (size_t i = from; i < log_.size(); ++i) std::fprintf(stderr, "agent log: %s\n", log_[i].c_str());
      if (access(dir_.File("extender.log").c_str(), R_OK) == 0) {
        std::fprintf(stderr, "extender log (tail):\n%s\n",
                     Tail(testing::ReadFileOrDie(dir_.File("extender.log"))).c_str());
      }
    }
  }

  static std::string Tail(const std::string& s) { return s.size() > 4000 ? s.substr(s.size() - 4000) : s; }

  void StartExtender() {
    const std::string binary = testing::BinPath("gpu-slice-extender");
    ASSERT_EQ(access(binary.c_str(), X_OK), 0) << binary << " is not built (the agent_e2e_test target depends on it)";
    port_ = FreePort();
    extender_ = Spawn(binary,
                      {absl::StrCat("--listen=127.0.0.1:", port_), "--kubeconfig=" + dir_.File("kubeconfig"),
                       "--in-cluster=false", "--agent-lease-namespace=gpu-slice-agent",
                       absl::StrCat("--agent-heartbeat-timeout=", absl::FormatDuration(kHeartbeatTimeout))},
                      dir_.File("extender.log"));
    ASSERT_GT(extender_, 0);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    http_->set_tcp_nodelay(true);
    http_->set_read_timeout(30, 0);
    ASSERT_TRUE(Eventually([&] {
      auto r = http_->Get("/readyz");
      return r && r->status == 200;
    }, absl::Seconds(120))) << testing::ReadFileOrDie(dir_.File("extender.log"));
  }

  void StartAgent(Node& node) {
    dir_.Write("inventory-" + node.name + ".json", InventoryJson(node.name));
    auto inv = LoadInventoryFile(dir_.File("inventory-" + node.name + ".json"));
    ASSERT_TRUE(inv.ok()) << inv.status();
    NodeAgentOptions o;
    o.node = node.name;
    o.served = {ServedSpec{kShared, kTickets}, ServedSpec{kGpu, 0}};
    o.pod_resources_socket = node.kubelet->pod_resources_socket();
    o.registrar.device_plugin_dir = node.kubelet->device_plugin_dir();
    o.registrar.poll_interval = absl::Milliseconds(20);
    o.audit.interval = absl::Milliseconds(200);
    o.admission.resync_timeout = absl::Seconds(5);
    o.heartbeat.lease_namespace = "gpu-slice-agent";
    o.heartbeat.interval = absl::Seconds(1);
    auto agent = NodeAgent::Create(&Catalog::BuiltIn(), node.client.get(), *std::move(inv), nullptr, o);
    ASSERT_TRUE(agent.ok()) << agent.status();
    node.agent = *std::move(agent);
    ASSERT_TRUE(node.agent->Start().ok());
    ASSERT_TRUE(node.kubelet->WaitForResource(kShared, kSlices * kTickets, absl::Seconds(60)));
    ASSERT_TRUE(node.kubelet->WaitForResource(kGpu, 2, absl::Seconds(60)));
  }

  void RestartAgent(Node& node) {
    node.agent->Stop();
    node.agent.reset();
    StartAgent(node);
  }

  Node& NodeNamed(const std::string& name) {
    for (auto& n : nodes_) {
      if (n->name == name) return *n;
    }
    ADD_FAILURE() << "no node " << name;
    return *nodes_.front();
  }

  // ---- kube-scheduler and a controller

  std::string CreatePod(const std::string& ns, const std::string& name, const std::string& resource) {
    testing::PodSpec spec;
    spec.namespace_name = ns;
    spec.name = name;
    spec.requests = {{resource, "1"}};
    EXPECT_TRUE(fake_.Apply("pods", testing::PodJson(spec)).ok());
    return absl::StrCat(ns, "/", name);
  }

  // Filter, prioritize and bind one pod as kube-scheduler does; false when it stays pending.
  bool Schedule(const std::string& key, const std::vector<std::string>& candidates = kNodes) {
    const size_t slash = key.find('/');
    std::optional<std::string> pod = fake_.Get("pods", key.substr(0, slash), key.substr(slash + 1));
    if (!pod) return false;
    const std::string names = absl::StrCat("[\"", absl::StrJoin(candidates, "\",\""), "\"]");
    const std::string args = absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":)", names, "}");
    auto f = http_->Post("/filter", args, "application/json");
    if (!f || f->status != 200) return false;
    rapidjson::Document fd;
    fd.Parse(f->body.c_str());
    if (fd.HasParseError() || !fd.HasMember("NodeNames") || !fd["NodeNames"].IsArray() || fd["NodeNames"].Empty()) {
      return false;
    }
    std::vector<std::string> feasible;
    for (const auto& n : fd["NodeNames"].GetArray()) feasible.push_back(n.GetString());
    std::string best = feasible.front();
    auto p = http_->Post("/prioritize",
                         absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":[")",
                                      absl::StrJoin(feasible, "\",\""), "\"]}"),
                         "application/json");
    if (p && p->status == 200) {
      rapidjson::Document pd;
      pd.Parse(p->body.c_str());
      int64_t top = -1;
      if (!pd.HasParseError() && pd.IsArray()) {
        for (const auto& h : pd.GetArray()) {
          if (h["Score"].GetInt64() > top) {
            top = h["Score"].GetInt64();
            best = h["Host"].GetString();
          }
        }
      }
    }
    rapidjson::Document podj;
    podj.Parse(pod->c_str());
    auto b = http_->Post("/bind",
                         absl::StrCat(R"({"PodName":")", key.substr(slash + 1), R"(","PodNamespace":")",
                                      key.substr(0, slash), R"(","PodUID":")", podj["metadata"]["uid"].GetString(),
                                      R"(","Node":")", best, R"("})"),
                         "application/json");
    return b && b->status == 200 && b->body.find(R"("Error":"")") != std::string::npos;
  }

  // Waits until every pod bound to a node runs or was refused: kubelet retries a failed start
  // until it succeeds, so a pod still Pending after a long while names a start that the agent
  // keeps refusing.
  void Settle() {
    std::string pending;
    const bool settled = Eventually([&] {
      pending.clear();
      for (const PodView& p : fake_.Pods()) {
        if (!p.node.empty() && p.phase == "Pending" && !p.terminating) absl::StrAppend(&pending, " ", p.key);
      }
      return pending.empty();
    }, absl::Seconds(120));
    if (settled) return;
    std::string why;
    for (auto& n : nodes_) {
      for (const Admission& a : n->loop->admissions()) {
        if (a.admitted && !a.started) {
          absl::StrAppend(&why, "\n  ", a.key, " on ", a.node, ": ", a.start_retries, " retries, last: ", a.start_error);
        }
      }
    }
    FAIL() << "bound pods still Pending:" << pending << why;
  }

  struct Burst {
    int wanted = 0;
    int running = 0;
    int refused = 0;     // admissions refused (each replaced by the controller)
    int unscheduled = 0;  // pods no node could take
  };

  // `wanted` pods (namespace, resource): created at once, scheduled one by one, refused ones
  // replaced until all run (at most `rounds` rounds). `mid_burst` runs once, halfway.
  Burst RunBurst(const std::vector<std::pair<std::string, std::string>>& wanted,
                 const std::string& prefix, const std::function<void()>& mid_burst = nullptr,
                 int rounds = 30) {
    Burst out;
    out.wanted = static_cast<int>(wanted.size());
    std::vector<std::string> current;  // the live incarnation of each wanted pod
    for (size_t i = 0; i < wanted.size(); ++i) {
      current.push_back(CreatePod(wanted[i].first, absl::StrCat(prefix, i), wanted[i].second));
    }
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < current.size(); ++i) {
        if (round == 0 && i == current.size() / 2 && mid_burst) mid_burst();
        const PodView* v = nullptr;
        const std::vector<PodView> pods = fake_.Pods();
        for (const PodView& p : pods) {
          if (p.key == current[i]) v = &p;
        }
        if (v != nullptr && v->node.empty()) (void)Schedule(current[i]);
      }
      Settle();
      bool all = true;
      for (size_t i = 0; i < current.size(); ++i) {
        std::string phase, node;
        for (const PodView& p : fake_.Pods()) {
          if (p.key == current[i]) {
            phase = p.phase;
            node = p.node;
          }
        }
        if (phase == "Failed") {
          // The controller replaces the refused pod.
          ++out.refused;
          const size_t slash = current[i].find('/');
          EXPECT_TRUE(fake_.Delete("pods", current[i].substr(0, slash), current[i].substr(slash + 1)));
          current[i] = CreatePod(wanted[i].first, absl::StrCat(prefix, i, "-r", round), wanted[i].second);
          all = false;
        } else if (phase != "Running") {
          all = false;
        }
      }
      if (all) break;
    }
    for (const std::string& key : current) {
      for (const PodView& p : fake_.Pods()) {
        if (p.key == key && p.phase == "Running") ++out.running;
        if (p.key == key && p.node.empty()) ++out.unscheduled;
      }
    }
    return out;
  }

  // ---- the referee

  // Violations of "the decision is what runs", from kubelet's records and the API server's
  // annotations (not from any agent or extender code).
  std::vector<std::string> Referee() {
    std::vector<std::string> v;
    std::map<std::string, PodView> pods;
    for (const PodView& p : fake_.Pods()) pods[p.key] = p;
    std::map<std::string, std::set<std::string>> projects_of_uuid;        // live, time-sliced
    std::map<std::string, std::set<std::string>> uuids_of_project_unit;   // project|unit -> uuids
    std::map<std::string, int> tickets_of_uuid;
    std::map<std::string, std::vector<std::string>> holders_of_exclusive;
    for (auto& n : nodes_) {
      for (const Admission& a : n->loop->admissions()) {
        if (!a.admitted) continue;
        auto it = pods.find(a.key);
        const bool live = it != pods.end() && it->second.phase == "Running" && !it->second.terminating;
        const PodView* p = it == pods.end() ? nullptr : &it->second;
        if (p == nullptr) {
          // Deleted since: it must never have started on a unit it was not annotated with;
          // the start check refuses a pod the agent does not know.
          if (a.started) v.push_back(absl::StrCat(a.key, ": started although deleted before admission"));
          continue;
        }
        auto unit = p->annotations.find(std::string(kAnnotationUnit));
        if (unit == p->annotations.end()) {
          v.push_back(absl::StrCat(a.key, ": admitted without a unit annotation"));
          continue;
        }
        auto assignment = ParseAssignmentAnnotations(p->annotations, a.node, Catalog::BuiltIn());
        if (!assignment.ok()) {
          v.push_back(absl::StrCat(a.key, ": ", assignment.status().message()));
          continue;
        }
        std::vector<std::string> want;
        const std::string resource = Catalog::BuiltIn().Get(assignment->offering).resource;
        for (int32_t u : assignment->units) want.push_back(UnitUuid(a.node, resource, u));
        if (a.visible != absl::StrJoin(want, ",")) {
          v.push_back(absl::StrCat(a.key, ": NVIDIA_VISIBLE_DEVICES=", a.visible, " but annotated ", unit->second,
                                   " = ", absl::StrJoin(want, ",")));
        }
        for (const std::string& id : a.ids) {
          if (!absl::StartsWith(id, want.front())) {
            v.push_back(absl::StrCat(a.key, ": kubelet recorded ", id, " outside ", want.front()));
          }
        }
        if (!live) continue;
        const std::string project = p->annotations.count(std::string(kAnnotationProject))
                                        ? p->annotations.at(std::string(kAnnotationProject))
                                        : a.key.substr(0, a.key.find('/'));
        if (resource == kShared) {
          projects_of_uuid[a.visible].insert(project);
          uuids_of_project_unit[project + "|" + unit->second].insert(a.visible);
          ++tickets_of_uuid[a.visible];
        } else {
          for (const std::string& u : want) holders_of_exclusive[u].push_back(a.key);
        }
      }
    }
    for (const auto& [uuid, projects] : projects_of_uuid) {
      if (projects.size() > 1) v.push_back(absl::StrCat(uuid, " serves ", absl::StrJoin(projects, ",")));
    }
    for (const auto& [unit, uuids] : uuids_of_project_unit) {
      if (uuids.size() > 1) v.push_back(absl::StrCat(unit, " spread over ", absl::StrJoin(uuids, ",")));
    }
    for (const auto& [uuid, n] : tickets_of_uuid) {
      if (n > kTickets) v.push_back(absl::StrCat(uuid, " has ", n, " tickets"));
    }
    for (const auto& [uuid, holders] : holders_of_exclusive) {
      if (holders.size() > 1) v.push_back(absl::StrCat(uuid, " given to ", absl::StrJoin(holders, ",")));
    }
    return v;
  }

  int CountRefusals(absl::string_view needle) {
    int n = 0;
    for (auto& node : nodes_) {
      for (const Admission& a : node->loop->admissions()) n += absl::StrContains(a.refusal, needle);
    }
    return n;
  }

  testing::ScratchDir dir_;
  FakeApiServer fake_;
  pid_t extender_ = -1;
  int port_ = 0;
  std::unique_ptr<httplib::Client> http_;
  std::vector<std::unique_ptr<Node>> nodes_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

std::vector<std::pair<std::string, std::string>> Notebooks(int per_project, int whole_gpus) {
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < per_project; ++i) {
    for (const std::string& p : kProjects) out.emplace_back(p, kShared);
  }
  for (int i = 0; i < whole_gpus; ++i) out.emplace_back(kProjects[static_cast<size_t>(i) % kProjects.size()], kGpu);
  return out;
}

TEST_F(AgentEndToEnd, BurstsOfNotebooksRunOnTheirAnnotatedUnits) {
  Burst b = RunBurst(Notebooks(6, 4), "nb-");
  EXPECT_EQ(b.running, b.wanted) << "refused " << b.refused << ", unscheduled " << b.unscheduled;
  EXPECT_THAT(Referee(), IsEmpty());
  // Every refusal was the agent failing closed on an ambiguous admission, never anything else.
  EXPECT_EQ(CountRefusals("cannot tell which pod kubelet is admitting") + CountRefusals("no pod bound to node"),
            b.refused);
  std::printf("burst: %d pods running, %d admissions refused (failed closed) and replaced\n", b.running, b.refused);
  // The agents confirmed what kubelet handed out, for the extender's gate.
  ASSERT_TRUE(Eventually([&] {
    int confirmed = 0, running = 0;
    for (const PodView& p : fake_.Pods()) {
      if (p.phase != "Running") continue;
      ++running;
      confirmed += p.annotations.count(std::string(kAnnotationAllocated)) != 0;
    }
    return running == b.wanted && confirmed == running;
  }));
  // The Node objects carry each agent's inventory.
  for (const std::string& n : kNodes) {
    std::optional<std::string> node = fake_.Get("nodes", "", n);
    ASSERT_TRUE(node.has_value());
    EXPECT_THAT(*node, HasSubstr(MigUuid(n, 6)));
  }
}

TEST_F(AgentEndToEnd, KubeletAndAgentRestartsMidBurst) {
  Burst b = RunBurst(Notebooks(4, 2), "k-", [&] { ASSERT_TRUE(NodeNamed("gpu-a").kubelet->Restart().ok()); });
  EXPECT_EQ(b.running, b.wanted) << "refused " << b.refused;
  EXPECT_THAT(Referee(), IsEmpty());
  Burst c = RunBurst(Notebooks(3, 0), "g-", [&] { RestartAgent(NodeNamed("gpu-b")); });
  EXPECT_EQ(c.running, c.wanted) << "refused " << c.refused;
  EXPECT_THAT(Referee(), IsEmpty());
  std::printf("restarts: %d + %d admissions refused and replaced\n", b.refused, c.refused);
}

TEST_F(AgentEndToEnd, PodDeletedBetweenBindAndAdmissionGetsNothing) {
  Node& a = NodeNamed("gpu-a");
  a.loop->SetPaused(true);
  const std::string x = CreatePod("team-a", "x", kShared);
  ASSERT_TRUE(Schedule(x, {"gpu-a"}));
  std::optional<std::string> bound = fake_.Get("pods", "team-a", "x");
  ASSERT_TRUE(bound.has_value());
  PodView xv;
  for (const PodView& p : fake_.Pods()) {
    if (p.key == x) xv = p;
  }
  ASSERT_TRUE(fake_.Delete("pods", "team-a", "x"));
  ASSERT_TRUE(Eventually([&] {
    for (const NodePod& p : a.agent->pods().Snapshot()) {
      if (p.Key() == x) return false;
    }
    return true;
  }));
  // A kubelet whose view is older than the deletion admits it anyway: nobody waits for the
  // device, so the agent refuses rather than guess.
  Admission r = a.loop->AdmitNow(xv);
  EXPECT_FALSE(r.admitted);
  EXPECT_THAT(r.refusal, HasSubstr("no pod bound to node gpu-a waits for"));
  // The same while another project's pod waits: its unit may be attributed to the stale
  // call, but the container never starts (pod-resources names the deleted pod), and the
  // waiting pod still gets its own unit.
  const std::string x2 = CreatePod("team-a", "x2", kShared);
  ASSERT_TRUE(Schedule(x2, {"gpu-a"}));
  PodView x2v;
  for (const PodView& p : fake_.Pods()) {
    if (p.key == x2) x2v = p;
  }
  ASSERT_TRUE(fake_.Delete("pods", "team-a", "x2"));
  const std::string y = CreatePod("team-b", "y", kShared);
  // The per-node gate holds y back until the extender has seen x2's deletion.
  ASSERT_TRUE(Eventually([&] { return Schedule(y, {"gpu-a"}); }, absl::Seconds(60)));
  ASSERT_TRUE(Eventually([&] {
    bool has_y = false, has_x2 = false;
    for (const NodePod& p : a.agent->pods().Snapshot()) {
      has_y |= p.Key() == y;
      has_x2 |= p.Key() == x2;
    }
    return has_y && !has_x2;
  }));
  Admission stale = a.loop->AdmitNow(x2v);
  EXPECT_FALSE(stale.admitted && stale.started) << "a deleted pod's container started on " << stale.visible;
  a.loop->SetPaused(false);
  ASSERT_TRUE(Eventually([&] {
    for (const PodView& p : fake_.Pods()) {
      if (p.key == y) return p.phase == "Running";
    }
    return false;
  }, absl::Seconds(60)));
  EXPECT_THAT(Referee(), IsEmpty());
}

TEST_F(AgentEndToEnd, TwoProjectsBoundToOneNodeAtOnceAreSerialisedByTheGate) {
  // Pods of two projects (so two different slices) scheduled onto one node at the same
  // instant. Without the extender's per-node gate both were bound and waited for kubelet
  // together, and the agent, unable to tell them apart, refused admissions (fail closed). With
  // the gate the second waits until the agent confirms the first (gpu.themelio.io/allocated):
  // no refusal, both run, each on its own unit.
  Node& a = NodeNamed("gpu-a");
  int pairs = 0, both_admitted = 0, gated = 0;
  for (int i = 0; i < 5; ++i) {
    a.loop->SetPaused(true);  // kubelet does not admit yet: the agent cannot confirm
    const std::string p = CreatePod("team-a", absl::StrCat("pa-", i), kShared);
    const std::string q = CreatePod("team-b", absl::StrCat("pb-", i), kShared);
    std::atomic<bool> p_bound{false}, q_bound{false};
    // kube-scheduler retries a pod that found no node; each retries until one of the two is
    // bound (the previous pair's confirmation may still be on its way to the extender).
    auto bind_one = [&](const std::string& key, std::atomic<bool>& mine, const std::atomic<bool>& other) {
      EXPECT_TRUE(Eventually([&] {
        if (other.load()) return true;
        mine = Schedule(key, {"gpu-a"});
        return mine.load();
      }, absl::Seconds(60)));
    };
    std::thread t1([&] { bind_one(p, p_bound, q_bound); });
    std::thread t2([&] { bind_one(q, q_bound, p_bound); });
    t1.join();
    t2.join();
    // Exactly one of them got through the gate; the other is still pending.
    EXPECT_NE(p_bound.load(), q_bound.load()) << "pair " << i;
    gated += p_bound.load() != q_bound.load();
    const std::string waiting = p_bound ? q : p;
    a.loop->SetPaused(false);
    Settle();
    // kube-scheduler retries the pending pod; it binds once the agent confirmed the first.
    EXPECT_TRUE(Eventually([&] { return Schedule(waiting, {"gpu-a"}); }, absl::Seconds(60)))
        << waiting << " never got through the gate";
    Settle();
    ++pairs;
    int running = 0;
    for (const PodView& v : fake_.Pods()) running += (v.key == p || v.key == q) && v.phase == "Running";
    both_admitted += running == 2;
  }
  const int ambiguous = CountRefusals("cannot tell which pod kubelet is admitting");
  std::printf("simultaneous binds: %d pairs, %d second binds held by the gate, %d admissions failed closed "
              "(ambiguous), %d pairs both admitted\n",
              pairs, gated, ambiguous, both_admitted);
  EXPECT_EQ(ambiguous, 0) << "the gate leaves the agent one candidate group at a time";
  EXPECT_EQ(both_admitted, pairs);
  EXPECT_THAT(Referee(), IsEmpty());
  EXPECT_THAT(a.agent->MetricsText(),
              HasSubstr(absl::StrCat("gse_agent_identification_failures_total{reason=\"ambiguous\",resource=\"",
                                     kShared, "\"} 0")));
  // The gate's reason as kube-scheduler sees it while the first pod waits.
  a.loop->SetPaused(true);
  const std::string first = CreatePod("team-a", "gate-first", kShared);
  const std::string second = CreatePod("team-b", "gate-second", kShared);
  ASSERT_TRUE(Eventually([&] { return Schedule(first, {"gpu-a"}); }, absl::Seconds(60)));
  const size_t slash = second.find('/');
  std::optional<std::string> pod = fake_.Get("pods", second.substr(0, slash), second.substr(slash + 1));
  ASSERT_TRUE(pod.has_value());
  auto f = http_->Post("/filter", absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":["gpu-a"]})"),
                       "application/json");
  ASSERT_TRUE(f && f->status == 200);
  EXPECT_THAT(f->body, HasSubstr("waiting for the node agent"));
  a.loop->SetPaused(false);
  Settle();
}

TEST_F(AgentEndToEnd, KubeletOfferingAnotherUnitsIdsIsRefused) {
  Node& a = NodeNamed("gpu-a");
  // A kubelet that ignores the preferred allocation and takes the last available ID.
  a.kubelet->SetPicker([](const std::vector<std::string>& available, const std::vector<std::string>& preferred,
                          int32_t) {
    for (auto it = available.rbegin(); it != available.rend(); ++it) {
      if (preferred.empty() || it->substr(0, it->find("::")) != preferred.front().substr(0, preferred.front().find("::"))) {
        return std::vector<std::string>{*it};
      }
    }
    return std::vector<std::string>{};
  });
  const std::string p = CreatePod("team-c", "wrong", kShared);
  ASSERT_TRUE(Schedule(p, {"gpu-a"}));
  Settle();
  std::vector<Admission> adm = a.loop->admissions();
  ASSERT_EQ(adm.size(), 1u);
  EXPECT_FALSE(adm[0].admitted);
  EXPECT_THAT(adm[0].refusal, HasSubstr("is annotated with unit(s)"));
  EXPECT_TRUE(a.kubelet->AllocatedIds(p).empty());
  EXPECT_THAT(Referee(), IsEmpty());
}

// An unhealthy MIG device: its IDs turn Unhealthy in ListAndWatch (kubelet stops offering
// them), the Node's published inventory says healthy:false, a pod annotated with that unit is
// refused rather than given another slice, and once kubelet has lowered the Node's
// allocatable (done here by the test, as the test API server has no kubelet status loop) the
// extender trusts the inventory, shows the unit's UUID unhealthy and never chooses it.
TEST_F(AgentEndToEnd, UnhealthyMigDeviceStopsBeingOfferedByTheAgent) {
  Node& a = NodeNamed("gpu-a");
  const std::string broken = MigUuid("gpu-a", 3);
  a.agent->health().MarkUnhealthy(broken, "Xid 79 (GPU has fallen off the bus)");
  ASSERT_TRUE(a.kubelet->WaitForDevices(
      kShared,
      [&](const std::map<std::string, bool>& d) {
        for (const auto& [id, healthy] : d) {
          if (absl::StartsWith(id, broken + "::") == healthy) return false;
        }
        return true;
      },
      absl::Seconds(30)));
  ASSERT_TRUE(Eventually([&] {
    std::optional<std::string> node = fake_.Get("nodes", "", "gpu-a");
    return node && node->find(absl::StrCat(R"(\"uuid\":\")", broken, R"(\",\"gpu\":0,\"profile\":\"1g.5gb\",\"placementStart\":3,\"healthy\":false)")) != std::string::npos;
  })) << *fake_.Get("nodes", "", "gpu-a");
  // A pod the extender (which does not know yet) placed on the broken slice.
  testing::PodSpec spec;
  spec.namespace_name = "team-b";
  spec.name = "on-broken";
  spec.node = "gpu-a";
  spec.requests = {{kShared, "1"}};
  spec.annotations = {{std::string(kAnnotationUnit), absl::StrCat("gpu-a/", kShared, "/3")},
                      {std::string(kAnnotationAmount), "1"},
                      {std::string(kAnnotationProject), "team-b"}};
  ASSERT_TRUE(fake_.Apply("pods", testing::PodJson(spec)).ok());
  Settle();
  bool refused = false;
  for (const Admission& adm : a.loop->admissions()) {
    if (adm.key == "team-b/on-broken") {
      refused = !adm.admitted;
      EXPECT_THAT(adm.refusal, HasSubstr("annotated with unit(s) 3"));
    }
    EXPECT_NE(adm.visible, broken) << adm.key;
  }
  EXPECT_TRUE(refused);
  EXPECT_THAT(a.agent->MetricsText(),
              HasSubstr(absl::StrCat("gse_agent_unhealthy_units{resource=\"", kShared, "\"} 1")));

  // Kubelet's node status: allocatable without the unhealthy slice's 4 tickets.
  std::optional<std::string> node_json = fake_.Get("nodes", "", "gpu-a");
  ASSERT_TRUE(node_json.has_value());
  rapidjson::Document node;
  node.Parse(node_json->c_str());
  ASSERT_FALSE(node.HasParseError());
  node["status"]["allocatable"][kShared].SetString("24", node.GetAllocator());
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buf);
  node.Accept(writer);
  ASSERT_TRUE(fake_.Apply("nodes", buf.GetString()).ok());
  ASSERT_TRUE(Eventually([&] {
    auto s = http_->Get("/debug/state");
    return s && s->status == 200 &&
           s->body.find(absl::StrCat(R"("id":"gpu-a/)", kShared, R"(/3")")) != std::string::npos &&
           s->body.find(absl::StrCat(R"("uuid":")", broken, R"(","healthy":false)")) != std::string::npos;
  }, absl::Seconds(30))) << "the extender never showed the unhealthy unit";
  // Five projects' notebooks onto gpu-a: five slices, none of them the unhealthy one.
  for (const char* ns : {"team-a", "team-c", "team-d", "team-e", "team-f"}) {
    const std::string key = CreatePod(ns, "after-broken", kShared);
    ASSERT_TRUE(Eventually([&] { return Schedule(key, {"gpu-a"}); }, absl::Seconds(60))) << key;
    Settle();
    std::optional<std::string> pod = fake_.Get("pods", ns, "after-broken");
    ASSERT_TRUE(pod.has_value());
    EXPECT_THAT(*pod, ::testing::Not(HasSubstr(absl::StrCat("gpu-a/", kShared, "/3\""))))
        << ns << " was placed on the unhealthy slice";
  }
  EXPECT_THAT(Referee(), IsEmpty());
}

TEST_F(AgentEndToEnd, AnAgentThatStopsRenewingGetsItsNodeRefusedUntilItRenewsAgain) {
  Node& a = NodeNamed("gpu-a");
  const std::string key = CreatePod("team-a", "heartbeat", kShared);
  const size_t slash = key.find('/');
  auto filter = [&]() -> std::string {
    std::optional<std::string> pod = fake_.Get("pods", key.substr(0, slash), key.substr(slash + 1));
    if (!pod) return "";
    auto f = http_->Post("/filter",
                         absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":["gpu-a","gpu-b"]})"),
                         "application/json");
    return f && f->status == 200 ? f->body : "";
  };
  auto metric = [&]() -> std::string {
    auto m = http_->Get("/metrics");
    return m && m->status == 200 ? m->body : "";
  };
  // Both agents renew: both nodes pass.
  ASSERT_TRUE(Eventually([&] { return filter().find(R"("NodeNames":["gpu-a","gpu-b"])") != std::string::npos; },
                         absl::Seconds(60)))
      << filter();
  EXPECT_THAT(metric(), HasSubstr("gse_nodes_agent_stale 0"));

  a.agent->Stop();  // the agent dies (its inventory annotation stays on the Node)
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(Eventually([&] {
    return filter().find(R"("gpu-a":"node agent not renewing its heartbeat Lease")") != std::string::npos;
  }, absl::Seconds(120))) << filter();
  const absl::Duration refused_after = absl::Now() - stopped;
  EXPECT_GE(refused_after, kHeartbeatTimeout / 2) << "refused, but not before its timeout";
  EXPECT_THAT(filter(), HasSubstr(R"("NodeNames":["gpu-b"])")) << "the other node's agent is alive";
  EXPECT_THAT(filter(), HasSubstr("FailedAndUnresolvableNodes")) << "preemption cannot help";
  EXPECT_TRUE(Eventually([&] { return metric().find("gse_nodes_agent_stale 1") != std::string::npos; },
                         absl::Seconds(30)));
  auto state = http_->Get("/debug/state");
  ASSERT_TRUE(state && state->status == 200);
  EXPECT_THAT(state->body, HasSubstr(R"({"node":"gpu-a","agent":"stale","last_renewal":")"));
  EXPECT_THAT(state->body, HasSubstr(R"({"node":"gpu-b","agent":"live")"));
  // kube-scheduler binds there anyway (its cache raced the filter): bind refuses too.
  {
    std::optional<std::string> pod = fake_.Get("pods", key.substr(0, slash), key.substr(slash + 1));
    ASSERT_TRUE(pod.has_value());
    rapidjson::Document podj;
    podj.Parse(pod->c_str());
    auto b = http_->Post("/bind",
                         absl::StrCat(R"({"PodName":"heartbeat","PodNamespace":"team-a","PodUID":")",
                                      podj["metadata"]["uid"].GetString(), R"(","Node":"gpu-a"})"),
                         "application/json");
    ASSERT_TRUE(b);
    EXPECT_THAT(b->body, HasSubstr("node agent not renewing its heartbeat Lease"));
  }

  const absl::Time restarted = absl::Now();
  RestartAgent(a);  // renews again
  ASSERT_TRUE(Eventually([&] { return filter().find(R"("NodeNames":["gpu-a","gpu-b"])") != std::string::npos; },
                         absl::Seconds(120)))
      << filter();
  std::printf("heartbeat: node refused %.1fs after its agent stopped (--agent-heartbeat-timeout=%s, "
              "renewals every 1s), admitted again %.1fs after the agent restarted\n",
              absl::ToDoubleSeconds(refused_after), absl::FormatDuration(kHeartbeatTimeout).c_str(),
              absl::ToDoubleSeconds(absl::Now() - restarted));
  EXPECT_TRUE(Eventually([&] { return metric().find("gse_nodes_agent_stale 0") != std::string::npos; },
                         absl::Seconds(30)));
  ASSERT_TRUE(Eventually([&] { return Schedule(key, {"gpu-a"}); }, absl::Seconds(60)));
  Settle();
  EXPECT_THAT(Referee(), IsEmpty());
}

}  // namespace
}  // namespace gse::agent
