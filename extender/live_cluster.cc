// LiveCluster and its flags: see live_cluster.h.
#include "extender/live_cluster.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

// absl's flag storage reads through a seqlock whose std::atomic_thread_fence GCC rejects in
// ThreadSanitizer builds (-Wtsan: TSan does not model fences); flags are read at start-up only.
// (Clang has no -Wtsan and would refuse the unknown group.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
#include "absl/flags/flag.h"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "rapidjson/document.h"
#include "scoring/pod_request.h"
#include "state/dra_objects.h"
#include "state/json_reader.h"

ABSL_FLAG(std::string, kubeconfig, "",
          "kubeconfig file: run against that cluster's API server (list/watch nodes, pods, "
          "namespaces, resourcequotas; bind through the API)");
ABSL_FLAG(std::string, kube_context, "",
          "context of --kubeconfig to use; empty = its current-context");
ABSL_FLAG(std::string, in_cluster, "auto",
          "use the pod's service account (KUBERNETES_SERVICE_HOST/PORT, token, CA): true, "
          "false, or auto = when KUBERNETES_SERVICE_HOST is set and --kubeconfig is not");
// The defaults hold the pace at which kube-scheduler hands out binds, not its own client's
// clientConnection qps/burst (50/100 in 1.26): kube-scheduler's binding goroutines wait for
// that limiter without a deadline, while a bind here must be answered within kube-scheduler's
// 5 s extender httpTimeout. kube-scheduler's one-pod-at-a-time scheduling cycle hands out at
// most a few hundred binds per second (~250/s measured at 500 nodes, issue 14), so binds get
// a turn at once; a bind whose turn would come after --bind-timeout is answered "not sent"
// at once (docs/metrics.md, deploy/README.md). The API server's own flow control (429 with
// Retry-After, honoured) protects it beyond that.
ABSL_FLAG(double, api_qps, 500,
          "API server writes (binds; lease updates have their own limiter) per second, "
          "sustained; kube-scheduler's own default is clientConnection.qps=50, which paces its "
          "binds by waiting without a deadline, while a bind here must be answered within "
          "kube-scheduler's 5s httpTimeout (see deploy/README.md)");
ABSL_FLAG(int32_t, api_burst, 1000,
          "API server writes allowed in a burst above --api-qps (kube-scheduler: "
          "clientConnection.burst=100)");
ABSL_FLAG(absl::Duration, api_timeout, absl::Seconds(10),
          "timeout of each API server call (connect, read, write)");
ABSL_FLAG(absl::Duration, bind_timeout, absl::Seconds(4),
          "time one bind may take against the API server, retries included; keep it below "
          "kube-scheduler's extender httpTimeout (default 5s)");
ABSL_FLAG(absl::Duration, resync_period, absl::Minutes(10),
          "full relist that compares the mirror with the API server and repairs drift (each "
          "repair is logged); 0 disables it");
ABSL_FLAG(absl::Duration, watch_timeout, absl::Minutes(5),
          "server-side duration of one watch request (timeoutSeconds; jittered up to 2x)");
ABSL_FLAG(bool, leader_elect, false,
          "elect a leader among replicas with a coordination.k8s.io/v1 Lease; only the leader "
          "is ready and decides, followers keep their mirror warm");
ABSL_FLAG(absl::Duration, leader_elect_lease_duration, absl::Seconds(15),
          "how long followers wait after the last renewal before taking over");
ABSL_FLAG(absl::Duration, leader_elect_renew_deadline, absl::Seconds(10),
          "how long the leader keeps trying to renew before it stops leading");
ABSL_FLAG(absl::Duration, leader_elect_retry_period, absl::Seconds(2),
          "interval between attempts to acquire or renew the lease");
ABSL_FLAG(std::string, leader_elect_resource_name, "gpu-slice-extender", "name of the Lease");
ABSL_FLAG(std::string, leader_elect_resource_namespace, "gpu-slice-extender",
          "namespace of the Lease");
