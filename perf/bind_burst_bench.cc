// bind_burst_bench: issue 14's benchmark. Does a burst of binds slow down the scheduling loop?
// It drives the extender the way kube-scheduler 1.26 does, against the local Kubernetes API
// server, and prints figures (it never asserts timings):
//
//   build/bin/bind_burst_bench                      # 500 nodes; 0, 16, 64, 256 binds in flight
//   build/bin/bind_burst_bench --nodes=40 --level_seconds=0.5 --in_flight=4 --backlog_pods=50
//       --cost_nodes=0                              # smoke size (ctest; one command line)
//   build/bin/bind_burst_bench --cost_nodes=0 --extender_cpus=1 --bind_nice=0   # and =10: what
//       --bind-nice buys when the extender's binds and verbs share one CPU (a CPU limit)
//
// How kube-scheduler calls the extender (pkg/scheduler/extender.go, schedule_one.go; see
// shared/protocol/PROTOCOL.md §2): one scheduling goroutine calls filter, then prioritize,
// synchronously, one pod at a time; each bind runs in a goroutine of its own. All calls share
// one http.Client whose Transport comes from utilnet.SetTransportDefaults, which leaves
// MaxIdleConnsPerHost at Go's default of 2 and MaxConnsPerHost unlimited: a call takes the most
// recently idled connection or dials a new one, and after the answer the connection is kept
// only while fewer than 2 are idle. So while binds are in flight the scheduling loop keeps
// dialing new connections — which is where a server that parks connections behind binds makes
// it wait. GoLikeTransport below does the same.
//
// The run: two processes, as in production. The extender is the production binary
// (build/bin/gpu-slice-extender, --extender_binary; its own flags, printed) in a process of its
// own, started with --kubeconfig against testsupport's FakeApiServer with a latency per write and
// a server-side write limit that answers 429 + Retry-After as kube-apiserver's flow control does.
// The API server and kube-scheduler's stand-in (the scheduling loop, the binders and their
// shared transport) run in this process. In production both run on other machines; here they
// share the cores with the extender, so every thread of this process except the scheduling
// loop's runs at nice --peer_nice (default 19, printed): a stand-in for the CPUs of other
// machines, which CFS approximates by giving those threads little weight against the extender's
// (it cannot take away the cores they use while nothing else wants them). --peer_nice=0 lets
// them compete as equals; --extender=in_process runs the extender inside this process instead
// (testsupport/served_extender.h), as the bench did before, for comparison. The scheduling loop
// stays at this process's priority: it is the client whose latency is measured. A backlog of pods
// has passed filter already; for each level N a pool of N binder threads binds them, one bind
// each at a time (N binds in flight), while the scheduling loop measures filter+prioritize per
// attempt and hands its own pod to the binders. The loop sleeps kube-scheduler's own work per
// pod between attempts (--scheduler_cycle_ms; kube-scheduler runs on other cores), so binds
// arrive at the pace kube-scheduler hands them out. Windows with no binds are measured between
// the levels (0, 16, 0, 64, 0, 256, 0) and each level is compared with the two next to it, so
// that the load of a shared machine drifting during the run does not pass for an effect.
// Besides wall-clock latency, each level prints CPU-time figures that a busy shared machine
// disturbs less: the scheduling loop's CPU per attempt and the extender process's CPU per second
// (in_process: the whole process's, peers included). To tell where the latency goes it also
// splits the attempts that had to dial a connection (Go's transport: binds hold the idle ones)
// from those that reused one, and, in_process, probes the mirror's lock: a thread of this
// process's priority takes the reader lock every millisecond and times the wait (binds reserve
// and watch events apply under the writer lock).
// What it showed (2 shared cores): the mirror's lock was not contended while binds ran at the
// verbs' priority (probe p99 2 us); niced binds queued as writers made readers wait (356 us p99,
// fixed: Mirror::YieldToReadersOnThisThread); with that, the attempts that reused a connection
// stay within the noise at every level, and what remains at p50 is the share of attempts that
// dial (kube-scheduler keeps 2 idle connections; binds hold them), each a few hundred us more.
// Then, on a mirror of --cost_nodes nodes, the scheduling loop's own cost per attempt at 500
// and 5,000 candidates (its CPU time: building the bodies, the exchange, parsing the answers).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "extender/decision_log.h"
#include "extender/extender_service.h"
#include "extender/http_server.h"
#include "extender/live_cluster.h"
#include "extender/metrics.h"
#include "httplib.h"
#include "perf/bench_stats.h"
#include "perf/synthetic_cluster.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/cluster_state.h"
#include "state/mirror.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/served_extender.h"
#include "testsupport/test_pki.h"

ABSL_FLAG(int32_t, nodes, 500, "nodes of the cluster (half A100 MIG, half H100, 8 GPUs each)");
ABSL_FLAG(int32_t, bound_pods, 1000, "pods already bound when the run starts");
ABSL_FLAG(double, level_seconds, 4, "how long each level (and each window without binds) is measured");
ABSL_FLAG(std::vector<std::string>, in_flight, std::vector<std::string>({"16", "64", "256"}),
          "levels of binds in flight (binder threads), measured next to 0");
ABSL_FLAG(int32_t, backlog_pods, 5000,
          "pods that passed filter before the run, for the binders (at most one per free "
          "exclusive unit)");
ABSL_FLAG(double, server_write_latency_ms, 5, "the API server's latency per write (etcd commit)");
ABSL_FLAG(double, server_write_qps, 200,
          "writes per second the API server accepts before answering 429 + Retry-After: 1 (its "
          "flow control); 0 = no limit");
