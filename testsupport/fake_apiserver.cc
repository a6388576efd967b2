// FakeApiServer: see fake_apiserver.h. Error bodies copy the recorded kube-apiserver 1.26
// answers in shared/protocol/kube-api-1.26/ word for word, with names substituted.
#include "testsupport/fake_apiserver.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <stdlib.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include <httplib.h>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "testsupport/json_edit.h"
#include "testsupport/paths.h"

namespace gse::testing {
namespace {

// ---------------------------------------------------------------- JSON helpers

using Doc = rapidjson::Document;

using json::Member;
using json::Obj;
using json::Quote;
using json::Serialize;
using json::SetStr;
using json::Str;

struct KindInfo {
  const char* kind;
  const char* api_version;
  bool namespaced;
};

const KindInfo* InfoOf(absl::string_view resource) {
  static const std::map<std::string, KindInfo> kInfo = {
      {"nodes", {"Node", "v1", false}},
      {"pods", {"Pod", "v1", true}},
      {"namespaces", {"Namespace", "v1", false}},
      {"resourcequotas", {"ResourceQuota", "v1", true}},
      {"leases", {"Lease", "coordination.k8s.io/v1", true}},
      // DRA (resource.k8s.io/v1, shared/protocol/dra/): served under /apis/resource.k8s.io/v1.
      {"deviceclasses", {"DeviceClass", "resource.k8s.io/v1", false}},
      {"resourceslices", {"ResourceSlice", "resource.k8s.io/v1", false}},
      {"resourceclaims", {"ResourceClaim", "resource.k8s.io/v1", true}}};
  auto it = kInfo.find(std::string(resource));
  return it == kInfo.end() ? nullptr : &it->second;
}

// Resources of the core group, served under /api/v1 (the others under /apis/<group>/<v>).
bool CoreResource(absl::string_view resource) {
  const KindInfo* info = InfoOf(resource);
  return info != nullptr && absl::string_view(info->api_version) == "v1";
}

// Resources of resource.k8s.io/v1.
bool DraResource(absl::string_view resource) {
  const KindInfo* info = InfoOf(resource);
  return info != nullptr && absl::string_view(info->api_version) == "resource.k8s.io/v1";
}

std::string StatusBody(int code, absl::string_view reason, absl::string_view message,
                       absl::string_view name = "", absl::string_view kind = "",
                       absl::string_view group = "") {
  std::string details;
  if (!name.empty() || !kind.empty()) {
    details = absl::StrCat(",\"details\":{\"name\":", Quote(name),
                           group.empty() ? "" : absl::StrCat(",\"group\":", Quote(group)),
                           ",\"kind\":", Quote(kind), "}");
  }
  return absl::StrCat("{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
                      "\"message\":", Quote(message), ",\"reason\":", Quote(reason), details,
                      ",\"code\":", code, "}");
}

constexpr absl::string_view kExpiredWatchLine =
    R"({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"The resourceVersion for the provided watch is too old.","reason":"Expired","code":410}})";

std::string BookmarkLine(absl::string_view resource, int64_t rv) {
  const KindInfo* info = InfoOf(resource);
  std::string extra = std::string(resource) == "pods" ? R"(,"spec":{"containers":null},"status":{})"
                                                      : R"(,"spec":{},"status":{})";
  return absl::StrCat(R"({"type":"BOOKMARK","object":{"kind":")", info->kind,
                      R"(","apiVersion":")", info->api_version,
                      R"(","metadata":{"resourceVersion":")", rv,
                      R"(","creationTimestamp":null})", extra, "}}");
}

// The reason kube-apiserver gives with an injected status code.
absl::string_view ReasonOf(int code) {
  switch (code) {
    case 409: return "Conflict";
    case 410: return "Expired";
    case 429: return "TooManyRequests";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return code >= 500 ? "InternalError" : "BadRequest";
  }
}

std::string InjectedStatusBody(int code) {
  return StatusBody(code, ReasonOf(code), absl::StrCat("fake apiserver: injected failure ", code));
}

bool IsWatch(const httplib::Request& req) {
  const std::string w = req.get_param_value("watch");
  return w == "1" || w == "true";
}

// Per request, set by the pre-routing handler of the thread that serves it.
thread_local absl::Duration t_delay_after;
thread_local bool t_truncate_body = false;
thread_local int t_status_after_commit = 0;
// A status fault answered in place of handling: by the handler, i.e. after httplib read the
// request's body. Answering from the pre-routing handler (before the body is read) and closing
// made the kernel reset the connection over the unread body, and a slow client (sanitizer
// builds) then saw a transport error instead of the status.
thread_local int t_status_instead = 0;
thread_local bool t_in_flight = false;  // counted in in_flight_ and not yet finished

// RFC 7386 JSON merge patch of `patch` into `target`: objects merge member by member, null
// removes a member, anything else replaces.
void MergePatch(Doc& doc, rapidjson::Value& target, const rapidjson::Value& patch) {
  if (!target.IsObject()) target.SetObject();
  for (const auto& m : patch.GetObject()) {
    const std::string key = m.name.GetString();
    if (m.value.IsNull()) {
      target.RemoveMember(key.c_str());
      continue;
    }
    if (!target.HasMember(key.c_str())) {
      target.AddMember(rapidjson::Value(key.c_str(), doc.GetAllocator()), rapidjson::Value(),
                       doc.GetAllocator());
    }
    rapidjson::Value& slot = target[key.c_str()];
    if (m.value.IsObject()) {
      MergePatch(doc, slot, m.value);
    } else {
      slot.CopyFrom(m.value, doc.GetAllocator());
    }
  }
}

// One term of a field selector: `field` = / == / != `value`.
struct FieldTerm {
  std::string field;
  std::string value;
  bool equal = true;
};

// Pod field selectors as kube-apiserver 1.26 supports the ones we use: spec.nodeName,
// status.phase, metadata.name, metadata.namespace; comma = AND. Other fields: the API server's
// 400 "field label not supported".
absl::StatusOr<std::vector<FieldTerm>> ParseFieldSelector(absl::string_view text) {
  std::vector<FieldTerm> terms;
  if (text.empty()) return terms;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    FieldTerm t;
    size_t op = part.find("!=");
    size_t len = 2;
    if (op != absl::string_view::npos) {
      t.equal = false;
    } else if ((op = part.find("==")) == absl::string_view::npos) {
      op = part.find('=');
      len = 1;
    }
    if (op == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("invalid selector: '", text, "'"));
    }
    t.field = std::string(part.substr(0, op));
    t.value = std::string(part.substr(op + len));
    if (t.field != "spec.nodeName" && t.field != "status.phase" && t.field != "metadata.name" &&
        t.field != "metadata.namespace") {
      return absl::InvalidArgumentError(absl::StrCat("field label not supported: ", t.field));
    }
    terms.push_back(std::move(t));
  }
  return terms;
}