ABSL_FLAG(bool, takeover_requeue, true,
          "each time this replica becomes ready to decide (start-up, take-over), touch the "
          "pending pods that request catalog resources (annotation gpu.themelio.io/requeue) so "
          "that kube-scheduler retries the ones it parked meanwhile at once, not after its "
          "5-minute flush; needs patch on pods (deploy/RBAC.md)");
ABSL_FLAG(double, takeover_requeue_qps, 20,
          "pod patches per second of the take-over requeue, at most; they share --api-qps with "
          "binds and the Lease, and never take more than half of it");
ABSL_FLAG(absl::Duration, takeover_requeue_settle, absl::Seconds(10),
          "the requeue's second pass runs this long after the first, for pods that a replica "
          "refused while kube-scheduler's Service endpoints still pointed at it");

ABSL_FLAG(std::string, agent_lease_namespace, "gpu-slice-agent",
          "namespace of the node agents' heartbeat Leases (gse-agent-<node>, "
          "docs/agent.md); empty: not watched, and no node is refused for a dead agent");
ABSL_FLAG(absl::Duration, agent_heartbeat_timeout, absl::Seconds(60),
          "a node that carries an agent inventory whose agent has not renewed its heartbeat "
          "Lease for this long (on the extender's clock) is refused at filter and bind "
          "(agent_stale, gse_nodes_agent_stale); keep it at least 2x the agents' "
          "--heartbeat-interval");

ABSL_FLAG(std::string, dra_mode, "off",
          "DRA mode (docs/dra.md): on = also list and watch resource.k8s.io/v1 DeviceClasses, "
          "ResourceSlices and ResourceClaims, and take a node's units of an offering that a "
          "DeviceClass maps (allocatable 0 or absent) from its DRA devices; auto = on when the "
          "API server serves resource.k8s.io/v1 (discovery at start-up), else off; off = as "
          "before DRA mode");

