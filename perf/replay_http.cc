// HttpPlacer: the extender protocol over HTTP, facts through a local API server (replay_http.h).
#include "perf/replay_http.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "kube/api_binder.h"
#include "extender/decision_log.h"
#include "extender/extender_service.h"
#include "extender/http_server.h"
#include "httplib.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "scoring/feasibility.h"
#include "state/assignment.h"
#include "kube/kube_client.h"
#include "kube/kube_reflector.h"
#include "testsupport/fake_apiserver.h"

namespace gse::replay {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

std::string Serialize(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  v.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

// kube-scheduler's message -> our reason label (FitReasonText is what the extender sends).
const std::map<std::string, std::string>& ReasonLabels() {
  static const auto* m = [] {
    auto* out = new std::map<std::string, std::string>;
    for (int r = 0; r < kFitReasonCount; ++r) {
      const FitReason reason = static_cast<FitReason>(r);
      (*out)[std::string(FitReasonText(reason))] = std::string(FitReasonLabel(reason));
    }
    return out;
  }();
  return *m;
}

std::string ResourceOfKind(absl::string_view kind) {
  if (kind == "Node") return "nodes";
  if (kind == "Namespace") return "namespaces";
  if (kind == "ResourceQuota") return "resourcequotas";
  if (kind == "Pod") return "pods";
  return "";
}

// Calls `fn(resource, json, node_name)` for each item of a List document whose kind the API
// server serves (`node_name`: the item's metadata.name for nodes, else empty). `what` names
// the document in the error.
absl::Status ForEachListItem(
    const std::string& list_json, absl::string_view what,
    const std::function<absl::Status(const std::string& resource, const std::string& json,
                                     const std::string& node_name)>& fn) {
  rapidjson::Document doc;
  doc.Parse(list_json.c_str(), list_json.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": invalid JSON"));
  }
  auto items = doc.FindMember("items");
  if (items == doc.MemberEnd() || !items->value.IsArray()) return absl::OkStatus();
  for (const rapidjson::Value& item : items->value.GetArray()) {
    if (!item.IsObject()) continue;
    auto kind = item.FindMember("kind");
    const std::string resource =
        kind != item.MemberEnd() && kind->value.IsString() ? ResourceOfKind(kind->value.GetString()) : "";
    if (resource.empty()) continue;
    std::string node_name;
    auto meta = item.FindMember("metadata");
    if (resource == "nodes" && meta != item.MemberEnd() && meta->value.IsObject()) {
      auto name = meta->value.FindMember("name");
      if (name != meta->value.MemberEnd() && name->value.IsString()) node_name = name->value.GetString();
    }
    if (absl::Status s = fn(resource, Serialize(item), node_name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

struct HttpPlacer::Impl {
  HttpPlacerOptions options;
  std::unique_ptr<PlacementPolicy> policy;

  // The local API server and, without --extender, the extender in this process.
  std::unique_ptr<testing::FakeApiServer> api;
  std::unique_ptr<Mirror> mirror;
  std::unique_ptr<KubeClient> client;
  std::unique_ptr<KubeReflector> reflector;
  std::unique_ptr<ApiBinder> binder;
  // The replay reports decisions itself; the extender's per-bind log line would be noise.
  DecisionLog quiet_log{DecisionLogLevel::kOff, [](absl::string_view) {}};
  std::unique_ptr<ExtenderService> service;
  std::unique_ptr<HttpServer> server;
  std::string base_url;  // scheme://host:port/prefix
  std::string host;
  int port = 0;
  std::string prefix;

  absl::Mutex mu;
  std::map<std::string, std::string> node_json ABSL_GUARDED_BY(mu);  // for nodeCacheCapable: false
  int64_t writes ABSL_GUARDED_BY(mu) = 0;     // watch events our writes cause
  int64_t baseline = 0;                       // reflector events before our first write
  std::set<std::string> records ABSL_GUARDED_BY(mu);  // pods the extender records (external sync)

  // Keep-alive connections to the extender. cpp-httplib 0.11 does not notice that the server
  // closed an idle connection and fails the next request on it ("Write"), so a connection idle
  // longer than kMaxIdle is dropped rather than reused: well inside the extender's
  // --keep-alive-timeout (5 s) and cpp-httplib servers' default (5 s). A slow replay step (a
  // sanitizer build, a loaded machine) otherwise turned into a spurious transport failure.
  static constexpr absl::Duration kMaxIdle = absl::Seconds(2);
  struct Idle {
    std::unique_ptr<httplib::Client> client;
    absl::Time since;
  };
  absl::Mutex pool_mu;
  std::vector<Idle> pool ABSL_GUARDED_BY(pool_mu);

  std::unique_ptr<httplib::Client> Acquire() {
    {
      absl::MutexLock lock(&pool_mu);
      const absl::Time now = absl::Now();
      while (!pool.empty()) {
        Idle idle = std::move(pool.back());
        pool.pop_back();
        if (now - idle.since < kMaxIdle) return std::move(idle.client);
      }
    }
    auto c = std::make_unique<httplib::Client>(host, port);
    c->set_tcp_nodelay(true);
    c->set_keep_alive(true);
    c->set_read_timeout(30, 0);
    c->set_write_timeout(30, 0);
    return c;
  }
  void Release(std::unique_ptr<httplib::Client> c) {
    absl::MutexLock lock(&pool_mu);
    pool.push_back(Idle{std::move(c), absl::Now()});
  }

  absl::StatusOr<std::string> Post(const std::string& verb, const std::string& body) {
    std::unique_ptr<httplib::Client> c = Acquire();
    httplib::Result r = c->Post(prefix + "/" + verb, body, "application/json");
    if (!r) {
      return absl::UnavailableError(absl::StrCat("extender ", verb, ": ", httplib::to_string(r.error())));
    }
    const int status = r->status;
    std::string out = r->body;
    Release(std::move(c));
    if (status != 200) {
      return absl::InternalError(absl::StrCat("extender ", verb, ": HTTP ", status, ": ", out.substr(0, 300)));
    }
    return out;
  }

  // POSTs the extender's bind of `plan`'s pod on `node`; FailedPrecondition with the
  // extender's Error when it refused.
  absl::Status PostBind(const PodPlan& plan, const std::string& node) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    w.Key("PodName");
    w.String(plan.pod.name.c_str());
    w.Key("PodNamespace");
    w.String(plan.pod.namespace_name.c_str());
    w.Key("PodUID");
    w.String(plan.pod.uid.c_str());
    w.Key("Node");
    w.String(node.c_str());
    w.EndObject();
    absl::StatusOr<std::string> body = Post("bind", std::string(buf.GetString(), buf.GetSize()));
    if (!body.ok()) return body.status();
    rapidjson::Document doc;
    doc.Parse(body->c_str(), body->size());
    if (doc.HasParseError() || !doc.IsObject()) return absl::InternalError("bind: answer is not a JSON object");
    auto err = doc.FindMember("Error");
    if (err != doc.MemberEnd() && err->value.IsString() && err->value.GetStringLength() > 0) {
      return absl::FailedPreconditionError(err->value.GetString());
    }
    return absl::OkStatus();
  }

  void Wrote(int64_t n = 1) {
    absl::MutexLock lock(&mu);
    writes += n;
  }

  absl::Status ApplyObject(const std::string& resource, const std::string& json) {
    if (absl::Status s = api->Apply(resource, json); !s.ok()) return s;
    Wrote();
    return absl::OkStatus();
  }

  // Pod JSON without kind/apiVersion is fine for the extender; the same object is sent.
  std::string ExtenderArgs(const PodPlan& plan, const std::vector<std::string>& nodes) {
    std::string body = absl::StrCat("{\"Pod\":", plan.pod_json);
    if (options.node_cache_capable) {
      rapidjson::StringBuffer buf;
      Writer w(buf);
      w.StartArray();
      for (const std::string& n : nodes) w.String(n.data(), static_cast<rapidjson::SizeType>(n.size()));
      w.EndArray();
      absl::StrAppend(&body, ",\"Nodes\":null,\"NodeNames\":", absl::string_view(buf.GetString(), buf.GetSize()));
    } else {
      absl::StrAppend(&body, ",\"NodeNames\":null,\"Nodes\":{\"metadata\":{},\"items\":[");
      absl::MutexLock lock(&mu);
      for (size_t i = 0; i < nodes.size(); ++i) {
        auto it = node_json.find(nodes[i]);
        absl::StrAppend(&body, i > 0 ? "," : "", it == node_json.end() ? "{}" : it->second);
      }
      absl::StrAppend(&body, "]}");
    }
    absl::StrAppend(&body, "}");
    return body;
  }
};

HttpPlacer::HttpPlacer(HttpPlacerOptions options, std::unique_ptr<PlacementPolicy> policy)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->policy = std::move(policy);
}

HttpPlacer::~HttpPlacer() { (void)Stop(); }

std::string HttpPlacer::Describe() const {
  return impl_->options.extender_url.empty() ? "http (in-process extender)"
                                             : absl::StrCat("http ", impl_->options.extender_url);
}

absl::Status HttpPlacer::Start(const std::string& list_json, const ObjectBatch& batch) {
  Impl& m = *impl_;
  testing::FakeApiServer::Options ao;
  ao.event_log_limit = 10000000;  // a replay never wants a 410 from compaction
  ao.default_watch_timeout = absl::Hours(24);
  m.api = std::make_unique<testing::FakeApiServer>(ao);
  if (absl::Status s = m.api->Start(); !s.ok()) return s;
  // The initial cluster goes in before the extender lists it (one list, not a watch storm).
  absl::Status applied = ForEachListItem(
      list_json, "initial objects",
      [&](const std::string& resource, const std::string& json, const std::string& node_name) {
        if (absl::Status s = m.api->Apply(resource, json); !s.ok()) return s;
        if (!node_name.empty()) {
          absl::MutexLock lock(&m.mu);
          m.node_json[node_name] = json;
        }
        return absl::OkStatus();
      });
  if (!applied.ok()) return applied;
  (void)batch;
  if (!m.options.kubeconfig_out.empty()) {
    std::ofstream out(m.options.kubeconfig_out);
    out << m.api->Kubeconfig();
    if (!out) return absl::PermissionDeniedError(absl::StrCat("--kubeconfig-out=", m.options.kubeconfig_out, ": cannot write"));
  }

  if (m.options.extender_url.empty()) {
    KubeConfig kc;
    kc.server = m.api->url();
    kc.token = "test-token";
    kc.source = "replay";
    KubeClientOptions co;
    co.write_qps = 0;  // binds are writes; the replay must not be throttled
    absl::StatusOr<std::unique_ptr<KubeClient>> client = KubeClient::Create(kc, co);
    if (!client.ok()) return client.status();
    m.client = *std::move(client);
    m.mirror = std::make_unique<Mirror>(m.options.catalog, MirrorOptions{});
    ReflectorOptions ro;
    ro.resync_period = absl::ZeroDuration();
    ro.watch_timeout = absl::Hours(1);
    ro.log = [](const std::string&) {};
    m.reflector = std::make_unique<KubeReflector>(m.client.get(), m.mirror.get(), ro);
    m.reflector->Start();
    if (!m.reflector->WaitForSync(absl::Seconds(60))) return absl::DeadlineExceededError("extender mirror did not sync from the API server");
    m.binder = std::make_unique<ApiBinder>(m.client.get());
    ServiceOptions service_options;
    service_options.decision_log = &m.quiet_log;
    service_options.score_pods_without_offering = m.options.score_all_pods;
    m.service = std::make_unique<ExtenderService>(m.mirror.get(), std::move(m.policy), m.binder.get(),
                                                  service_options);
    HttpServerOptions so;
    so.port = 0;
    so.threads = 8;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Create(m.service.get(), nullptr, so);
    if (!server.ok()) return server.status();
    m.server = *std::move(server);
    m.server->Start();
    m.host = "127.0.0.1";
    m.port = m.server->port();
    m.prefix = m.server->prefix();
    m.baseline = m.reflector->counters().events_applied;
  } else {
    // scheme://host:port[/prefix]
    absl::string_view url_view = m.options.extender_url;
    if (!absl::ConsumePrefix(&url_view, "http://")) {
      return absl::InvalidArgumentError(absl::StrCat("--extender=", m.options.extender_url, ": only http:// URLs"));
    }
    const std::string url(url_view);
    const size_t slash = url.find('/');
    const std::string hostport = url.substr(0, slash);
    m.prefix = slash == std::string::npos ? "" : url.substr(slash);
    while (!m.prefix.empty() && m.prefix.back() == '/') m.prefix.pop_back();
    const size_t colon = hostport.rfind(':');
    if (colon == std::string::npos || !absl::SimpleAtoi(hostport.substr(colon + 1), &m.port)) {
      return absl::InvalidArgumentError(absl::StrCat("--extender=", m.options.extender_url, ": want http://HOST:PORT[/prefix]"));
    }
    m.host = hostport.substr(0, colon);
    // Wait until the extender answers ready (it lists our API server first).
    const absl::Time deadline = absl::Now() + m.options.extender_ready_timeout;
    while (true) {
      httplib::Client c(m.host, m.port);
      httplib::Result r = c.Get("/readyz");
      if (r && r->status == 200) break;
      if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat("--extender=", m.options.extender_url, ": not ready"));
      absl::SleepFor(absl::Milliseconds(200));
    }
  }
  return absl::OkStatus();
}

absl::Status HttpPlacer::Stop() {
  Impl& m = *impl_;
  {
    // Our idle keep-alive connections first: the server's workers serve a connection until
    // its client closes it or the keep-alive timeout (5 s) passes, and Wait waits for them.
    absl::MutexLock lock(&m.pool_mu);
    m.pool.clear();
  }
  if (m.server) {
    m.server->Stop();
    m.server->Wait(absl::Seconds(10));
    m.server.reset();
  }
  if (m.reflector) {
    m.reflector->Stop();
    m.reflector.reset();
  }
  // Likewise the API client's idle connections (the local API server keeps an idle connection
  // for 1 s): nothing calls the service once its server is gone.
  m.service.reset();
  m.binder.reset();
  m.client.reset();
  if (m.api) {
    m.api->Stop();
    m.api.reset();
  }
  return absl::OkStatus();
}

absl::Status HttpPlacer::PodCreated(const PodPlan& plan) {
  return impl_->ApplyObject("pods", plan.pod_json);
}

absl::StatusOr<FilterAnswer> HttpPlacer::Filter(const PodPlan& plan, const std::vector<std::string>& candidates) {
  absl::StatusOr<std::string> body = impl_->Post("filter", impl_->ExtenderArgs(plan, candidates));
  if (!body.ok()) return body.status();
  rapidjson::Document doc;
  doc.Parse(body->c_str(), body->size());
  if (doc.HasParseError() || !doc.IsObject()) return absl::InternalError("filter: answer is not a JSON object");
  auto err = doc.FindMember("Error");
  if (err != doc.MemberEnd() && err->value.IsString() && err->value.GetStringLength() > 0) {
    return absl::InternalError(absl::StrCat("filter: ", err->value.GetString()));
  }
  FilterAnswer a;
  auto names = doc.FindMember("NodeNames");
  if (names != doc.MemberEnd() && names->value.IsArray()) {
    for (const rapidjson::Value& n : names->value.GetArray()) {
      if (n.IsString()) a.passed.emplace_back(n.GetString(), n.GetStringLength());
    }
  }
  auto nodes = doc.FindMember("Nodes");
  if (nodes != doc.MemberEnd() && nodes->value.IsObject() && nodes->value.HasMember("items") &&
      nodes->value["items"].IsArray()) {
    for (const rapidjson::Value& n : nodes->value["items"].GetArray()) {
      if (n.IsObject() && n.HasMember("metadata") && n["metadata"].IsObject() && n["metadata"].HasMember("name")) {
        a.passed.emplace_back(n["metadata"]["name"].GetString());
      }
    }
  }
  for (const char* key : {"FailedNodes", "FailedAndUnresolvableNodes"}) {
    auto f = doc.FindMember(key);
    if (f == doc.MemberEnd() || !f->value.IsObject()) continue;
    for (auto m = f->value.MemberBegin(); m != f->value.MemberEnd(); ++m) {
      const std::string message = m->value.IsString() ? m->value.GetString() : "";
      auto label = ReasonLabels().find(message);
      a.failed[m->name.GetString()] = label != ReasonLabels().end() ? label->second : "pod_unresolvable";
    }
  }
  return a;
}

absl::StatusOr<std::vector<int64_t>> HttpPlacer::Prioritize(const PodPlan& plan, const std::vector<std::string>& nodes) {
  absl::StatusOr<std::string> body = impl_->Post("prioritize", impl_->ExtenderArgs(plan, nodes));
  if (!body.ok()) return body.status();
  rapidjson::Document doc;
  doc.Parse(body->c_str(), body->size());
  if (doc.HasParseError() || !doc.IsArray()) return absl::InternalError("prioritize: answer is not a HostPriorityList");
  std::map<std::string, int64_t> by_host;
  for (const rapidjson::Value& e : doc.GetArray()) {
    if (!e.IsObject() || !e.HasMember("Host") || !e["Host"].IsString() || !e.HasMember("Score") || !e["Score"].IsInt64()) {
      return absl::InternalError("prioritize: malformed HostPriority");
    }
    by_host[e["Host"].GetString()] = e["Score"].GetInt64();
  }
  std::vector<int64_t> scores;
  for (const std::string& n : nodes) {
    auto it = by_host.find(n);
    scores.push_back(it == by_host.end() ? 0 : it->second);
  }
  return scores;
}

bool HttpPlacer::ScoresEveryPod() const { return impl_->options.score_all_pods; }

absl::Status HttpPlacer::BindWithoutUnits(const PodPlan& plan, const std::string& node) {
  if (absl::Status s = impl_->PostBind(plan, node); !s.ok()) return s;
  impl_->Wrote();  // the Binding modified the pod
  return absl::OkStatus();
}

absl::StatusOr<Assignment> HttpPlacer::Bind(const PodPlan& plan, const std::string& node) {
  if (absl::Status s = impl_->PostBind(plan, node); !s.ok()) return s;
  impl_->Wrote();  // the Binding modified the pod
  // Which units: the annotations the API server stored with the binding.
  std::optional<std::string> stored = impl_->api->Get("pods", plan.pod.namespace_name, plan.pod.name);
  if (!stored.has_value()) return absl::InternalError(absl::StrCat("bind: pod ", plan.pod.Key(), " vanished"));
  rapidjson::Document pod;
  if (absl::Status s = ParseJsonLimited(*stored, pod); !s.ok()) return s;
  absl::StatusOr<PodObject> obj = DecodePod(pod, "pod");
  if (!obj.ok()) return obj.status();
  if (obj->node_name != node) {
    return absl::InternalError(absl::StrCat("bind: pod ", plan.pod.Key(), " is bound to \"", obj->node_name, "\", not ", node));
  }
  absl::StatusOr<Assignment> a = ParseAssignmentAnnotations(obj->annotations, obj->node_name, *impl_->options.catalog);
  if (!a.ok()) return absl::InternalError(absl::StrCat("bind: ", a.status().message()));
  absl::MutexLock lock(&impl_->mu);
  impl_->records.insert(plan.pod.Key());
  return a;
}

absl::Status HttpPlacer::BindPlain(const PodPlan& plan, const std::string& node) {
  absl::Status s = impl_->api->Mutate("pods", plan.pod.namespace_name, plan.pod.name, [&](rapidjson::Document& d) {
    rapidjson::Value& spec = d["spec"];
    spec.RemoveMember("nodeName");
    spec.AddMember("nodeName", rapidjson::Value(node.c_str(), d.GetAllocator()), d.GetAllocator());
  });
  if (!s.ok()) return s;
  impl_->Wrote();
  return absl::OkStatus();
}

absl::Status HttpPlacer::ApplyObjects(const std::string& list_json, const ObjectBatch& batch) {
  (void)batch;
  return ForEachListItem(
      list_json, "objects",
      [&](const std::string& resource, const std::string& json, const std::string& node_name) {
        if (absl::Status s = impl_->ApplyObject(resource, json); !s.ok()) return s;
        if (!node_name.empty()) {
          absl::MutexLock lock(&impl_->mu);
          impl_->node_json[node_name] = json;
        }
        return absl::OkStatus();
      });
}

absl::Status HttpPlacer::ApplyNode(const std::string& node_json, const NodeObject& node) {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->node_json[node.name] = node_json;
  }
  return impl_->ApplyObject("nodes", node_json);
}