ABSL_FLAG(int32_t, server_write_burst, 200, "burst of the API server's write limit");
// The extender's own --api_qps, --api_burst and --bind_timeout (extender/live_cluster.cc) set
// its client, with the binary's defaults.
ABSL_FLAG(int32_t, threads, 0, "the extender's --threads (0 = its default)");
ABSL_FLAG(int32_t, max_concurrent_binds, 1024, "the extender's --max-concurrent-binds");
ABSL_FLAG(std::string, extender, "process",
          "process: the production binary in a process of its own (--extender_binary); "
          "in_process: the extender inside this process, sharing it with the peers");
ABSL_FLAG(std::string, extender_binary, GSE_EXTENDER_BINARY, "the gpu-slice-extender binary");
ABSL_FLAG(int32_t, bind_nice, 10, "the extender's --bind-nice");
ABSL_FLAG(std::string, extender_cpus, "",
          "process: run the extender on these CPUs only (taskset -c LIST), as a CPU limit would "
          "confine it, so that its binds and its verbs compete for the same CPU; empty: any");
ABSL_FLAG(int32_t, peer_nice, 19,
          "nice steps added to the threads of the API server and kube-scheduler's binders (all "
          "of this process but the scheduling loop): a stand-in for other machines; 0-19");
ABSL_FLAG(int32_t, cost_nodes, 5000,
          "nodes of the mirror for the scheduler-side cost at 500 and 5,000 candidates (0: skip)");
ABSL_FLAG(int32_t, cost_attempts, 200, "attempts per candidate count for the scheduler-side cost");
ABSL_FLAG(double, scheduler_cycle_ms, 3.98,
          "kube-scheduler's own work per pod without the extender (issue 14: 251 pods/s at 500 "
          "nodes with limits lifted): slept between attempts, and the base of the pods/s estimate");

namespace gse::perf {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

pid_t ThisThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// Raises a thread's nice value by `steps` (to at most 19); threads it starts later inherit it.
void NiceThread(pid_t tid, int steps) {
  if (steps <= 0) return;
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  if (now == -1 && errno != 0) return;
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, now + steps));
}

// --peer_nice for every thread of this process but the caller's (the scheduling loop's).
void NiceOtherThreads(int steps) {
  const pid_t self = ThisThreadId();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    int tid = 0;
    if (absl::SimpleAtoi(e.path().filename().string(), &tid) && tid != self) NiceThread(tid, steps);
  }
}

// Go's http.Transport as kube-scheduler's extender client has it (see the top of the file).
class GoLikeTransport {
 public:
  explicit GoLikeTransport(int port, size_t max_idle = 2) : port_(port), max_idle_(max_idle) {}

  httplib::Result Post(const std::string& path, const std::string& body) {
    std::unique_ptr<httplib::Client> c = Take();
    httplib::Result r = c->Post(path, body, "application/json");
    if (r) Give(std::move(c));  // a failed connection is dropped, as Go does
    return r;
  }
  int64_t dials() const { return dials_.load(); }

 private:
  std::unique_ptr<httplib::Client> Take() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());  // most recently idled first
        idle_.pop_back();
        return c;
      }
    }
    ++dials_;
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_tcp_nodelay(true);
    c->set_keep_alive(true);
    c->set_read_timeout(5, 0);  // kube-scheduler's default httpTimeout
    c->set_write_timeout(5, 0);
    return c;
  }
  void Give(std::unique_ptr<httplib::Client> c) {
    absl::MutexLock lock(&mu_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
    // else: closed when `c` goes
  }

  const int port_;
  const size_t max_idle_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> dials_{0};
};

struct PendingPod {
  std::string ns, name, uid, json;
};

// A pending pod of a random project asking for one `resource`; by default 3 notebooks
// (time-sliced 1g.5gb) to 1 whole-GPU pod, as in the burst.
PendingPod MakePod(const std::string& prefix, int i, std::mt19937_64& rng, int projects,
                   std::string resource = "") {
  PendingPod p;
  p.ns = ProjectNamespace(static_cast<int>(rng() % static_cast<uint64_t>(projects)));
  p.name = absl::StrCat(prefix, "-", i);
  p.uid = absl::StrCat("uid-", p.name);
  if (resource.empty()) {
    resource = rng() % 4 < 3 ? "nvidia.com/mig-1g.5gb.shared" : "nvidia.com/gpu";
  }
  p.json = PendingPodJson(p.ns, p.name, p.uid, resource, 1);
  return p;
}

std::string NamesJson(const std::vector<std::string>& names) {
  return absl::StrCat("[\"", absl::StrJoin(names, "\",\""), "\"]");
}

std::string ExtenderArgs(const PendingPod& pod, const std::string& names_json) {
  return absl::StrCat("{\"Pod\":", pod.json, ",\"Nodes\":null,\"NodeNames\":", names_json, "}");
}

// One scheduling attempt as kube-scheduler's scheduling goroutine makes it: filter, prioritize
// when more than one node passed, pick the best. Empty: the pod fits nowhere (or an error).
std::string Attempt(GoLikeTransport& t, const PendingPod& pod, const std::string& names_json) {
  httplib::Result r = t.Post("/filter", ExtenderArgs(pod, names_json));
  if (!r || r->status != 200) return "";
  rapidjson::Document doc;
  doc.ParseInsitu(r->body.data());
  if (!doc.IsObject() || !doc.HasMember("NodeNames") || !doc["NodeNames"].IsArray() ||
      doc["NodeNames"].Empty()) {
    return "";
  }
  std::string best = doc["NodeNames"][0].GetString();
  if (doc["NodeNames"].Size() == 1) return best;
  std::vector<std::string> passed;
  for (const auto& v : doc["NodeNames"].GetArray()) passed.emplace_back(v.GetString());
  httplib::Result p = t.Post("/prioritize", ExtenderArgs(pod, NamesJson(passed)));
  if (!p || p->status != 200) return best;
  rapidjson::Document scores;
  scores.ParseInsitu(p->body.data());
  int64_t top = -1;
  if (scores.IsArray()) {
    for (const auto& s : scores.GetArray()) {
      if (s["Score"].GetInt64() > top) {
        top = s["Score"].GetInt64();
        best = s["Host"].GetString();
      }
    }
  }
  return best;
}