namespace gse {

const char* const kLiveClusterFlags[] = {"kubeconfig",
                                         "kube_context",
                                         "in_cluster",
                                         "api_qps",
                                         "api_burst",
                                         "api_timeout",
                                         "bind_timeout",
                                         "resync_period",
                                         "watch_timeout",
                                         "leader_elect",
                                         "leader_elect_lease_duration",
                                         "leader_elect_renew_deadline",
                                         "leader_elect_retry_period",
                                         "leader_elect_resource_name",
                                         "leader_elect_resource_namespace",
                                         "takeover_requeue",
                                         "takeover_requeue_qps",
                                         "takeover_requeue_settle",
                                         "agent_lease_namespace",
                                         "agent_heartbeat_timeout",
                                         "dra_mode"};
const int kLiveClusterFlagCount =
    static_cast<int>(sizeof(kLiveClusterFlags) / sizeof(kLiveClusterFlags[0]));

bool LiveClusterRequested() {
  if (!absl::GetFlag(FLAGS_kubeconfig).empty()) return true;
  const std::string in_cluster = absl::GetFlag(FLAGS_in_cluster);
  if (in_cluster == "true") return true;
  return in_cluster == "auto" && InClusterEnvironment();
}

absl::StatusOr<LiveClusterOptions> ParseLiveClusterFlags() {
  LiveClusterOptions o;
  o.kubeconfig = absl::GetFlag(FLAGS_kubeconfig);
  o.context = absl::GetFlag(FLAGS_kube_context);
  const std::string in_cluster = absl::GetFlag(FLAGS_in_cluster);
  if (in_cluster != "auto" && in_cluster != "true" && in_cluster != "false") {
    return absl::InvalidArgumentError(
        absl::StrCat("--in-cluster=\"", in_cluster, "\": want auto, true or false"));
  }
  if (in_cluster == "true" && !o.kubeconfig.empty()) {
    return absl::InvalidArgumentError("--in-cluster=true and --kubeconfig exclude each other");
  }
  o.in_cluster = o.kubeconfig.empty() && (in_cluster == "true" ||
                                          (in_cluster == "auto" && InClusterEnvironment()));
  if (!o.context.empty() && o.kubeconfig.empty()) {
    return absl::InvalidArgumentError("--kube-context needs --kubeconfig");
  }
  const double qps = absl::GetFlag(FLAGS_api_qps);
  if (!(qps > 0) || qps > 100000) {
    return absl::InvalidArgumentError(absl::StrCat("--api-qps=", qps, ": want more than 0, at most 100000"));
  }
  const int32_t burst = absl::GetFlag(FLAGS_api_burst);
  if (burst < 1 || burst > 100000) {
    return absl::InvalidArgumentError(absl::StrCat("--api-burst=", burst, ": want 1-100000"));
  }
  o.client.write_qps = qps;
  o.client.write_burst = burst;
  const std::pair<const char*, absl::Duration> positive[] = {
      {"--api-timeout", absl::GetFlag(FLAGS_api_timeout)},
      {"--bind-timeout", absl::GetFlag(FLAGS_bind_timeout)},
      {"--watch-timeout", absl::GetFlag(FLAGS_watch_timeout)}};
  for (const auto& [flag, d] : positive) {
    if (d <= absl::ZeroDuration() || d > absl::Hours(1)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, "=", absl::FormatDuration(d),
                                                     ": want more than 0s and at most 1h"));
    }
  }
  o.client.request_timeout = absl::GetFlag(FLAGS_api_timeout);
  o.client.connect_timeout = std::min(absl::Seconds(5), o.client.request_timeout);
  o.binder.deadline = absl::GetFlag(FLAGS_bind_timeout);
  o.binder.attempt_timeout = std::min(o.binder.deadline, absl::Seconds(2));
  const absl::Duration resync = absl::GetFlag(FLAGS_resync_period);
  if (resync < absl::ZeroDuration() || (resync > absl::ZeroDuration() && resync < absl::Seconds(1))) {
    return absl::InvalidArgumentError(absl::StrCat("--resync-period=", absl::FormatDuration(resync),
                                                   ": want 0 (off) or at least 1s"));
  }
  o.reflector.resync_period = resync;
  o.reflector.watch_timeout = absl::GetFlag(FLAGS_watch_timeout);
  o.leader_elect = absl::GetFlag(FLAGS_leader_elect);
  o.election.lease_duration = absl::GetFlag(FLAGS_leader_elect_lease_duration);
  o.election.renew_deadline = absl::GetFlag(FLAGS_leader_elect_renew_deadline);
  o.election.retry_period = absl::GetFlag(FLAGS_leader_elect_retry_period);
  o.election.lease_name = absl::GetFlag(FLAGS_leader_elect_resource_name);
  o.election.lease_namespace = absl::GetFlag(FLAGS_leader_elect_resource_namespace);
  if (o.leader_elect) {
    if (absl::Status s = ValidateLeaderElectionOptions(o.election); !s.ok()) return s;
  }
  o.requeue = absl::GetFlag(FLAGS_takeover_requeue);
  const double requeue_qps = absl::GetFlag(FLAGS_takeover_requeue_qps);
  if (!(requeue_qps > 0) || requeue_qps > 100000) {
    return absl::InvalidArgumentError(absl::StrCat("--takeover-requeue-qps=", requeue_qps,
                                                   ": want more than 0, at most 100000"));
  }
  // The patches share the client's write budget with binds and the Lease: they may take at
  // most half of it, whatever the flag says.
  o.requeue_options.qps = std::min(requeue_qps, qps / 2);
  const absl::Duration settle = absl::GetFlag(FLAGS_takeover_requeue_settle);
  if (settle < absl::ZeroDuration() || settle > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat("--takeover-requeue-settle=",
                                                   absl::FormatDuration(settle),
                                                   ": want 0s (one pass only) to 1h"));
  }
  o.requeue_options.settle = settle;
  o.requeue_options.passes = settle > absl::ZeroDuration() ? 2 : 1;
  o.agent_lease_namespace = absl::GetFlag(FLAGS_agent_lease_namespace);
  if (!o.agent_lease_namespace.empty()) {
    const std::string& ns = o.agent_lease_namespace;
    bool ok = ns.size() <= 63 && absl::ascii_isalnum(ns.front()) && absl::ascii_isalnum(ns.back());
    for (char c : ns) ok = ok && (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-');
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--agent-lease-namespace=\"", ns,
          "\": not a namespace name (1-63 lower-case letters, digits or '-', alphanumeric at "
          "both ends), or empty to watch no agent Leases"));
    }
  }
  o.agent_heartbeat_timeout = absl::GetFlag(FLAGS_agent_heartbeat_timeout);
  if (o.agent_heartbeat_timeout < absl::Seconds(1) || o.agent_heartbeat_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--agent-heartbeat-timeout=", absl::FormatDuration(o.agent_heartbeat_timeout),
                     ": want 1s to 1h"));
  }
  const std::string dra_mode = absl::GetFlag(FLAGS_dra_mode);
  if (dra_mode == "off") {
    o.dra_mode = DraMode::kOff;
  } else if (dra_mode == "on") {
    o.dra_mode = DraMode::kOn;
  } else if (dra_mode == "auto") {
    o.dra_mode = DraMode::kAuto;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dra-mode=\"", dra_mode, "\": want off, on or auto"));
  }
  return o;
}