absl::Status HttpPlacer::RemoveNode(const std::string& name) {
  if (impl_->api->Delete("nodes", "", name)) impl_->Wrote();
  absl::MutexLock lock(&impl_->mu);
  impl_->node_json.erase(name);
  return absl::OkStatus();
}

absl::Status HttpPlacer::DeletePod(const std::string& ns, const std::string& name) {
  if (impl_->api->Delete("pods", ns, name)) impl_->Wrote();
  absl::MutexLock lock(&impl_->mu);
  impl_->records.erase(absl::StrCat(ns, "/", name));
  return absl::OkStatus();
}

absl::Status HttpPlacer::ApplyBoundPod(const PodObject& pod, const std::string& pod_json) {
  if (absl::Status s = impl_->ApplyObject("pods", pod_json); !s.ok()) return s;
  absl::MutexLock lock(&impl_->mu);
  impl_->records.insert(pod.Key());
  return absl::OkStatus();
}

absl::Status HttpPlacer::Sync() {
  Impl& m = *impl_;
  const absl::Time deadline = absl::Now() + m.options.sync_timeout;
  if (m.reflector) {
    int64_t want;
    {
      absl::MutexLock lock(&m.mu);
      want = m.baseline + m.writes;
    }
    while (true) {
      const ReflectorCounters c = m.reflector->counters();
      if (c.events_applied + c.decode_errors >= want) return absl::OkStatus();
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("the extender's watch applied ", c.events_applied, " of ", want, " events"));
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }
  // External extender: its /debug/state must count the pod records we expect.
  size_t want;
  {
    absl::MutexLock lock(&m.mu);
    want = m.records.size();
  }
  while (true) {
    std::unique_ptr<httplib::Client> c = m.Acquire();
    httplib::Result r = c->Get("/debug/state");
    if (r && r->status == 200) {
      rapidjson::Document doc;
      doc.Parse(r->body.c_str(), r->body.size());
      m.Release(std::move(c));
      if (!doc.HasParseError() && doc.IsObject() && doc.HasMember("pods") && doc["pods"].IsUint64() &&
          doc["pods"].GetUint64() == want) {
        return absl::OkStatus();
      }
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("the extender's /debug/state did not catch up");
    absl::SleepFor(absl::Milliseconds(2));
  }
}

std::optional<AuditReport> HttpPlacer::MirrorAudit() {
  if (impl_->mirror) return impl_->mirror->Read([](const ClusterState& s) { return s.Audit(); });
  std::unique_ptr<httplib::Client> c = impl_->Acquire();
  httplib::Result r = c->Get("/debug/state");
  if (!r || r->status != 200) return std::nullopt;
  rapidjson::Document doc;
  doc.Parse(r->body.c_str(), r->body.size());
  impl_->Release(std::move(c));
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("audit") || !doc["audit"].IsObject()) return std::nullopt;
  const rapidjson::Value& a = doc["audit"];
  AuditReport report;
  if (a.HasMember("oversubscribed_units") && a["oversubscribed_units"].IsInt64()) report.oversubscribed_units = a["oversubscribed_units"].GetInt64();
  if (a.HasMember("multi_owner_units") && a["multi_owner_units"].IsInt64()) report.multi_owner_units = a["multi_owner_units"].GetInt64();
  if (a.HasMember("over_quota_projects") && a["over_quota_projects"].IsInt64()) report.over_quota_projects = a["over_quota_projects"].GetInt64();
  return report;
}

}  // namespace gse::replay