// `item` is an object, or a watch event line {"type":..,"object":{..}}.
bool FieldsMatch(absl::string_view item, const std::vector<FieldTerm>& terms) {
  if (terms.empty()) return true;
  Doc doc;
  doc.Parse(item.data(), item.size());
  if (doc.HasParseError() || !doc.IsObject()) return false;
  const rapidjson::Value* obj = doc.HasMember("object") ? Member(doc, "object") : &doc;
  if (obj == nullptr) return false;
  for (const FieldTerm& t : terms) {
    const size_t dot = t.field.find('.');
    const rapidjson::Value* section = Member(*obj, t.field.substr(0, dot).c_str());
    const std::string value = section ? Str(*section, t.field.substr(dot + 1).c_str()) : "";
    if ((value == t.value) != t.equal) return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------- public helpers

std::string PodJson(const PodSpec& spec) {
  Doc doc;
  std::string text = ReadFileOrDie(SharedPath("protocol/pod-mig-1g.5gb.json"));
  doc.Parse(text.c_str());
  auto& a = doc.GetAllocator();
  rapidjson::Value& meta = doc["metadata"];
  SetStr(doc, meta, "name", spec.name);
  SetStr(doc, meta, "namespace", spec.namespace_name);
  meta.RemoveMember("generateName");
  meta.RemoveMember("resourceVersion");
  if (spec.uid.empty()) {
    meta.RemoveMember("uid");
  } else {
    SetStr(doc, meta, "uid", spec.uid);
  }
  if (!spec.annotations.empty()) {
    rapidjson::Value& ann = Obj(doc, meta, "annotations");
    for (const auto& [k, v] : spec.annotations) SetStr(doc, ann, k.c_str(), v);
  }
  rapidjson::Value& container = doc["spec"]["containers"][0];
  rapidjson::Value& resources = container["resources"];
  for (const char* which : {"requests", "limits"}) {
    rapidjson::Value fresh(rapidjson::kObjectType);
    fresh.AddMember("cpu", "2", a);
    fresh.AddMember("memory", "4Gi", a);
    for (const auto& [k, v] : spec.requests) {
      fresh.AddMember(rapidjson::Value(k.c_str(), a), rapidjson::Value(v.c_str(), a), a);
    }
    resources[which] = fresh;
  }
  if (!spec.node.empty()) SetStr(doc, doc["spec"], "nodeName", spec.node);
  SetStr(doc, Obj(doc, doc, "status"), "phase", spec.phase);
  return Serialize(doc);
}

// ---------------------------------------------------------------- server

struct FakeApiServer::Exchange {
  const httplib::Request* req;
  httplib::Response* res;
  std::vector<std::string> parts;  // path segments, parts[0] == ""

  void Reply(int status, const std::string& body) const {
    res->status = status;
    res->set_content(body, "application/json");
  }
};

FakeApiServer::FakeApiServer(Options options) : options_(std::move(options)) {
  tokens_ = options_.tokens;
  if (options_.tls) pki_ = MakeTestPki();
}

FakeApiServer::~FakeApiServer() { Stop(); }

std::string FakeApiServer::url() const {
  return absl::StrCat(options_.tls ? "https" : "http", "://127.0.0.1:", port_);
}

std::string FakeApiServer::Kubeconfig() const {
  std::string cluster = absl::StrCat("    server: ", url(), "\n");
  if (options_.tls) {
    absl::StrAppend(&cluster, "    certificate-authority-data: ", absl::Base64Escape(pki_.ca_pem), "\n");
  }
  std::string user;
  if (options_.require_client_cert) {
    user = absl::StrCat("    client-certificate-data: ", absl::Base64Escape(pki_.client_cert_pem),
                        "\n    client-key-data: ", absl::Base64Escape(pki_.client_key_pem), "\n");
  } else {
    absl::MutexLock lock(&mu_);
    user = absl::StrCat("    token: ", tokens_.empty() ? "none" : tokens_.front(), "\n");
  }
  return absl::StrCat("apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n", cluster,
                      "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n"
                      "    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user:\n",
                      user);
}

absl::Status FakeApiServer::Start() {
  if (options_.tls) {
    BIO* bio = BIO_new_mem_buf(pki_.server_cert_pem.data(), static_cast<int>(pki_.server_cert_pem.size()));
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    bio = BIO_new_mem_buf(pki_.server_key_pem.data(), static_cast<int>(pki_.server_key_pem.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    const bool client_certs = options_.require_client_cert;
    const std::string ca = pki_.ca_pem;
    server_ = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
      bool ok = SSL_CTX_use_certificate(&ctx, cert) == 1 && SSL_CTX_use_PrivateKey(&ctx, key) == 1;
      if (client_certs) {
        X509_STORE* store = X509_STORE_new();
        BIO* b = BIO_new_mem_buf(ca.data(), static_cast<int>(ca.size()));
        while (X509* c = PEM_read_bio_X509(b, nullptr, nullptr, nullptr)) {
          X509_STORE_add_cert(store, c);
          X509_free(c);
        }
        BIO_free(b);
        SSL_CTX_set_cert_store(&ctx, store);
        SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      }
      return ok;
    });
    X509_free(cert);
    EVP_PKEY_free(key);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  if (!server_->is_valid()) return absl::InternalError("fake apiserver: server setup failed");
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_->set_tcp_nodelay(true);
  server_->set_keep_alive_max_count(100000);
  server_->set_keep_alive_timeout(options_.keep_alive_seconds);
  server_->set_read_timeout(10, 0);
  server_->set_write_timeout(10, 0);

  // A request counts as in flight from here until its handler returned (or it was answered
  // without one): after that no write of it can still commit.
  auto end_in_flight = [this] {
    if (!t_in_flight) return;
    t_in_flight = false;
    absl::MutexLock lock(&mu_);
    --in_flight_;
  };
  server_->set_pre_routing_handler([this, end_in_flight](const httplib::Request& req,
                                                          httplib::Response& res) {
    end_in_flight();  // never left set by an earlier request on this thread, but be sure
    t_delay_after = absl::ZeroDuration();
    t_truncate_body = false;
    t_status_after_commit = 0;
    t_status_instead = 0;
    {
      absl::MutexLock lock(&mu_);
      ++request_counts_[absl::StrCat(req.method, " ", req.path)];
      if (!IsWatch(req)) {
        ++in_flight_;
        t_in_flight = true;
      }
    }
    std::string query;
    for (const auto& [k, v] : req.params) absl::StrAppend(&query, k, "=", v, "&");
    Fault fault;
    if (MatchFault(req.method, req.path, query, &fault)) {
      if (fault.hold) Hold();
      if (fault.delay_before > absl::ZeroDuration()) SleepUnlessStopping(fault.delay_before);
      if (fault.status != 0 && !fault.status_after_commit) t_status_instead = fault.status;
      if (fault.status_after_commit) t_status_after_commit = fault.status;
      t_delay_after = fault.delay_after;
      t_truncate_body = fault.truncate_body;
    }
    if (!options_.require_client_cert && !Authorized(req.get_header_value("Authorization"))) {
      res.status = 401;
      res.set_content(StatusBody(401, "Unauthorized", "Unauthorized"), "application/json");
      res.set_header("Connection", "close");
      end_in_flight();
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server_->set_post_routing_handler([this, end_in_flight](const httplib::Request&,
                                                           httplib::Response& res) {
    end_in_flight();  // answered without a handler (no route): nothing more will commit
    if (t_truncate_body && !res.body.empty()) res.body.resize(res.body.size() / 2);
    if (t_delay_after > absl::ZeroDuration()) SleepUnlessStopping(t_delay_after);
  });
  auto handler = [this, end_in_flight](const httplib::Request& req, httplib::Response& res) {
    if (t_status_instead != 0) {  // nothing is handled or written
      res.status = t_status_instead;
      res.set_content(InjectedStatusBody(t_status_instead), "application/json");
      end_in_flight();
      return;
    }
    if (req.method != "GET") {
      if (!AdmitWrite()) {
        // kube-apiserver (apiserver/pkg/server/filters/maxinflight.go, tooManyRequests, also
        // used by priority-and-fairness): Retry-After "1" and Go's http.Error plain text.
        res.status = 429;
        res.set_header("Retry-After", "1");
        res.set_content("Too many requests, please try again later.\n", "text/plain; charset=utf-8");
        end_in_flight();
        return;
      }
      if (options_.write_latency > absl::ZeroDuration()) SleepUnlessStopping(options_.write_latency);
    }
    Exchange ex{&req, &res, absl::StrSplit(req.path, '/')};
    Route(ex);
    end_in_flight();
    if (t_status_after_commit != 0) {  // the write is done; the answer says otherwise
      res.status = t_status_after_commit;
      res.set_content(InjectedStatusBody(t_status_after_commit), "application/json");
    }
  };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Put(".*", handler);
  server_->Patch(".*", handler);
  server_->Delete(".*", handler);

  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) return absl::InternalError("fake apiserver: cannot bind a loopback port");
  listener_ = std::thread([this] { server_->listen_after_bind(); });
  for (int i = 0; i < 500 && !server_->is_running(); ++i) absl::SleepFor(absl::Milliseconds(2));
  return absl::OkStatus();
}

void FakeApiServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
}

bool FakeApiServer::Authorized(const std::string& authorization) const {
  absl::MutexLock lock(&mu_);
  if (tokens_.empty()) return true;
  for (const std::string& t : tokens_) {
    if (authorization == absl::StrCat("Bearer ", t)) return true;
  }
  return false;
}

// Timed absl waits are invisible to TSan with Debian's uninstrumented Abseil (only the calls
// in cmake/tsan_absl_sync.cc are wrapped), so waits poll with plain locking.
void FakeApiServer::SleepUnlessStopping(absl::Duration d) const {
  for (absl::Time until = absl::Now() + d; absl::Now() < until;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    absl::SleepFor(std::min(absl::Milliseconds(5), until - absl::Now()));
  }
}

void FakeApiServer::Hold() {
  int64_t generation;
  {
    absl::MutexLock lock(&mu_);
    generation = release_generation_;
    ++held_;
  }
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || release_generation_ != generation) {
        --held_;
        return;
      }
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

void FakeApiServer::ReleaseHeld() {
  absl::MutexLock lock(&mu_);
  ++release_generation_;
}

int FakeApiServer::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

int64_t FakeApiServer::throttled() const {
  absl::MutexLock lock(&mu_);
  return throttled_;
}

bool FakeApiServer::AdmitWrite() {
  if (options_.write_qps <= 0) return true;
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  const double burst = std::max(1, options_.write_burst);
  write_tokens_ = write_tokens_at_ == absl::InfinitePast()
                      ? burst
                      : std::min(burst, write_tokens_ + absl::ToDoubleSeconds(now - write_tokens_at_) *
                                                            options_.write_qps);
  write_tokens_at_ = now;
  if (write_tokens_ >= 1) {
    write_tokens_ -= 1;
    return true;
  }
  ++throttled_;
  return false;
}

bool FakeApiServer::MatchFault(const std::string& method, const std::string& path,
                               const std::string& query, Fault* out) {
  absl::MutexLock lock(&mu_);
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (!it->method.empty() && it->method != method) continue;
    if (!it->path_contains.empty() && path.find(it->path_contains) == std::string::npos) continue;
    if (!it->query_contains.empty() && query.find(it->query_contains) == std::string::npos) continue;
    *out = *it;
    if (!it->label.empty()) {
      ++fault_hits_[it->label];
      fault_log_.push_back(FaultHit{it->label, absl::StrCat(method, " ", path)});
      if (fault_log_.size() > 100000) fault_log_.pop_front();
    }
    if (it->times > 0 && --it->times == 0) faults_.erase(it);
    return true;
  }
  return false;
}

void FakeApiServer::AddFault(Fault fault) {
  absl::MutexLock lock(&mu_);
  faults_.push_back(std::move(fault));
}

void FakeApiServer::ClearFaults() {
  absl::MutexLock lock(&mu_);
  faults_.clear();
}

void FakeApiServer::SetTokens(std::vector<std::string> tokens) {
  absl::MutexLock lock(&mu_);
  tokens_ = std::move(tokens);
}

void FakeApiServer::DropWatches() {
  absl::MutexLock lock(&mu_);
  ++drop_generation_;
}

void FakeApiServer::TruncateWatchEvents(int n) {
  absl::MutexLock lock(&mu_);
  truncate_events_ += n;
}

void FakeApiServer::HoldWatches(bool hold) {
  absl::MutexLock lock(&mu_);
  hold_after_rv_ = hold ? rv_ : -1;
}

void FakeApiServer::HoldWatchesAfter(int64_t resource_version) {
  absl::MutexLock lock(&mu_);
  hold_after_rv_ = std::max<int64_t>(0, resource_version);
}

std::map<std::string, int64_t> FakeApiServer::FaultHits() const {
  absl::MutexLock lock(&mu_);
  return fault_hits_;
}

std::vector<FakeApiServer::FaultHit> FakeApiServer::FaultLog() const {
  absl::MutexLock lock(&mu_);
  return std::vector<FaultHit>(fault_log_.begin(), fault_log_.end());
}

int FakeApiServer::InFlightRequests() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

bool FakeApiServer::WatchesCaughtUp() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, pos] : watch_positions_) {
    if (pos < rv_) return false;
  }
  return true;
}