absl::StatusOr<LiveClusterOptions> LiveClusterOptionsFromFlags() {
  absl::StatusOr<LiveClusterOptions> o = ParseLiveClusterFlags();
  if (o.ok() && o->kubeconfig.empty() && !o->in_cluster) {
    return absl::InvalidArgumentError(
        "no Kubernetes API configured: give --kubeconfig, or run in a pod (--in-cluster)");
  }
  return o;
}

absl::StatusOr<bool> ResolveDraMode(DraMode mode, KubeClient& client) {
  if (mode != DraMode::kAuto) return mode == DraMode::kOn;
  // Discovery of the group version: 404 means the API server does not serve it (before 1.34,
  // or resource.k8s.io/v1 disabled). Anything else is not an answer: fail rather than guess
  // a mode that changes what every node offers.
  absl::StatusOr<std::string> got = client.Get(std::string(kDraDiscoveryPath));
  if (got.ok()) return true;
  if (got.status().code() == absl::StatusCode::kNotFound) return false;
  return absl::UnavailableError(absl::StrCat("--dra-mode=auto: discovery GET ", kDraDiscoveryPath,
                                             " failed: ", got.status().message()));
}

LiveCluster::LiveCluster(LiveClusterOptions options, Mirror* mirror,
                         std::unique_ptr<KubeClient> client,
                         std::unique_ptr<KubeClient> election_client)
    : options_(std::move(options)),
      mirror_(mirror),
      client_(std::move(client)),
      election_client_(std::move(election_client)) {
  if (options_.leader_elect) {
    // Fencing (issue 12): no binding POST goes out unless this replica's Lease is still
    // valid on its own clock. The elector exists from Start(); before that no bind is ready
    // to run, and a POST asked for then is not sent.
    options_.binder.lease_valid = [this] {
      const LeaderElector* elector = fence_.load(std::memory_order_acquire);
      return elector != nullptr && elector->LeaseValid();
    };
  }
  binder_ = std::make_unique<ApiBinder>(client_.get(), options_.binder);
  if (!options_.agent_lease_namespace.empty()) {
    agent_leases_ = std::make_unique<AgentLeaseTable>(options_.agent_heartbeat_timeout);
    AgentLeaseWatcherOptions wo;
    wo.lease_namespace = options_.agent_lease_namespace;
    wo.watch_timeout = options_.reflector.watch_timeout;
    wo.log = options_.reflector.log;
    agent_lease_watcher_ =
        std::make_unique<AgentLeaseWatcher>(client_.get(), agent_leases_.get(), std::move(wo));
  }
  if (options_.drain_timeout <= absl::ZeroDuration()) {
    options_.drain_timeout = options_.binder.deadline + absl::Seconds(1);
  }
}