// kube-scheduler's binding goroutines. The scheduling loop's own binds start at once, each on
// a thread of its own (Dispatch), as kube-scheduler starts a goroutine per bind right after the
// scheduling cycle. The load of N binds in flight comes from N binders working through the
// backlog, one bind each at a time (Start). Outcomes are read from the extender's metrics.
class BindPool {
 public:
  struct Job {
    PendingPod pod;
    std::string node;
  };
  void AddBacklog(Job job) {
    absl::MutexLock lock(&mu_);
    backlog_.push_back(std::move(job));
  }
  size_t backlog() {
    absl::MutexLock lock(&mu_);
    return backlog_.size();
  }
  // --peer_nice: the binders stand in for kube-scheduler's goroutines on another machine.
  explicit BindPool(int nice) : nice_(nice) {}
  void Start(int n, GoLikeTransport* t) {
    stop_.store(false);
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, t] {
        NiceThread(ThisThreadId(), nice_);
        Run(t);
      });
    }
  }
  void Dispatch(Job job, GoLikeTransport* t) {
    threads_.emplace_back([job = std::move(job), t, nice = nice_] {
      NiceThread(ThisThreadId(), nice);
      Send(*t, job);
    });
  }
  // Ends the binders and waits for every bind in flight (each within --bind-timeout).
  void Stop() {
    stop_.store(true);
    for (std::thread& th : threads_) th.join();
    threads_.clear();
  }
  // Times a binder found the backlog empty (then fewer binds than asked were in flight).
  int64_t starved() const { return starved_.load(); }

 private:
  void Run(GoLikeTransport* t) {
    while (!stop_.load()) {
      std::optional<Job> job;
      {
        absl::MutexLock lock(&mu_);
        if (!backlog_.empty()) {
          job = std::move(backlog_.front());
          backlog_.pop_front();
        }
      }
      if (!job.has_value()) {
        ++starved_;
        absl::SleepFor(absl::Milliseconds(1));
        continue;
      }
      Send(*t, *job);
    }
  }
  static void Send(GoLikeTransport& t, const Job& job) {
    (void)t.Post("/bind", absl::StrCat("{\"PodName\":\"", job.pod.name, "\",\"PodNamespace\":\"",
                                      job.pod.ns, "\",\"PodUID\":\"", job.pod.uid,
                                      "\",\"Node\":\"", job.node, "\"}"));
  }

  const int nice_;
  absl::Mutex mu_;
  std::deque<Job> backlog_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // the owner's thread only
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> starved_{0};
};

// Applies every item of a List document to the fake API server by kind.
absl::Status ApplyList(testing::FakeApiServer& api, const std::string& list_json) {
  rapidjson::Document doc;
  doc.Parse(list_json.data(), list_json.size());
  if (doc.HasParseError() || !doc.HasMember("items")) return absl::InternalError("bad List");
  const std::map<std::string, std::string> resources = {
      {"Node", "nodes"}, {"Namespace", "namespaces"}, {"ResourceQuota", "resourcequotas"}, {"Pod", "pods"}};
  for (const rapidjson::Value& item : doc["items"].GetArray()) {
    auto it = resources.find(item["kind"].GetString());
    if (it == resources.end()) continue;
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    item.Accept(w);
    if (absl::Status s = api.Apply(it->second, std::string(buf.GetString(), buf.GetSize())); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// gse_bind_total by outcome, summed over offerings, from the extender's /metrics text.
std::map<std::string, double> BindOutcomes(const std::string& metrics) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, "gse_bind_total{")) continue;
    const size_t at = line.find("outcome=\"");
    const size_t end = at == absl::string_view::npos ? at : line.find('"', at + 9);
    const size_t space = line.rfind(' ');
    double v = 0;
    if (end == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &v)) continue;
    out[std::string(line.substr(at + 9, end - at - 9))] += v;
  }
  return out;
}

// The extender under measurement, in a process of its own or in this one (--extender).
class ExtenderUnderTest {
 public:
  virtual ~ExtenderUnderTest() = default;
  virtual int port() const = 0;
  virtual std::string MetricsText() = 0;  // what GET /metrics answers
  virtual int64_t BindsInFlight() = 0;
  virtual size_t Threads() = 0;           // see ThreadsLabel()
  virtual const char* ThreadsLabel() const = 0;
  virtual int64_t WaitedAtMax() = 0;      // connections that found every worker busy; -1: unknown
  virtual double CpuSeconds() = 0;        // see CpuLabel()
  virtual const char* CpuLabel() const = 0;
  virtual Mirror* mirror() { return nullptr; }  // in_process only
};

// The extender's flags as the bench sets them (shared by both kinds).
testing::ServedExtenderOptions ExtenderOptions() {
  testing::ServedExtenderOptions so;
  so.client.write_qps = absl::GetFlag(FLAGS_api_qps);
  so.client.write_burst = absl::GetFlag(FLAGS_api_burst);
  so.binder.deadline = absl::GetFlag(FLAGS_bind_timeout);
  so.binder.attempt_timeout = std::min(so.binder.deadline, absl::Seconds(2));  // as the flags set it
  so.http.threads = absl::GetFlag(FLAGS_threads);
  so.http.max_concurrent_binds = absl::GetFlag(FLAGS_max_concurrent_binds);
  so.http.bind_nice = absl::GetFlag(FLAGS_bind_nice);
  return so;
}