int64_t FakeApiServer::RequestCount(absl::string_view method, absl::string_view path_contains) const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [k, v] : request_counts_) {
    if (absl::StartsWith(k, absl::StrCat(method, " ")) &&
        k.find(std::string(path_contains)) != std::string::npos) {
      n += v;
    }
  }
  return n;
}

int FakeApiServer::open_watches() const {
  absl::MutexLock lock(&mu_);
  return open_watches_;
}

int FakeApiServer::open_watches(absl::string_view resource) const {
  absl::MutexLock lock(&mu_);
  auto it = open_watches_by_resource_.find(resource);
  return it == open_watches_by_resource_.end() ? 0 : it->second;
}

int64_t FakeApiServer::watches_started() const {
  absl::MutexLock lock(&mu_);
  return watches_started_;
}

std::string FakeApiServer::resource_version() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat(rv_);
}

int64_t FakeApiServer::resource_version_number() const {
  absl::MutexLock lock(&mu_);
  return rv_;
}

void FakeApiServer::Compact() {
  absl::MutexLock lock(&mu_);
  compacted_rv_ = rv_;
  log_.clear();
  snapshots_.clear();
}

// ---------------------------------------------------------------- store

void FakeApiServer::CommitLocked(const std::string& resource, const std::string& key, Doc& doc,
                                 const std::string& type) {
  const KindInfo* info = InfoOf(resource);
  ++rv_;
  rapidjson::Value& meta = Obj(doc, doc, "metadata");
  SetStr(doc, meta, "resourceVersion", absl::StrCat(rv_));
  doc.RemoveMember("kind");
  doc.RemoveMember("apiVersion");
  Stored stored;
  stored.item = Serialize(doc);
  stored.rv = rv_;
  // Single objects and watch events carry kind and apiVersion first, as the API server writes.
  stored.full = absl::StrCat("{\"kind\":\"", info->kind, "\",\"apiVersion\":\"", info->api_version,
                             "\",", stored.item.substr(1));
  log_.push_back(Event{rv_, resource, absl::StrCat("{\"type\":\"", type, "\",\"object\":", stored.full, "}")});
  while (log_.size() > options_.event_log_limit) {
    compacted_rv_ = log_.front().rv;
    log_.pop_front();
  }
  if (type == "DELETED") {
    objects_[resource].erase(key);
  } else {
    objects_[resource][key] = std::move(stored);
  }
}