absl::StatusOr<std::unique_ptr<LiveCluster>> LiveCluster::Connect(LiveClusterOptions options,
                                                                  Mirror* mirror) {
  absl::StatusOr<KubeConfig> config =
      options.kubeconfig.empty() ? LoadInClusterConfig(options.in_cluster_paths)
                                 : LoadKubeconfig(options.kubeconfig, options.context);
  if (!config.ok()) return config.status();
  // Each client paces its own writes; the metrics hear which one waited.
  auto paced = [&options](const char* op) {
    KubeClientOptions o = options.client;
    if (options.on_api_write) {
      auto report = options.on_api_write;
      o.on_write_paced = [report, op](bool sent, absl::Duration waited) {
        report(op, sent, waited);
      };
    }
    return o;
  };
  absl::StatusOr<std::unique_ptr<KubeClient>> client =
      KubeClient::Create(*config, paced("bind"));
  if (!client.ok()) return client.status();
  std::unique_ptr<KubeClient> election_client;
  if (options.leader_elect) {
    absl::StatusOr<std::unique_ptr<KubeClient>> c = KubeClient::Create(*config, paced("lease"));
    if (!c.ok()) return c.status();
    election_client = *std::move(c);
  }
  if (absl::Status s = (*client)->CheckReachable(options.connect_attempts, options.connect_backoff);
      !s.ok()) {
    return s;
  }
  if (options.leader_elect) {
    if (absl::Status s = ValidateLeaderElectionOptions(options.election); !s.ok()) return s;
  }
  absl::StatusOr<bool> dra = ResolveDraMode(options.dra_mode, **client);
  if (!dra.ok()) return dra.status();
  options.reflector.dra = *dra;
  // Before the reflector's first list: the mirror then derives DRA-backed offerings.
  if (*dra) mirror->Write([](ClusterState& s) { s.EnableDra(); });
  return std::unique_ptr<LiveCluster>(new LiveCluster(
      std::move(options), mirror, *std::move(client), std::move(election_client)));
}

LiveCluster::~LiveCluster() { Stop(); }

std::function<absl::StatusOr<std::string>(absl::string_view, absl::string_view)>
LiveCluster::DraClaimNameReader() {
  if (!dra()) return nullptr;
  KubeClient* client = client_.get();
  return [client](absl::string_view ns,
                  absl::string_view pod) -> absl::StatusOr<std::string> {
    // Short: it runs inside a bind, whose own deadline kube-scheduler enforces.
    absl::StatusOr<std::string> body = client->GetWithTimeout(
        absl::StrCat("/api/v1/namespaces/", ns, "/pods/", pod), absl::Seconds(1));
    if (!body.ok()) return body.status();
    rapidjson::Document doc;
    if (absl::Status s = ParseJsonLimited(*body, doc); !s.ok()) return s;
    absl::StatusOr<std::optional<DraExtendedResourceClaimStatus>> status =
        DecodeExtendedResourceClaimStatus(doc, "Pod");
    if (!status.ok()) return status.status();
    return status->has_value() ? (*status)->resource_claim_name : std::string();
  };
}