class InProcessExtender : public ExtenderUnderTest {
 public:
  explicit InProcessExtender(std::unique_ptr<testing::ServedExtender> e) : e_(std::move(e)) {}
  int port() const override { return e_->port(); }
  std::string MetricsText() override { return e_->metrics().Serialize(); }
  int64_t BindsInFlight() override { return e_->server().BindsInFlight(); }
  size_t Threads() override { return e_->server().Workers().threads; }
  const char* ThreadsLabel() const override { return "HTTP workers"; }
  int64_t WaitedAtMax() override { return e_->server().Workers().waited_at_max; }
  double CpuSeconds() override {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  }
  const char* CpuLabel() const override { return "process CPU, extender and peers"; }
  Mirror* mirror() override { return &e_->mirror(); }

 private:
  std::unique_ptr<testing::ServedExtender> e_;
};

// A loopback port free now (the extender binds it a moment later).
int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// The production binary against the API server of this process.
class ExtenderProcess : public ExtenderUnderTest {
 public:
  static absl::StatusOr<std::unique_ptr<ExtenderProcess>> Start(const testing::FakeApiServer& api) {
    auto e = std::unique_ptr<ExtenderProcess>(new ExtenderProcess());
    e->port_ = FreeLoopbackPort();
    if (e->port_ <= 0) return absl::InternalError("no free loopback port");
    e->dir_.Write("kubeconfig", api.Kubeconfig());
    const testing::ServedExtenderOptions so = ExtenderOptions();
    e->args_ = {absl::GetFlag(FLAGS_extender_binary),
                absl::StrCat("--listen=127.0.0.1:", e->port_),
                absl::StrCat("--kubeconfig=", e->dir_.File("kubeconfig")),
                absl::StrCat("--api-qps=", so.client.write_qps),
                absl::StrCat("--api-burst=", so.client.write_burst),
                absl::StrCat("--bind-timeout=", absl::FormatDuration(so.binder.deadline)),
                absl::StrCat("--max-concurrent-binds=", so.http.max_concurrent_binds),
                absl::StrCat("--bind-nice=", so.http.bind_nice),
                // As testsupport's ServedExtender: no requeue PATCHes sharing the write limiter
                // with the binds, no decision log lines.
                "--takeover-requeue=false", "--decision-log=off"};
    if (so.http.threads > 0) e->args_.push_back(absl::StrCat("--threads=", so.http.threads));
    if (const std::string cpus = absl::GetFlag(FLAGS_extender_cpus); !cpus.empty()) {
      // taskset execs the extender in its own process: the pid stays the extender's.
      e->args_.insert(e->args_.begin(), {"/usr/bin/taskset", "-c", cpus});
    }
    std::vector<char*> argv;
    for (std::string& a : e->args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    const std::string log = e->dir_.File("extender.log");
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    const int err = posix_spawn(&e->pid_, argv[0], &files, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    if (err != 0) {
      e->pid_ = -1;
      return absl::InternalError(absl::StrCat(argv[0], ": ", std::strerror(err)));
    }
    e->admin_ = std::make_unique<httplib::Client>("127.0.0.1", e->port_);
    e->admin_->set_read_timeout(10, 0);
    const absl::Time deadline = absl::Now() + absl::Minutes(5);
    while (true) {
      int status = 0;
      if (waitpid(e->pid_, &status, WNOHANG) == e->pid_) {
        e->pid_ = -1;
        std::ifstream in(log);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        return absl::InternalError(absl::StrCat("the extender exited: ", text));
      }
      httplib::Result r = e->admin_->Get("/readyz");
      if (r && r->status == 200) break;
      if (absl::Now() > deadline) return absl::DeadlineExceededError("the extender never got ready");
      absl::SleepFor(absl::Milliseconds(50));
    }
    return e;
  }
  ~ExtenderProcess() override {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  std::string CommandLine() const { return absl::StrJoin(args_, " "); }

  int port() const override { return port_; }
  std::string MetricsText() override {
    httplib::Result r = admin_->Get("/metrics");
    return r && r->status == 200 ? r->body : "";
  }
  int64_t BindsInFlight() override {
    const std::string text = MetricsText();
    constexpr absl::string_view kGauge = "gse_http_requests_in_flight{verb=\"bind\"} ";
    const size_t at = text.find(kGauge.data(), 0, kGauge.size());
    double v = 0;
    if (at == std::string::npos) return 0;
    const size_t end = text.find('\n', at);
    (void)absl::SimpleAtod(text.substr(at + kGauge.size(), end - at - kGauge.size()), &v);
    return static_cast<int64_t>(v);
  }
  size_t Threads() override { return static_cast<size_t>(StatField(17)); }  // num_threads
  const char* ThreadsLabel() const override { return "extender threads"; }
  int64_t WaitedAtMax() override { return -1; }
  double CpuSeconds() override {  // utime + stime
    return static_cast<double>(StatField(11) + StatField(12)) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  const char* CpuLabel() const override { return "extender process CPU"; }

 private:
  ExtenderProcess() = default;
  // Field i of /proc/<pid>/stat counted from the one after the command name (i = 0: state).
  int64_t StatField(size_t i) const {
    std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 > stat.size()) return 0;
    std::vector<absl::string_view> fields = absl::StrSplit(absl::string_view(stat).substr(paren + 2), ' ');
    int64_t v = 0;
    return i < fields.size() && absl::SimpleAtoi(fields[i], &v) ? v : 0;
  }

  testing::ScratchDir dir_;  // the kubeconfig and the extender's log
  std::vector<std::string> args_;
  pid_t pid_ = -1;
  int port_ = -1;
  std::unique_ptr<httplib::Client> admin_;  // /readyz, /metrics: not the scheduler's transport
};

struct Level {
  int in_flight = 0;
  Percentiles latency, cpu;  // per attempt, wall and the loop thread's CPU
  double binds_per_s = 0;
  std::map<std::string, double> outcomes;  // gse_bind_total deltas
  size_t workers = 0;
  int64_t waited = 0;  // connections that found every one of the most workers busy
  int64_t dials = 0;
  int64_t api_429 = 0;
  bool backlog_ran_out = false;  // the binders found nothing to bind: fewer were in flight
  double extender_cpu_ms_per_s = 0;  // ExtenderUnderTest::CpuSeconds over the window
  Percentiles dialed, reused;  // latency of the attempts that dialed a connection, and of the rest
  Percentiles lock_wait;       // in_process: the mirror probe's wait for the reader lock
};

class BurstRun {
 public:
  absl::Status Setup();
  Level Measure(int in_flight);
  void Teardown();
  const ExtenderUnderTest& extender() const { return *extender_; }

 private:
  absl::Status StartApiServer(const SyntheticClusterSpec& spec);
  absl::Status StartExtender();
  absl::Status PrepareBacklog(const SyntheticClusterSpec& spec);

  std::mt19937_64 rng_{14};
  testing::FakeApiServer::Options api_options_;
  std::unique_ptr<testing::FakeApiServer> api_;
  std::unique_ptr<ExtenderUnderTest> extender_;
  std::string extender_description_;
  std::unique_ptr<GoLikeTransport> transport_;
  BindPool binds_{absl::GetFlag(FLAGS_peer_nice)};
  std::vector<PendingPod> loop_pods_;
  size_t next_loop_pod_ = 0;
  std::string names_json_;
};

absl::Status BurstRun::Setup() {
  SyntheticClusterSpec spec;
  spec.nodes = absl::GetFlag(FLAGS_nodes);
  spec.bound_pods = absl::GetFlag(FLAGS_bound_pods);
  if (absl::Status s = StartApiServer(spec); !s.ok()) return s;
  if (absl::Status s = StartExtender(); !s.ok()) return s;
  names_json_ = NamesJson(SyntheticNodeNames(spec));
  if (absl::Status s = PrepareBacklog(spec); !s.ok()) return s;
  const testing::FakeApiServer::Options& api = api_options_;
  std::printf("bind_burst_bench: %d nodes, %d bound pods, %zu binds waiting to be sent; API server: "
              "%.1f ms per write, %s\n  extender: %s\n  peers (API server, binders): nice +%d, "
              "in this process (a stand-in for other machines); scheduling loop: nice +0\n",
              spec.nodes, spec.bound_pods, binds_.backlog(), absl::GetFlag(FLAGS_server_write_latency_ms),
              api.write_qps > 0 ? absl::StrCat(api.write_qps, " writes/s (burst ", api.write_burst, ", then 429)").c_str()
                                : "no write limit",
              extender_description_.c_str(), absl::GetFlag(FLAGS_peer_nice));
  return absl::OkStatus();
}

// The API server with the cluster and the scheduling loop's pods, pending.
absl::Status BurstRun::StartApiServer(const SyntheticClusterSpec& spec) {
  api_options_.write_latency = absl::Microseconds(absl::GetFlag(FLAGS_server_write_latency_ms) * 1000);
  api_options_.write_qps = absl::GetFlag(FLAGS_server_write_qps);
  api_options_.write_burst = absl::GetFlag(FLAGS_server_write_burst);
  int most = 0;
  for (const std::string& n : absl::GetFlag(FLAGS_in_flight)) {
    int v = 0;
    if (!absl::SimpleAtoi(n, &v) || v < 0) return absl::InvalidArgumentError("--in_flight: " + n);
    most = std::max(most, v);
  }
  api_options_.threads = most + 64;  // kube-apiserver serves each request on a goroutine of its own
  api_ = std::make_unique<testing::FakeApiServer>(api_options_);
  if (absl::Status s = api_->Start(); !s.ok()) return s;
  if (absl::Status s = ApplyList(*api_, SyntheticClusterJson(spec)); !s.ok()) return s;
  const int windows = 2 * static_cast<int>(absl::GetFlag(FLAGS_in_flight).size()) + 1;
  const int per_window = static_cast<int>(absl::GetFlag(FLAGS_level_seconds) * 1000 /
                                          absl::GetFlag(FLAGS_scheduler_cycle_ms)) + 40;
  for (int i = 0; i < windows * per_window; ++i) {
    loop_pods_.push_back(MakePod("loop", i, rng_, spec.projects));
    if (absl::Status s = api_->Apply("pods", loop_pods_.back().json); !s.ok()) return s;
  }
  // The API server's threads (and those they start) stand in for another machine. Before the
  // extender starts: in_process, its threads are started from this thread, at its priority.
  NiceOtherThreads(absl::GetFlag(FLAGS_peer_nice));
  return absl::OkStatus();
}

absl::Status BurstRun::StartExtender() {
  const std::string kind = absl::GetFlag(FLAGS_extender);
  if (kind == "process") {
    absl::StatusOr<std::unique_ptr<ExtenderProcess>> e = ExtenderProcess::Start(*api_);
    if (!e.ok()) return e.status();
    extender_description_ = absl::StrCat("a process of its own: ", (*e)->CommandLine());
    extender_ = *std::move(e);
  } else if (kind == "in_process") {
    const testing::ServedExtenderOptions so = ExtenderOptions();
    absl::StatusOr<std::unique_ptr<testing::ServedExtender>> e = testing::ServedExtender::Start(*api_, so);
    if (!e.ok()) return e.status();
    if (!(*e)->WaitReady(absl::Minutes(5))) return absl::DeadlineExceededError("the extender never synced");
    extender_description_ = absl::StrCat(
        "in this process (testsupport/served_extender.h, sharing it with the peers): --api-qps=",
        so.client.write_qps, " --api-burst=", so.client.write_burst, " --bind-timeout=",
        absl::FormatDuration(so.binder.deadline), " --threads=", (*e)->server().threads(),
        " --max-concurrent-binds=", so.http.max_concurrent_binds, " --bind-nice=", so.http.bind_nice);
    extender_ = std::make_unique<InProcessExtender>(*std::move(e));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--extender=", kind, ": want process or in_process"));
  }
  transport_ = std::make_unique<GoLikeTransport>(extender_->port());
  return absl::OkStatus();
}

// The binds kube-scheduler has handed out before the run: pods that passed filter, one per free
// exclusive unit (whole GPUs, 3g.20gb slices) so that the backlog's binds do not take each
// other's capacity (they would fail at once, unit_taken, and the binders would spin through
// them instead of waiting on the API server as binds in a burst do).
absl::Status BurstRun::PrepareBacklog(const SyntheticClusterSpec& spec) {
  std::vector<std::pair<std::string, std::string>> slots;  // node, resource
  // The extender's view of the cluster, rebuilt here from what the API server was given.
  Mirror mirror(std::make_shared<const Catalog>(Catalog::BuiltIn()), MirrorOptions());
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(SyntheticClusterJson(spec));
  if (!batch.ok()) return batch.status();
  mirror.Write([&](ClusterState& s) { s.ApplyBatch(*batch); });
  mirror.Read([&](const ClusterState& s) {
    for (const auto& [name, node] : s.nodes()) {
      for (const NodeOffering& no : node->offerings) {
        const Offering& off = s.catalog().Get(no.offering);
        if (off.shared() || !no.unusable_reason.empty()) continue;
        for (const Unit& u : no.units) {
          if (u.Empty() && !u.draining) slots.emplace_back(name, off.resource);
        }
      }
    }
  });
  std::shuffle(slots.begin(), slots.end(), rng_);
  slots.resize(std::min(slots.size(), static_cast<size_t>(absl::GetFlag(FLAGS_backlog_pods))));
  for (size_t i = 0; i < slots.size(); ++i) {
    PendingPod p = MakePod("backlog", static_cast<int>(i), rng_, spec.projects, slots[i].second);
    if (absl::Status s = api_->Apply("pods", p.json); !s.ok()) return s;
    if (Attempt(*transport_, p, NamesJson({slots[i].first})) == slots[i].first) {
      binds_.AddBacklog({std::move(p), slots[i].first});
    }
  }
  return absl::OkStatus();
}

Level BurstRun::Measure(int in_flight) {
  Level level;
  level.in_flight = in_flight;
  const std::map<std::string, double> before = BindOutcomes(extender_->MetricsText());
  const int64_t dials_before = transport_->dials();
  const int64_t throttled_before = api_->throttled();
  const int64_t starved_before = binds_.starved();
  const int64_t waited_before = extender_->WaitedAtMax();
  binds_.Start(in_flight, transport_.get());
  // Until the binders have their binds out (they start at once; the first ones are quick).
  for (int i = 0; i < 200 && extender_->BindsInFlight() < in_flight * 9 / 10; ++i) absl::SleepFor(absl::Milliseconds(5));
  const auto t0 = Clock::now();
  const double extender_cpu0 = extender_->CpuSeconds();
  std::vector<double> latency, cpu, dialed, reused, lock_wait;
  std::atomic<bool> probing{true};
  std::thread probe;
  if (Mirror* m = extender_->mirror(); m != nullptr) {
    probe = std::thread([&] {
      while (probing.load()) {
        const auto p0 = Clock::now();
        m->Read([](const ClusterState&) { return 0; });
        lock_wait.push_back(Since(p0));
        absl::SleepFor(absl::Milliseconds(1));
      }
    });
  }
  const double window_us = absl::GetFlag(FLAGS_level_seconds) * 1e6;
  const absl::Duration own_work = absl::Microseconds(absl::GetFlag(FLAGS_scheduler_cycle_ms) * 1000);
  for (int i = 0; (i < 20 || Since(t0) < window_us) && next_loop_pod_ < loop_pods_.size(); ++i) {
    const PendingPod& pod = loop_pods_[next_loop_pod_++];
    const int64_t dials0 = transport_->dials();
    const double cpu0 = ThreadCpuMicros();
    const auto start = Clock::now();
    const std::string node = Attempt(*transport_, pod, names_json_);
    if (i >= 5) {  // the first few warm the connections
      latency.push_back(Since(start));
      cpu.push_back(ThreadCpuMicros() - cpu0);
      (transport_->dials() > dials0 ? dialed : reused).push_back(latency.back());
    }
    if (!node.empty()) binds_.Dispatch({pod, node}, transport_.get());  // a binding goroutine
    level.workers = std::max(level.workers, extender_->Threads());
    absl::SleepFor(own_work);  // kube-scheduler's own plugins for the next pod
  }
  const double seconds = Since(t0) / 1e6;
  level.extender_cpu_ms_per_s = (extender_->CpuSeconds() - extender_cpu0) * 1e3 / std::max(seconds, 1e-9);
  probing.store(false);
  if (probe.joinable()) probe.join();
  binds_.Stop();
  const std::map<std::string, double> after = BindOutcomes(extender_->MetricsText());
  for (const auto& [outcome, n] : after) {
    const double d = n - (before.count(outcome) ? before.at(outcome) : 0);
    if (d > 0) level.outcomes[outcome] = d;
  }
  level.binds_per_s = (level.outcomes.count("bound") ? level.outcomes.at("bound") : 0) / std::max(seconds, 1e-9);
  level.latency = Summarise(latency);
  level.cpu = Summarise(cpu);
  level.dialed = Summarise(dialed);
  level.reused = Summarise(reused);
  level.lock_wait = Summarise(lock_wait);
  level.dials = transport_->dials() - dials_before;
  level.api_429 = api_->throttled() - throttled_before;
  level.backlog_ran_out = binds_.starved() > starved_before;
  level.waited = waited_before < 0 ? -1 : extender_->WaitedAtMax() - waited_before;
  return level;
}

void BurstRun::Teardown() {
  extender_.reset();
  api_->Stop();
}

// The mean of two windows' percentiles.
Percentiles MeanOf(const Percentiles& a, const Percentiles& b) {
  Percentiles m;
  m.p50_us = (a.p50_us + b.p50_us) / 2;
  m.p99_us = (a.p99_us + b.p99_us) / 2;
  return m;
}

double Ratio(double x, double base) { return base > 0 ? x / base : 0.0; }

// `a`, `b`: the windows without binds next to this level (compared with their mean).
void PrintLevel(const Level& l, const Level& a, const Level& b, const ExtenderUnderTest& e) {
  const Percentiles base = MeanOf(a.latency, b.latency);
  const Percentiles base_reused = MeanOf(a.reused, b.reused);
  const Percentiles base_cpu = MeanOf(a.cpu, b.cpu);
  std::string outcomes;
  for (const auto& [k, v] : l.outcomes) absl::StrAppend(&outcomes, outcomes.empty() ? "" : ", ", k, " ", v);
  const std::string waited =
      l.waited < 0 ? "" : absl::StrCat(", ", l.waited, " connections that waited for one");
  std::printf("%4d binds in flight (+ the loop's own): filter+prioritize per attempt p50 %7.0f us p99 %7.0f us (n=%zu, "
              "client CPU p50 %.0f us) | ratio to 0 next to it: p50 %.2fx p99 %.2fx (target <= 1.2) | %s "
              "%.0f ms/s | %.0f binds/s bound, %lld API 429s, %zu %s at most%s, %lld connections dialed | "
              "binds: %s%s\n",
              l.in_flight, l.latency.p50_us, l.latency.p99_us, l.latency.n, l.cpu.p50_us,
              Ratio(l.latency.p50_us, base.p50_us), Ratio(l.latency.p99_us, base.p99_us), e.CpuLabel(),
              l.extender_cpu_ms_per_s, l.binds_per_s, static_cast<long long>(l.api_429), l.workers,
              e.ThreadsLabel(), waited.c_str(), static_cast<long long>(l.dials),
              outcomes.empty() ? "none" : outcomes.c_str(),
              l.backlog_ran_out ? " (the backlog ran out: fewer binds were in flight)" : "");
  std::printf("%-20s attempts that dialed: n=%zu p50 %.0f us p99 %.0f us; reused a connection: n=%zu p50 %.0f us "
              "p99 %.0f us, ratio p50 %.2fx p99 %.2fx; client CPU ratio p50 %.2fx",
              "", l.dialed.n, l.dialed.p50_us, l.dialed.p99_us, l.reused.n, l.reused.p50_us, l.reused.p99_us,
              Ratio(l.reused.p50_us, base_reused.p50_us), Ratio(l.reused.p99_us, base_reused.p99_us),
              Ratio(l.cpu.p50_us, base_cpu.p50_us));
  if (l.lock_wait.n > 0) {
    std::printf("; mirror reader-lock wait (probe) p50 %.1f us p99 %.1f us", l.lock_wait.p50_us,
                l.lock_wait.p99_us);
  }
  std::printf("\n");
}

// The scheduling loop's own cost per attempt (its thread's CPU time: the bodies, the exchange,
// the answers), on a mirror of --cost_nodes nodes, at 500 and 5,000 candidates.
void SchedulerSideCost() {
  SyntheticClusterSpec spec;
  spec.nodes = absl::GetFlag(FLAGS_cost_nodes);
  spec.bound_pods = spec.nodes * 30;
  Mirror mirror(std::make_shared<const Catalog>(Catalog::BuiltIn()), MirrorOptions());
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(SyntheticClusterJson(spec));
  if (!batch.ok()) {
    std::printf("scheduler-side cost: synthetic cluster does not decode: %s\n", batch.status().ToString().c_str());
    return;
  }
  mirror.Write([&](ClusterState& s) { s.ApplyBatch(*batch); });
  RecordOnlyBinder binder;
  DecisionLog quiet(DecisionLogLevel::kOff, [](absl::string_view) {});
  ServiceOptions so;
  so.decision_log = &quiet;
  ExtenderService service(&mirror, std::move(*MakePolicy("affinity-pack")), &binder, so);
  HttpServerOptions http;
  http.port = 0;
  auto server = HttpServer::Create(&service, nullptr, http);
  if (!server.ok()) return;
  (*server)->Start();
  GoLikeTransport transport((*server)->port());
  const std::vector<std::string> names = SyntheticNodeNames(spec);
  std::mt19937_64 rng(5000);
  for (size_t candidates : {size_t{500}, size_t{5000}}) {
    if (candidates > names.size()) continue;
    const std::string names_json = NamesJson({names.begin(), names.begin() + static_cast<long>(candidates)});
    std::vector<double> cpu, latency;
    for (int i = 0; i < absl::GetFlag(FLAGS_cost_attempts) + 10; ++i) {
      const PendingPod pod = MakePod(absl::StrCat("cost-", candidates), i, rng, spec.projects);
      const double cpu0 = ThreadCpuMicros();
      const auto start = Clock::now();
      (void)Attempt(transport, pod, names_json);
      if (i >= 10) {
        cpu.push_back(ThreadCpuMicros() - cpu0);
        latency.push_back(Since(start));
      }
    }
    const Percentiles c = Summarise(cpu), l = Summarise(latency);
    std::printf("scheduler side, %5zu candidates: CPU per attempt p50 %6.0f us mean %6.0f us (building "
                "and parsing the bodies, here in C++ with RapidJSON) | attempt latency p50 %6.0f us p99 "
                "%6.0f us\n",
                candidates, c.p50_us, c.mean_us, l.p50_us, l.p99_us);
  }
  (*server)->Stop();
  (*server)->Wait(absl::Seconds(10));
}

int Main() {
  TuneMallocForLargeBodies();
  for (const auto& [flag, v] : {std::pair<const char*, int>{"--peer_nice", absl::GetFlag(FLAGS_peer_nice)},
                                {"--bind_nice", absl::GetFlag(FLAGS_bind_nice)}}) {
    if (v < 0 || v > 19) {
      std::fprintf(stderr, "bind_burst_bench: %s=%d: want 0-19\n", flag, v);
      return 2;
    }
  }
  if (const std::string e = absl::GetFlag(FLAGS_extender); e != "process" && e != "in_process") {
    std::fprintf(stderr, "bind_burst_bench: --extender=%s: want process or in_process\n", e.c_str());
    return 2;
  }
  BurstRun run;
  if (absl::Status s = run.Setup(); !s.ok()) {
    std::fprintf(stderr, "bind_burst_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  // 0, N1, 0, N2, 0, ...: every level between two windows without binds.
  std::vector<Level> quiet = {run.Measure(0)};
  std::vector<Level> levels;
  PrintLevel(quiet.back(), quiet.back(), quiet.back(), run.extender());
  for (const std::string& n : absl::GetFlag(FLAGS_in_flight)) {
    int v = 0;
    (void)absl::SimpleAtoi(n, &v);
    levels.push_back(run.Measure(v));
    quiet.push_back(run.Measure(0));
    PrintLevel(levels.back(), quiet[quiet.size() - 2], quiet.back(), run.extender());
    PrintLevel(quiet.back(), quiet.front(), quiet.front(), run.extender());
  }
  // One line per level, for comparing runs.
  for (size_t i = 0; i < levels.size(); ++i) {
    const Level& l = levels[i];
    const Percentiles base = MeanOf(quiet[i].latency, quiet[i + 1].latency);
    const Percentiles reused = MeanOf(quiet[i].reused, quiet[i + 1].reused);
    const Percentiles cpu = MeanOf(quiet[i].cpu, quiet[i + 1].cpu);
    std::printf("summary %4d in flight: ratio p50 %.2fx p99 %.2fx | reused connections p50 %.2fx p99 %.2fx | "
                "client CPU p50 %.2fx | dialed %.0f%% of attempts | %s %.0f vs %.0f ms/s without binds\n",
                l.in_flight, Ratio(l.latency.p50_us, base.p50_us), Ratio(l.latency.p99_us, base.p99_us),
                Ratio(l.reused.p50_us, reused.p50_us), Ratio(l.reused.p99_us, reused.p99_us),
                Ratio(l.cpu.p50_us, cpu.p50_us),
                l.latency.n > 0 ? 100.0 * static_cast<double>(l.dialed.n) / static_cast<double>(l.latency.n) : 0.0,
                run.extender().CpuLabel(), l.extender_cpu_ms_per_s,
                (quiet[i].extender_cpu_ms_per_s + quiet[i + 1].extender_cpu_ms_per_s) / 2);
  }
  double lo = quiet.front().latency.p50_us, hi = lo;
  for (const Level& q : quiet) {
    lo = std::min(lo, q.latency.p50_us);
    hi = std::max(hi, q.latency.p50_us);
  }
  std::printf("%-20s windows at 0: p50 from %.0f to %.0f us (%.2fx: the noise of this machine)\n", "",
              lo, hi, lo > 0 ? hi / lo : 0.0);
  double spurious = 0;
  for (const Level& l : levels) {
    for (const char* k : {"client_throttled", "overloaded"}) spurious += l.outcomes.count(k) ? l.outcomes.at(k) : 0;
  }
  std::printf("binds refused for the extender's own pacing or capacity (client_throttled, overloaded): "
              "%.0f (target 0)\n", spurious);
  if (!levels.empty()) {
    // The real scheduler's pods/s with the extender, estimated: its own cycle plus this
    // attempt's latency (the Go side's JSON work is larger than this C++ client's).
    const double t0 = absl::GetFlag(FLAGS_scheduler_cycle_ms) * 1000;
    const double t = levels.back().latency.p50_us;
    std::printf("estimate for kube-scheduler: pods/s with the extender / without ~ %.0f / (%.0f + %.0f) us = "
                "%.2f at %d binds in flight (goal >= 0.9; a proxy: no kube-scheduler here)\n",
                t0, t0, t, t0 / (t0 + t), levels.back().in_flight);
  }
  run.Teardown();
  if (absl::GetFlag(FLAGS_cost_nodes) > 0) SchedulerSideCost();
  return 0;
}

}  // namespace
}  // namespace gse::perf

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Filter/prioritize latency with binds in flight, against the local API server.");
  absl::ParseCommandLine(argc, argv);
  return gse::perf::Main();
}