absl::Status FakeApiServer::ApplyDocLocked(const std::string& resource, Doc& doc,
                                           const std::string& type) {
  const KindInfo* info = InfoOf(resource);
  if (info == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown resource ", resource));
  if (!doc.IsObject()) return absl::InvalidArgumentError("object: not a JSON object");
  rapidjson::Value& meta = Obj(doc, doc, "metadata");
  std::string name = Str(meta, "name");
  std::string ns = Str(meta, "namespace");
  if (name.empty()) return absl::InvalidArgumentError("metadata.name: missing");
  if (info->namespaced && ns.empty()) return absl::InvalidArgumentError("metadata.namespace: missing");
  std::string key = info->namespaced ? absl::StrCat(ns, "/", name) : name;
  const bool exists = objects_[resource].count(key) != 0;
  if (Str(meta, "uid").empty()) {
    SetStr(doc, meta, "uid", absl::StrFormat("fa4e0000-0000-4000-8000-%012d", ++uid_counter_));
  }
  if (Str(meta, "creationTimestamp").empty()) {
    SetStr(doc, meta, "creationTimestamp",
           absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()));
  }
  CommitLocked(resource, key, doc, type.empty() ? (exists ? "MODIFIED" : "ADDED") : type);
  return absl::OkStatus();
}