std::function<absl::StatusOr<DraResourceClaim>(absl::string_view, absl::string_view)>
LiveCluster::DraClaimReader() {
  if (!dra()) return nullptr;
  KubeClient* client = client_.get();
  return [client](absl::string_view ns,
                  absl::string_view name) -> absl::StatusOr<DraResourceClaim> {
    // Short, as the pod's GET: both run inside one bind.
    absl::StatusOr<std::string> body = client->GetWithTimeout(
        absl::StrCat("/apis/resource.k8s.io/v1/namespaces/", ns, "/resourceclaims/", name),
        absl::Seconds(1));
    if (!body.ok()) return body.status();
    rapidjson::Document doc;
    if (absl::Status s = ParseJsonLimited(*body, doc); !s.ok()) return s;
    return DecodeResourceClaim(doc, "ResourceClaim");
  };
}

void LiveCluster::Start(ExtenderService* service) {
  {
    absl::MutexLock lock(&mu_);
    service_ = service;
    leader_ = !options_.leader_elect;
  }
  // Never a decision on a half-built mirror.
  service->SetReady(false);
  ReflectorOptions ro = options_.reflector;
  ro.on_synced = [this] {
    {
      absl::MutexLock lock(&mu_);
      synced_ = true;
    }
    Update();
  };
  ro.on_listed = [this](int64_t list) {
    bool takeover_done = false;
    absl::Duration took;
    {
      absl::MutexLock lock(&mu_);
      last_list_ = std::max(last_list_, list);
      takeover_done = leader_ && takeover_list_ > 0 && list >= takeover_list_ &&
                      acquired_at_ != absl::InfinitePast();
      if (takeover_done) {
        took = absl::Now() - acquired_at_;
        acquired_at_ = absl::InfinitePast();
      }
    }
    if (takeover_done) {
      std::fprintf(stderr,
                   "{\"component\":\"live_cluster\",\"event\":\"takeover_relisted\",\"list\":%lld,"
                   "\"seconds\":%.3f}\n",
                   static_cast<long long>(list), absl::ToDoubleSeconds(took));
    }
    Update();
  };
  reflector_ = std::make_unique<KubeReflector>(client_.get(), mirror_, std::move(ro));
  if (options_.leader_elect) {
    LeaderElectionOptions eo = options_.election;
    eo.on_change = [this](bool leading) {
      // Gaining the Lease: decide only after a list sent from now on is applied (the mirror
      // may lag behind the previous leader's binds). Asked before the state changes, so that
      // the list's on_listed cannot come before takeover_list_ is known.
      const int64_t list = leading ? reflector_->RequestResync() : 0;
      {
        absl::MutexLock lock(&mu_);
        leader_ = leading;
        takeover_list_ = list;
        acquired_at_ = leading ? absl::Now() : absl::InfinitePast();
      }
      Update();
    };
    eo.on_holder = [this](const std::string& holder) {
      {
        absl::MutexLock lock(&mu_);
        holder_ = holder;
      }
      Update();
    };
    elector_ = std::make_unique<LeaderElector>(election_client_.get(), std::move(eo));
    fence_.store(elector_.get(), std::memory_order_release);
    term_prefix_ = elector_->identity();
  } else {
    term_prefix_ = DefaultIdentity();
  }
  if (options_.requeue) {
    PodRequeueOptions qo = options_.requeue_options;
    Mirror* mirror = mirror_;
    // The pods worth a retry: they ask for a catalog resource the extender can place (a pod
    // that is unresolvable everywhere stays parked whatever we do).
    qo.wants = [mirror](const PodObject& pod) {
      return mirror->Read([&](const ClusterState& state) {
        const PodRequest r = ResolvePodRequest(state.catalog(), pod,
                                               state.ProjectOfNamespace(pod.namespace_name));
        return r.interested() && r.unresolvable.empty();
      });
    };
    requeuer_ = std::make_unique<PodRequeuer>(client_.get(), std::move(qo));
    requeuer_->Start();
  }
  Update();
  reflector_->Start();
  if (agent_lease_watcher_) agent_lease_watcher_->Start();
  // A follower keeps its mirror warm: the reflector runs whether or not this replica leads.
  if (elector_) elector_->Start();
}

std::string LiveCluster::LeaseName() const {
  return absl::StrCat(options_.election.lease_namespace, "/", options_.election.lease_name);
}

void LiveCluster::Update() {
  absl::MutexLock lock(&mu_);
  Readiness readiness = Readiness::Ready();
  if (stopped_) {
    readiness = Readiness::Stopping();
  } else if (!synced_) {
    readiness = Readiness::NotSynced();  // says nothing about leading: it could not decide anyway
  } else if (!leader_) {
    readiness = Readiness::NotLeader(holder_, LeaseName());
  } else if (last_list_ < takeover_list_) {
    readiness = Readiness::TakingOver();
  }
  const bool ready = readiness.ready();
  if (service_ != nullptr) service_->SetReadiness(std::move(readiness));
  if (options_.on_state) options_.on_state(synced_, leader_);
  if (ready != ready_) {
    ready_ = ready;
    if (requeuer_ != nullptr) {
      if (ready) {
        // A new term: its passes carry a value no earlier pass used.
        requeuer_->Trigger(absl::StrCat(term_prefix_, "/", ++terms_));
      } else {
        requeuer_->Cancel();
      }
    }
  }
}

void LiveCluster::Stop() {
  ExtenderService* service = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    service = service_;
  }
  Update();  // not ready ("shutting down"): no new decision from here on
  // A bind of ours that is still running may yet commit. Were the lease released now, the
  // next leader could decide before its watch shows that pod bound and hand its unit out
  // again. So: every bind answers first (each is bounded by --bind-timeout), then the lease.
  if (service != nullptr && !service->WaitForBindsToFinish(options_.drain_timeout)) {
    std::fprintf(stderr,
                 "{\"component\":\"live_cluster\",\"event\":\"drain_timeout\",\"detail\":"
                 "\"%lld bind(s) still running after %s; releasing the lease anyway\"}\n",
                 static_cast<long long>(service->BindsInFlight()),
                 absl::FormatDuration(options_.drain_timeout).c_str());
  }
  if (requeuer_) requeuer_->Stop();
  if (elector_) elector_->Stop();
  if (reflector_) reflector_->Stop();
  if (agent_lease_watcher_) agent_lease_watcher_->Stop();
}

int LiveCluster::SweepAgentLiveness(absl::Time now) {
  if (!agent_leases_) return 0;
  if (!agent_leases_->current()) {
    return mirror_->Read([](const ClusterState& s) { return s.AgentStaleNodes(); });
  }
  return mirror_->SweepAgentLiveness(
      [this](absl::string_view node) { return agent_leases_->LastRenewal(node); }, now,
      options_.agent_heartbeat_timeout);
}

AgentLeaseCounters LiveCluster::agent_lease_counters() const {
  return agent_lease_watcher_ ? agent_lease_watcher_->counters() : AgentLeaseCounters{};
}

bool LiveCluster::synced() const {
  absl::MutexLock lock(&mu_);
  return synced_;
}

bool LiveCluster::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

ReflectorCounters LiveCluster::reflector_counters() const {
  return reflector_ ? reflector_->counters() : ReflectorCounters{};
}

LeadershipStats LiveCluster::leadership() const {
  return elector_ ? elector_->stats() : LeadershipStats{};
}

std::string LiveCluster::lease_holder() const {
  return elector_ ? elector_->holder() : std::string();
}

PodRequeueCounters LiveCluster::requeue_counters() const {
  return requeuer_ ? requeuer_->counters() : PodRequeueCounters{};
}

LiveCluster::ApiCallErrors LiveCluster::api_call_errors() const {
  ApiCallErrors e;
  if (binder_) {
    e.bind = binder_->bind_errors();
    e.get = binder_->get_errors();
  }
  if (elector_) e.lease = elector_->lease_errors();
  return e;
}

}  // namespace gse