absl::Status FakeApiServer::Apply(absl::string_view resource, absl::string_view json) {
  Doc doc;
  doc.Parse(json.data(), json.size());
  if (doc.HasParseError()) return absl::InvalidArgumentError("fake apiserver: invalid JSON");
  absl::MutexLock lock(&mu_);
  if (doc.IsObject() && doc.HasMember("items") && doc["items"].IsArray()) {
    for (rapidjson::Value& item : doc["items"].GetArray()) {
      Doc one;
      one.CopyFrom(item, one.GetAllocator());
      if (absl::Status s = ApplyDocLocked(std::string(resource), one, ""); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return ApplyDocLocked(std::string(resource), doc, "");
}

absl::Status FakeApiServer::ApplyFile(absl::string_view resource, const std::string& path) {
  return Apply(resource, ReadFileOrDie(path));
}

absl::Status FakeApiServer::LoadRecordedCluster() {
  const std::pair<const char*, const char*> files[] = {
      {"namespaces", "protocol/kube-api-1.26/list-namespaces.json"},
      {"resourcequotas", "protocol/kube-api-1.26/list-resourcequotas.json"},
      {"nodes", "protocol/nodelist-2-gpu-nodes.json"},
      {"nodes", "protocol/kube-api-1.26/list-nodes.json"},
      {"pods", "protocol/kube-api-1.26/list-pods.json"}};
  for (const auto& [resource, file] : files) {
    if (absl::Status s = ApplyFile(resource, SharedPath(file)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool FakeApiServer::Delete(absl::string_view resource, absl::string_view namespace_name,
                           absl::string_view name) {
  absl::MutexLock lock(&mu_);
  const KindInfo* info = InfoOf(resource);
  if (info == nullptr) return false;
  std::string key = info->namespaced ? absl::StrCat(namespace_name, "/", name) : std::string(name);
  auto& objects = objects_[std::string(resource)];
  auto it = objects.find(key);
  if (it == objects.end()) return false;
  Doc doc;
  doc.Parse(it->second.item.c_str());
  CommitLocked(std::string(resource), key, doc, "DELETED");
  return true;
}

std::optional<std::string> FakeApiServer::Get(absl::string_view resource,
                                              absl::string_view namespace_name,
                                              absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  const KindInfo* info = InfoOf(resource);
  if (info == nullptr) return std::nullopt;
  std::string key = info->namespaced ? absl::StrCat(namespace_name, "/", name) : std::string(name);
  auto r = objects_.find(std::string(resource));
  if (r == objects_.end()) return std::nullopt;
  auto it = r->second.find(key);
  if (it == r->second.end()) return std::nullopt;
  return it->second.full;
}

absl::Status FakeApiServer::Mutate(absl::string_view resource, absl::string_view namespace_name,
                                   absl::string_view name,
                                   const std::function<void(rapidjson::Document&)>& fn) {
  absl::MutexLock lock(&mu_);
  const KindInfo* info = InfoOf(resource);
  if (info == nullptr) return absl::InvalidArgumentError("unknown resource");
  std::string key = info->namespaced ? absl::StrCat(namespace_name, "/", name) : std::string(name);
  auto& objects = objects_[std::string(resource)];
  auto it = objects.find(key);
  if (it == objects.end()) return absl::NotFoundError(key);
  Doc doc;
  doc.Parse(it->second.item.c_str());
  fn(doc);
  CommitLocked(std::string(resource), key, doc, "MODIFIED");
  return absl::OkStatus();
}

absl::Status FakeApiServer::SetPodPhase(absl::string_view namespace_name, absl::string_view name,
                                        absl::string_view phase) {
  return Mutate("pods", namespace_name, name,
                [&](Doc& doc) { SetStr(doc, Obj(doc, doc, "status"), "phase", phase); });
}

std::vector<std::string> FakeApiServer::Objects(absl::string_view resource) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  auto r = objects_.find(std::string(resource));
  if (r == objects_.end()) return out;
  for (const auto& [key, stored] : r->second) out.push_back(stored.full);
  return out;
}

std::vector<PodView> FakeApiServer::Pods() const {
  absl::MutexLock lock(&mu_);
  std::vector<PodView> out;
  auto r = objects_.find("pods");
  if (r == objects_.end()) return out;
  for (const auto& [key, stored] : r->second) {
    Doc doc;
    doc.Parse(stored.item.c_str());
    PodView v;
    v.key = key;
    const rapidjson::Value* meta = Member(doc, "metadata");
    const rapidjson::Value* spec = Member(doc, "spec");
    const rapidjson::Value* status = Member(doc, "status");
    if (meta != nullptr) {
      v.uid = Str(*meta, "uid");
      v.terminating = Member(*meta, "deletionTimestamp") != nullptr;
      if (const rapidjson::Value* ann = Member(*meta, "annotations"); ann && ann->IsObject()) {
        for (const auto& m : ann->GetObject()) {
          if (m.value.IsString()) v.annotations[m.name.GetString()] = m.value.GetString();
        }
      }
    }
    if (spec != nullptr) {
      v.node = Str(*spec, "nodeName");
      const rapidjson::Value* containers = Member(*spec, "containers");
      if (containers && containers->IsArray() && !containers->Empty()) {
        const rapidjson::Value* res = Member((*containers)[0], "resources");
        const rapidjson::Value* req = res ? Member(*res, "requests") : nullptr;
        if (req && req->IsObject()) {
          for (const auto& m : req->GetObject()) {
            if (m.value.IsString()) v.requests[m.name.GetString()] = m.value.GetString();
          }
        }
      }
    }
    if (status != nullptr) v.phase = Str(*status, "phase");
    out.push_back(std::move(v));
  }
  return out;
}

// ---------------------------------------------------------------- routing

void FakeApiServer::Route(const Exchange& ex) {
  const std::vector<std::string>& p = ex.parts;
  const std::string& method = ex.req->method;
  const size_t n = p.size();
  if (n == 2 && p[1] == "version") {
    ex.Reply(200, R"({"major":"1","minor":"26","gitVersion":"v1.26.5","platform":"linux/amd64"})");
    return;
  }
  if (n >= 4 && p[1] == "api" && p[2] == "v1") {
    if (n == 4 && method == "GET" && CoreResource(p[3])) {
      if (IsWatch(*ex.req)) {
        ServeWatch(ex, p[3]);
      } else {
        ServeList(ex, p[3]);
      }
      return;
    }
    if (n == 5 && p[3] == "nodes" && method == "PATCH") {
      ServeNodePatch(ex, p[4]);
      return;
    }
    if (n == 5 && (p[3] == "nodes" || p[3] == "namespaces")) {
      ServeObject(ex, p[3], "", p[4]);
      return;
    }
    if (n >= 6 && p[3] == "namespaces") {
      const std::string& ns = p[4];
      const std::string& resource = p[5];
      if (n == 6 && method == "POST" && resource == "pods") {
        Doc doc;
        doc.Parse(ex.req->body.c_str());
        absl::MutexLock lock(&mu_);
        std::string name = doc.IsObject() && doc.HasMember("metadata") ? Str(doc["metadata"], "name") : "";
        if (doc.HasParseError() || name.empty()) {
          ex.Reply(400, StatusBody(400, "BadRequest", "invalid Pod body"));
          return;
        }
        if (objects_["pods"].count(absl::StrCat(ns, "/", name)) != 0) {
          ex.Reply(409, StatusBody(409, "AlreadyExists",
                                   absl::StrCat("pods \"", name, "\" already exists"), name, "pods"));
          return;
        }
        SetStr(doc, Obj(doc, doc, "metadata"), "namespace", ns);
        if (absl::Status s = ApplyDocLocked("pods", doc, "ADDED"); !s.ok()) {
          ex.Reply(422, StatusBody(422, "Invalid", s.message()));
          return;
        }
        ex.Reply(201, objects_["pods"][absl::StrCat(ns, "/", name)].full);
        return;
      }
      if (n == 6 && method == "POST" && resource == "events") {
        ServeEventCreate(ex, ns);
        return;
      }
      if (n == 8 && resource == "pods" && p[7] == "binding" && method == "POST") {
        ServeBinding(ex, ns, p[6]);
        return;
      }
      if (n == 7 && CoreResource(resource)) {
        ServeObject(ex, resource, ns, p[6]);
        return;
      }
    }
  }
  // resource.k8s.io/v1: cluster-wide lists and watches of all three kinds (claims across
  // namespaces, as kube-scheduler's informers read them), GET and DELETE of one object.
  if (n == 4 && p[1] == "apis" && p[2] == "resource.k8s.io" && p[3] == "v1" && method == "GET") {
    // Discovery of the group version (the extender's --dra-mode=auto asks it).
    if (!options_.serve_dra) {
      ex.Reply(404, StatusBody(404, "NotFound", "the server could not find the requested resource"));
      return;
    }
    ex.Reply(200, R"({"kind":"APIResourceList","apiVersion":"v1","groupVersion":"resource.k8s.io/v1",)"
                  R"("resources":[{"name":"deviceclasses","namespaced":false,"kind":"DeviceClass",)"
                  R"("verbs":["get","list","watch"]},{"name":"resourceclaims","namespaced":true,)"
                  R"("kind":"ResourceClaim","verbs":["get","list","watch"]},{"name":)"
                  R"("resourceslices","namespaced":false,"kind":"ResourceSlice",)"
                  R"("verbs":["get","list","watch"]}]})");
    return;
  }
  if (n >= 5 && p[1] == "apis" && p[2] == "resource.k8s.io" && p[3] == "v1") {
    if (n == 5 && method == "GET" && DraResource(p[4])) {
      if (IsWatch(*ex.req)) {
        ServeWatch(ex, p[4]);
      } else {
        ServeList(ex, p[4]);
      }
      return;
    }
    if (n == 6 && (p[4] == "deviceclasses" || p[4] == "resourceslices")) {
      ServeObject(ex, p[4], "", p[5]);
      return;
    }
    if (n == 8 && p[4] == "namespaces" && p[6] == "resourceclaims") {
      ServeObject(ex, "resourceclaims", p[5], p[7]);
      return;
    }
  }
  if (n >= 7 && p[1] == "apis" && p[2] == "coordination.k8s.io" && p[3] == "v1" &&
      p[4] == "namespaces" && p[6] == "leases") {
    if (n == 7 && method == "GET") {
      if (IsWatch(*ex.req)) {
        ServeWatch(ex, "leases", p[5]);
      } else {
        ServeList(ex, "leases", p[5]);
      }
      return;
    }
    ServeLease(ex, p[5], n == 8 ? p[7] : "");
    return;
  }
  ex.Reply(404, StatusBody(404, "NotFound", "the server could not find the requested resource"));
}

void FakeApiServer::ServeObject(const Exchange& ex, const std::string& resource,
                                const std::string& ns, const std::string& name) {
  const std::string& method = ex.req->method;
  if (method == "GET") {
    std::optional<std::string> obj = Get(resource, ns, name);
    if (!obj) {
      ex.Reply(404, StatusBody(404, "NotFound", absl::StrCat(resource, " \"", name, "\" not found"),
                               name, resource));
      return;
    }
    ex.Reply(200, *obj);
    return;
  }
  if (method == "PATCH" && resource == "pods") {
    ServePodPatch(ex, ns, name);
    return;
  }
  if (method == "DELETE") {
    std::optional<std::string> obj = Get(resource, ns, name);
    if (!obj || !Delete(resource, ns, name)) {
      ex.Reply(404, StatusBody(404, "NotFound", absl::StrCat(resource, " \"", name, "\" not found"),
                               name, resource));
      return;
    }
    ex.Reply(200, *obj);
    return;
  }
  ex.Reply(405, StatusBody(405, "MethodNotAllowed", "the server does not allow this method"));
}

void FakeApiServer::ServePodPatch(const Exchange& ex, const std::string& ns,
                                  const std::string& name) {
  const std::string type = ex.req->get_header_value("Content-Type");
  if (type.rfind("application/merge-patch+json", 0) != 0) {
    ex.Reply(415, StatusBody(415, "UnsupportedMediaType",
                             absl::StrCat("the body of the request was in an unknown format - "
                                          "accepted media types include: "
                                          "application/merge-patch+json (fake apiserver), got ",
                                          type)));
    return;
  }
  Doc patch;
  patch.Parse(ex.req->body.c_str());
  if (patch.HasParseError() || !patch.IsObject()) {
    ex.Reply(400, StatusBody(400, "BadRequest", "error decoding patch: invalid JSON object"));
    return;
  }
  absl::MutexLock lock(&mu_);
  const std::string key = absl::StrCat(ns, "/", name);
  auto& pods = objects_["pods"];
  auto it = pods.find(key);
  if (it == pods.end()) {
    ex.Reply(404, StatusBody(404, "NotFound", absl::StrCat("pods \"", name, "\" not found"), name,
                             "pods"));
    return;
  }
  Doc doc;
  doc.Parse(it->second.item.c_str());
  const rapidjson::Value* patch_meta = Member(patch, "metadata");
  const std::string want_rv = patch_meta ? Str(*patch_meta, "resourceVersion") : "";
  // A resourceVersion in the patch is a precondition, as in kube-apiserver's update.
  if (!want_rv.empty() && want_rv != absl::StrCat(it->second.rv)) {
    ex.Reply(409, StatusBody(409, "Conflict",
                             absl::StrCat("Operation cannot be fulfilled on pods \"", name,
                                          "\": the object has been modified; please apply your "
                                          "changes to the latest version and try again"),
                             name, "pods"));
    return;
  }
  const std::string uid = Str(doc["metadata"], "uid");
  const std::string before = it->second.item;
  MergePatch(doc, doc, patch);
  for (const char* field : {"uid", "name", "namespace"}) {
    const std::string want = std::string(field) == "uid"    ? uid
                             : std::string(field) == "name" ? name
                                                            : ns;
    if (Str(doc["metadata"], field) != want) {
      ex.Reply(422, StatusBody(422, "Invalid",
                               absl::StrCat("Pod \"", name, "\" is invalid: metadata.", field,
                                            ": Invalid value: \"", Str(doc["metadata"], field),
                                            "\": field is immutable"),
                               name, "Pod"));
      return;
    }
  }
  SetStr(doc, doc["metadata"], "resourceVersion", absl::StrCat(it->second.rv));
  doc.RemoveMember("kind");
  doc.RemoveMember("apiVersion");
  // A patch that changes nothing is not a write: no new resourceVersion, no watch event.
  if (Serialize(doc) != before) CommitLocked("pods", key, doc, "MODIFIED");
  ex.Reply(200, pods[key].full);
}

void FakeApiServer::ServeList(const Exchange& ex, const std::string& resource,
                              const std::string& ns) {
  const KindInfo* info = InfoOf(resource);
  absl::StatusOr<std::vector<FieldTerm>> fields =
      ParseFieldSelector(ex.req->get_param_value("fieldSelector"));
  if (!fields.ok()) {
    ex.Reply(400, StatusBody(400, "BadRequest", fields.status().message()));
    return;
  }
  if (!fields->empty() && resource != "pods") {
    ex.Reply(400, StatusBody(400, "BadRequest", absl::StrCat("field label not supported: ",
                                                             fields->front().field)));
    return;
  }
  if (!ns.empty()) fields->push_back(FieldTerm{"metadata.namespace", ns, true});
  int64_t limit = 0;
  (void)absl::SimpleAtoi(ex.req->get_param_value("limit"), &limit);
  const std::string cont = ex.req->get_param_value("continue");
  const std::string rv_param = ex.req->get_param_value("resourceVersion");
  const std::string match = ex.req->get_param_value("resourceVersionMatch");
  absl::MutexLock lock(&mu_);
  std::string snapshot_id;
  size_t offset = 0;
  ListSnapshot* snap = nullptr;
  ListSnapshot fresh;
  if (!cont.empty()) {
    std::string decoded;
    std::vector<std::string> parts;
    if (absl::Base64Unescape(cont, &decoded)) parts = absl::StrSplit(decoded, ':');
    auto it = parts.size() == 2 ? snapshots_.find(parts[0]) : snapshots_.end();
    if (it == snapshots_.end() || !absl::SimpleAtoi(parts[1], &offset) ||
        it->second.rv < compacted_rv_) {
      ex.Reply(410, StatusBody(410, "Expired",
                               "The provided continue parameter is too old to display a consistent "
                               "list result. You can start a new list without the continue parameter."));
      return;
    }
    snapshot_id = parts[0];
    snap = &it->second;
  } else {
    if (match == "Exact" && !rv_param.empty()) {
      int64_t want = 0;
      if (!absl::SimpleAtoi(rv_param, &want) || want < compacted_rv_ || want != rv_) {
        ex.Reply(410, StatusBody(410, "Expired", "The resourceVersion for the provided list is too old."));
        return;
      }
    }
    fresh.rv = rv_;
    for (const auto& [key, stored] : objects_[resource]) {
      if (FieldsMatch(stored.item, *fields)) fresh.items.push_back(stored.item);
    }
    snap = &fresh;
  }
  size_t end = snap->items.size();
  std::string next;
  if (limit > 0 && offset + static_cast<size_t>(limit) < end) {
    end = offset + static_cast<size_t>(limit);
    if (snapshot_id.empty()) {
      snapshot_id = absl::StrCat("s", ++snapshot_counter_);
      snapshots_[snapshot_id] = fresh;
      snap = &snapshots_[snapshot_id];
    }
    next = absl::Base64Escape(absl::StrCat(snapshot_id, ":", end));
  }
  std::string body = absl::StrCat("{\"kind\":\"", info->kind, "List\",\"apiVersion\":\"",
                                  info->api_version, "\",\"metadata\":{\"resourceVersion\":\"",
                                  snap->rv, "\"");
  if (!next.empty()) {
    absl::StrAppend(&body, ",\"continue\":\"", next, "\",\"remainingItemCount\":",
                    snap->items.size() - end);
  }
  absl::StrAppend(&body, "},\"items\":[");
  for (size_t i = offset; i < end; ++i) {
    if (i > offset) body.push_back(',');
    body += snap->items[i];
  }
  body += "]}";
  if (next.empty() && !snapshot_id.empty()) snapshots_.erase(snapshot_id);
  ex.Reply(200, body);
}

void FakeApiServer::ServeWatch(const Exchange& ex, const std::string& resource,
                               const std::string& ns) {
  struct WatchState {
    int64_t id = 0;
    int64_t pos = 0;
    absl::Time end;
    absl::Time next_bookmark;
    bool bookmarks = false;
    bool expired = false;
    int64_t drop_generation = 0;
  };
  auto state = std::make_shared<WatchState>();
  int64_t timeout_s = 0;
  if (!absl::SimpleAtoi(ex.req->get_param_value("timeoutSeconds"), &timeout_s) || timeout_s <= 0) {
    timeout_s = absl::ToInt64Seconds(options_.default_watch_timeout);
  }
  const std::string rv_param = ex.req->get_param_value("resourceVersion");
  const std::string bm = ex.req->get_param_value("allowWatchBookmarks");
  absl::StatusOr<std::vector<FieldTerm>> fields =
      ParseFieldSelector(ex.req->get_param_value("fieldSelector"));
  if (fields.ok() && !fields->empty() && resource != "pods") {
    fields = absl::InvalidArgumentError(
        absl::StrCat("field label not supported: ", fields->front().field));
  }
  if (!fields.ok()) {
    ex.Reply(400, StatusBody(400, "BadRequest", fields.status().message()));
    return;
  }
  if (!ns.empty()) fields->push_back(FieldTerm{"metadata.namespace", ns, true});
  auto selector = std::make_shared<const std::vector<FieldTerm>>(*std::move(fields));
  state->bookmarks = bm == "true" || bm == "1";
  const absl::Time now = absl::Now();
  state->end = now + absl::Seconds(timeout_s);
  state->next_bookmark = now + options_.bookmark_interval;
  {
    absl::MutexLock lock(&mu_);
    int64_t from = rv_;
    if (!rv_param.empty() && rv_param != "0" && !absl::SimpleAtoi(rv_param, &from)) {
      ex.Reply(400, StatusBody(400, "BadRequest", absl::StrCat("invalid resourceVersion \"", rv_param, "\"")));
      return;
    }
    state->pos = from;
    state->expired = from < compacted_rv_;
    state->drop_generation = drop_generation_;
    ++open_watches_;
    ++open_watches_by_resource_[resource];
    state->id = ++watches_started_;
    watch_positions_[state->id] = from;
  }
  ex.res->set_chunked_content_provider(
      "application/json",
      [this, state, resource, selector](size_t, httplib::DataSink& sink) -> bool {
        std::vector<std::string> lines;
        bool finish = false;
        bool cut = false;
        {
          // Wait (polling, see SleepUnlessStopping) for news, a bookmark or the end. While
          // watches are held, only events up to hold_after_rv_ are news.
          const absl::Time wake = std::min(
              {state->end, state->bookmarks ? state->next_bookmark : absl::InfiniteFuture(),
               absl::Now() + absl::Milliseconds(200)});
          while (absl::Now() < wake) {
            {
              absl::MutexLock lock(&mu_);
              if (stopping_ || drop_generation_ != state->drop_generation) break;
              if (hold_after_rv_ < 0 && (state->pos < compacted_rv_ || state->expired)) break;
              auto next = std::upper_bound(log_.begin(), log_.end(), state->pos,
                                           [](int64_t rv, const Event& e) { return rv < e.rv; });
              if (next != log_.end() && (hold_after_rv_ < 0 || next->rv <= hold_after_rv_)) break;
            }
            absl::SleepFor(absl::Milliseconds(3));
          }
          absl::MutexLock lock(&mu_);
          const bool held = hold_after_rv_ >= 0;
          if (!held && state->expired) {
            lines.emplace_back(kExpiredWatchLine);
            finish = true;
          } else {
            if (stopping_ || drop_generation_ != state->drop_generation) return false;
            if (!held && state->pos < compacted_rv_) {
              lines.emplace_back(kExpiredWatchLine);
              finish = true;
            } else {
              // A held watch sends what came up to hold_after_rv_, nothing later (no bookmark
              // either: it would claim the later resourceVersion).
              const int64_t cap = held ? hold_after_rv_ : std::numeric_limits<int64_t>::max();
              auto first = std::upper_bound(log_.begin(), log_.end(), state->pos,
                                            [](int64_t rv, const Event& e) { return rv < e.rv; });
              for (auto it = first; it != log_.end() && it->rv <= cap; ++it) {
                state->pos = it->rv;
                if (it->resource != resource || !FieldsMatch(it->line, *selector)) continue;
                if (truncate_events_ > 0) {
                  --truncate_events_;
                  lines.push_back(it->line.substr(0, it->line.size() / 2));
                  cut = true;
                  break;
                }
                lines.push_back(it->line);
              }
              const absl::Time t = absl::Now();
              if (!cut && !held && state->bookmarks && t >= state->next_bookmark) {
                lines.push_back(BookmarkLine(resource, rv_));
                state->pos = std::max(state->pos, rv_);
                state->next_bookmark = t + options_.bookmark_interval;
              }
              if (!cut && t >= state->end) {
                if (state->bookmarks && !held) lines.push_back(BookmarkLine(resource, rv_));
                finish = true;
              }
            }
          }
          watch_positions_[state->id] = state->pos;
        }
        for (std::string& line : lines) {
          line.push_back('\n');
          if (!sink.write(line.data(), line.size())) return false;
        }
        if (cut) return false;  // the connection dies mid-stream
        if (finish) sink.done();
        return true;
      },
      [this, state, resource](bool) {
        absl::MutexLock lock(&mu_);
        --open_watches_;
        --open_watches_by_resource_[resource];
        watch_positions_.erase(state->id);
      });
}

void FakeApiServer::ServeBinding(const Exchange& ex, const std::string& ns, const std::string& name) {
  Doc binding;
  binding.Parse(ex.req->body.c_str());
  const rapidjson::Value* target = binding.HasParseError() ? nullptr : Member(binding, "target");
  std::string node = target ? Str(*target, "name") : "";
  if (node.empty()) {
    ex.Reply(400, StatusBody(400, "BadRequest", "Binding.target.name: Required value"));
    return;
  }
  const rapidjson::Value* bmeta = Member(binding, "metadata");
  std::string want_uid = bmeta ? Str(*bmeta, "uid") : "";
  absl::MutexLock lock(&mu_);
  auto& pods = objects_["pods"];
  auto it = pods.find(absl::StrCat(ns, "/", name));
  if (it == pods.end()) {
    ex.Reply(404, StatusBody(404, "NotFound", absl::StrCat("pods \"", name, "\" not found"), name, "pods"));
    return;
  }
  Doc pod;
  pod.Parse(it->second.item.c_str());
  rapidjson::Value& meta = Obj(pod, pod, "metadata");
  rapidjson::Value& spec = Obj(pod, pod, "spec");
  const std::string uid = Str(meta, "uid");
  if (!want_uid.empty() && want_uid != uid) {
    ex.Reply(409, StatusBody(409, "Conflict",
                             absl::StrCat("Operation cannot be fulfilled on pods \"", name,
                                          "\": StorageError: invalid object, Code: 4, Key: /registry/pods/",
                                          ns, "/", name,
                                          ", ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: "
                                          "UID in precondition: ",
                                          want_uid, ", UID in object meta: ", uid),
                             name, "pods"));
    return;
  }
  const std::string bound = Str(spec, "nodeName");
  if (!bound.empty()) {
    ex.Reply(409, StatusBody(409, "Conflict",
                             absl::StrCat("Operation cannot be fulfilled on pods/binding \"", name,
                                          "\": pod ", name, " is already assigned to node \"", bound,
                                          "\""),
                             name, "pods/binding"));
    return;
  }
  SetStr(pod, spec, "nodeName", node);
  if (const rapidjson::Value* ann = bmeta ? Member(*bmeta, "annotations") : nullptr;
      ann && ann->IsObject()) {
    rapidjson::Value& pod_ann = Obj(pod, meta, "annotations");
    for (const auto& m : ann->GetObject()) {
      if (m.value.IsString()) SetStr(pod, pod_ann, m.name.GetString(), m.value.GetString());
    }
  }
  {
    // As kube-apiserver's binding subresource: condition PodScheduled=True, its
    // lastTransitionTime the commit (kube-api-1.26/pod-after-binding.json).
    auto& a = pod.GetAllocator();
    rapidjson::Value& status = Obj(pod, pod, "status");
    if (!status.HasMember("conditions") || !status["conditions"].IsArray()) {
      status.RemoveMember("conditions");
      status.AddMember("conditions", rapidjson::Value(rapidjson::kArrayType), a);
    }
    rapidjson::Value& conditions = status["conditions"];
    for (rapidjson::SizeType i = 0; i < conditions.Size();) {
      if (conditions[i].IsObject() && Str(conditions[i], "type") == "PodScheduled") {
        conditions.Erase(conditions.Begin() + i);
      } else {
        ++i;
      }
    }
    const std::string now = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
    rapidjson::Value c(rapidjson::kObjectType);
    c.AddMember("type", "PodScheduled", a);
    c.AddMember("status", "True", a);
    c.AddMember("lastProbeTime", rapidjson::Value(rapidjson::kNullType), a);
    c.AddMember("lastTransitionTime", rapidjson::Value(now.c_str(), a), a);
    conditions.PushBack(c, a);
  }
  CommitLocked("pods", it->first, pod, "MODIFIED");
  ex.Reply(201, R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201})");
}

void FakeApiServer::ServeLease(const Exchange& ex, const std::string& ns, const std::string& name) {
  const std::string& method = ex.req->method;
  auto not_found = [&](const std::string& n) {
    ex.Reply(404, StatusBody(404, "NotFound",
                             absl::StrCat("leases.coordination.k8s.io \"", n, "\" not found"), n,
                             "leases", "coordination.k8s.io"));
  };
  if (method == "GET" && !name.empty()) {
    std::optional<std::string> obj = Get("leases", ns, name);
    if (!obj) return not_found(name);
    ex.Reply(200, *obj);
    return;
  }
  Doc doc;
  doc.Parse(ex.req->body.c_str());
  if (doc.HasParseError() || !doc.IsObject()) {
    ex.Reply(400, StatusBody(400, "BadRequest", "invalid Lease body"));
    return;
  }
  rapidjson::Value& meta = Obj(doc, doc, "metadata");
  const std::string body_name = Str(meta, "name");
  absl::MutexLock lock(&mu_);
  auto& leases = objects_["leases"];
  if (method == "POST" && name.empty()) {
    if (body_name.empty()) {
      ex.Reply(422, StatusBody(422, "Invalid", "Lease.metadata.name: Required value"));
      return;
    }
    std::string key = absl::StrCat(ns, "/", body_name);
    if (leases.count(key) != 0) {
      ex.Reply(409, StatusBody(409, "AlreadyExists",
                               absl::StrCat("leases.coordination.k8s.io \"", body_name, "\" already exists"),
                               body_name, "leases", "coordination.k8s.io"));
      return;
    }
    SetStr(doc, meta, "namespace", ns);
    meta.RemoveMember("resourceVersion");
    (void)ApplyDocLocked("leases", doc, "ADDED");
    ex.Reply(201, leases[key].full);
    return;
  }
  if (method == "PUT" && !name.empty()) {
    std::string key = absl::StrCat(ns, "/", name);
    auto it = leases.find(key);
    if (it == leases.end()) {
      not_found(name);
      return;
    }
    if (Str(meta, "resourceVersion") != absl::StrCat(it->second.rv)) {
      ex.Reply(409, StatusBody(409, "Conflict",
                               absl::StrCat("Operation cannot be fulfilled on leases.coordination.k8s.io \"",
                                            name,
                                            "\": the object has been modified; please apply your changes "
                                            "to the latest version and try again"),
                               name, "leases", "coordination.k8s.io"));
      return;
    }
    Doc old;
    old.Parse(it->second.item.c_str());
    SetStr(doc, meta, "uid", Str(old["metadata"], "uid"));
    SetStr(doc, meta, "namespace", ns);
    CommitLocked("leases", key, doc, "MODIFIED");
    ex.Reply(200, leases[key].full);
    return;
  }
  ex.Reply(405, StatusBody(405, "MethodNotAllowed", "the server does not allow this method"));
}

void FakeApiServer::ServeNodePatch(const Exchange& ex, const std::string& name) {
  const std::string resource = "nodes";
  const std::string type = ex.req->get_header_value("Content-Type");
  if (!absl::StartsWith(type, "application/merge-patch+json") &&
      !absl::StartsWith(type, "application/strategic-merge-patch+json")) {
    ex.Reply(415, StatusBody(415, "UnsupportedMediaType",
                             absl::StrCat("the body of the request was in an unknown format - "
                                          "accepted media types include: application/json-patch+json, "
                                          "application/merge-patch+json, application/apply-patch+yaml, "
                                          "application/strategic-merge-patch+json; got \"", type, "\"")));
    return;
  }
  Doc patch;
  patch.Parse(ex.req->body.c_str());
  if (patch.HasParseError() || !patch.IsObject()) {
    ex.Reply(400, StatusBody(400, "BadRequest", "error decoding patch: not a JSON object"));
    return;
  }
  const std::string& key = name;
  absl::MutexLock lock(&mu_);
  auto& objects = objects_[resource];
  auto it = objects.find(key);
  if (it == objects.end()) {
    ex.Reply(404, StatusBody(404, "NotFound", absl::StrCat(resource, " \"", name, "\" not found"),
                             name, resource));
    return;
  }
  Doc doc;
  doc.Parse(it->second.item.c_str());
  const std::string uid = Str(doc["metadata"], "uid");
  const rapidjson::Value* patch_meta = Member(patch, "metadata");
  const std::string patch_uid = patch_meta != nullptr ? Str(*patch_meta, "uid") : "";
  if (!patch_uid.empty() && patch_uid != uid) {
    // A patch that names another UID (an object recreated under the same name) fails validation.
    ex.Reply(422, StatusBody(422, "Invalid",
                             absl::StrCat(resource, " \"", name, "\" is invalid: metadata.uid: ",
                                          "Invalid value: \"", patch_uid, "\": field is immutable"),
                             name, resource));
    return;
  }
  MergePatch(doc, doc, patch);
  // Identity is not the patch's to change.
  rapidjson::Value& meta = Obj(doc, doc, "metadata");
  SetStr(doc, meta, "name", name);
  SetStr(doc, meta, "uid", uid);
  CommitLocked(resource, key, doc, "MODIFIED");
  ex.Reply(200, objects[key].full);
}

void FakeApiServer::ServeEventCreate(const Exchange& ex, const std::string& ns) {
  Doc doc;
  doc.Parse(ex.req->body.c_str());
  const rapidjson::Value* meta = doc.HasParseError() ? nullptr : Member(doc, "metadata");
  const rapidjson::Value* involved = doc.HasParseError() ? nullptr : Member(doc, "involvedObject");
  if (meta == nullptr || (Str(*meta, "name").empty() && Str(*meta, "generateName").empty())) {
    ex.Reply(422, StatusBody(422, "Invalid", "Event.metadata.name: Required value"));
    return;
  }
  if (involved == nullptr || Str(*involved, "name").empty() ||
      (!Str(*meta, "namespace").empty() && Str(*meta, "namespace") != ns) ||
      Str(*involved, "namespace") != ns) {
    ex.Reply(422, StatusBody(422, "Invalid",
                             "Event.involvedObject: Invalid value: the namespace of the involved "
                             "object must match the event's"));
    return;
  }
  absl::MutexLock lock(&mu_);
  events_.push_back(ex.req->body);
  ex.Reply(201, ex.req->body);
}

std::vector<std::string> FakeApiServer::Events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

}  // namespace gse::testing
