// SchedulerClients: see the header. Wire format: shared/protocol/captured-k8s-1.26/.
#include "tests/testing/scheduler_clients.h"

#include <httplib.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "rapidjson/document.h"
#include "tests/testing/http_fixture.h"
#include "testsupport/json_edit.h"

namespace gse::testing {
namespace {

using json::Member;
using json::Quote;

std::string NameList(const std::vector<std::string>& names) {
  return absl::StrCat("[", absl::StrJoin(names, ",", [](std::string* out, const std::string& n) {
                        out->append(Quote(n));
                      }),
                      "]");
}

// Requests of a pod's first container that are whole numbers, by resource.
std::map<std::string, int64_t> Requests(const rapidjson::Value& pod) {
  std::map<std::string, int64_t> out;
  const rapidjson::Value* spec = Member(pod, "spec");
  const rapidjson::Value* containers = spec ? Member(*spec, "containers") : nullptr;
  if (containers == nullptr || !containers->IsArray() || containers->Empty()) return out;
  const rapidjson::Value* res = Member((*containers)[0], "resources");
  const rapidjson::Value* req = res ? Member(*res, "requests") : nullptr;
  if (req == nullptr || !req->IsObject()) return out;
  for (const auto& m : req->GetObject()) {
    int64_t n = 0;
    if (m.value.IsString() && absl::SimpleAtoi(m.value.GetString(), &n)) out[m.name.GetString()] = n;
  }
  return out;
}

}  // namespace

// One kube-scheduler's connection to the extender and its random choices.
class SchedulerClients::Client {
 public:
  explicit Client(uint64_t seed) : rng(seed) {}

  // The client for `port`, made again when the Service routes elsewhere.
  httplib::Client* For(int port) {
    if (http == nullptr || port != http_port) {
      http = std::make_unique<httplib::Client>("127.0.0.1", port);
      http->set_tcp_nodelay(true);
      http->set_keep_alive(true);
      http->set_connection_timeout(1, 0);
      http->set_read_timeout(5, 0);  // kube-scheduler's httpTimeout
      http->set_write_timeout(5, 0);
      http_port = port;
    }
    return http.get();
  }

  std::mt19937_64 rng;

 private:
  std::unique_ptr<httplib::Client> http;
  int http_port = -1;
};

SchedulerClients::SchedulerClients(const FakeApiServer* fake, Endpoint endpoint,
                                   std::vector<std::string> nodes, uint64_t seed, Dra dra)
    : fake_(fake), endpoint_(std::move(endpoint)), nodes_(std::move(nodes)), seed_(seed), dra_(std::move(dra)) {}

SchedulerClients::~SchedulerClients() { Join(); }

void SchedulerClients::Start(const std::vector<std::string>& pod_keys, int threads, int max_tries) {
  Join();
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& key : pod_keys) queue_.push_back(Job{key, 0});
  }
  ++rounds_;
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i, max_tries] { Work(i, max_tries); });
}

void SchedulerClients::Join() {
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

bool SchedulerClients::Running() const {
  absl::MutexLock lock(&mu_);
  return !queue_.empty() || busy_ > 0;
}

SchedulerCounters SchedulerClients::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

// Unreserve (DraTestAllocator::Unreserve). The claim may be gone already: the pod was
// deleted meanwhile and its claims with it.
void SchedulerClients::Unreserve(const std::string& ns, const std::string& claim) {
  if (claim.empty()) return;
  (void)dra_.allocator->Unreserve(ns, claim);
  Count(&SchedulerCounters::dra_unreserved);
}

void SchedulerClients::Count(int64_t SchedulerCounters::*field) {
  absl::MutexLock lock(&mu_);
  ++(counters_.*field);
}

void SchedulerClients::Work(int index, int max_tries) {
  Client client(seed_ * 7919 + static_cast<uint64_t>(rounds_.load()) * 131 + static_cast<uint64_t>(index));
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) {
        if (busy_ == 0) return;
      } else {
        job = queue_.front();
        queue_.pop_front();
        ++busy_;
      }
    }
    if (job.key.empty()) {  // others are busy and may requeue a pod: wait for it
      absl::SleepFor(absl::Milliseconds(5));
      continue;
    }
    const Outcome outcome = Attempt(client, job.key);
    // kube-scheduler backs a failed pod off before its next attempt, exponentially (so that
    // a leader hand-over of a few seconds is bridged), and parks a pod that fits nowhere
    // until the cluster changes: here, one more try in the round.
    bool again = false;
    if (outcome == Outcome::kRetry) {
      absl::SleepFor(std::min(absl::Milliseconds(500), absl::Milliseconds(20) * (1 << std::min(job.tries, 5))));
      again = job.tries + 1 < max_tries;
    } else if (outcome == Outcome::kUnschedulable) {
      again = job.tries == 0;
    }
    absl::MutexLock lock(&mu_);
    --busy_;
    if (again) queue_.push_back(Job{job.key, job.tries + 1});
  }
}

// kube-scheduler's NodeResourcesFit for the pod's extended resources, from the API server's
// objects (its informer cache): allocatable minus the requests of non-terminal pods bound there;
// on DRA nodes the DRA plugin's Filter instead (NodeResourcesFit skips DRA-backed names).
std::vector<std::string> SchedulerClients::Candidates(Client& client, const std::string& ns,
                                                      const std::string& name, const std::string& pod_json) {
  auto dra_fits = [&](const std::string& node) {
    return dra_.allocator != nullptr && dra_.allocator->Plan(ns, name, node).ok();
  };
  if (client.rng() % 2 == 0) {
    std::vector<std::string> out;
    for (const std::string& n : nodes_) {
      if (!IsDraNode(n) || dra_fits(n)) out.push_back(n);
    }
    return out;
  }
  rapidjson::Document pod;
  pod.Parse(pod_json.c_str());
  std::map<std::string, int64_t> wanted;
  for (const auto& [resource, n] : Requests(pod)) {
    if (resource.rfind("nvidia.com/", 0) == 0 && n > 0) wanted[resource] = n;
  }
  std::map<std::string, std::map<std::string, int64_t>> free;  // node -> resource -> free
  for (const std::string& text : fake_->Objects("nodes")) {
    rapidjson::Document node;
    node.Parse(text.c_str());
    const rapidjson::Value* meta = Member(node, "metadata");
    const rapidjson::Value* status = Member(node, "status");
    const rapidjson::Value* alloc = status ? Member(*status, "allocatable") : nullptr;
    const rapidjson::Value* name = meta ? Member(*meta, "name") : nullptr;
    if (name == nullptr || !name->IsString()) continue;
    auto& f = free[name->GetString()];
    if (alloc == nullptr || !alloc->IsObject()) continue;
    for (const auto& m : alloc->GetObject()) {
      int64_t n = 0;
      if (m.value.IsString() && absl::SimpleAtoi(m.value.GetString(), &n)) f[m.name.GetString()] = n;
    }
  }
  for (const PodView& p : fake_->Pods()) {
    if (p.node.empty() || p.phase == "Succeeded" || p.phase == "Failed") continue;
    auto node = free.find(p.node);
    if (node == free.end()) continue;
    for (const auto& [resource, quantity] : p.requests) {
      int64_t n = 0;
      if (absl::SimpleAtoi(quantity, &n)) node->second[resource] -= n;
    }
  }
  std::vector<std::string> out;
  for (const std::string& n : nodes_) {
    if (IsDraNode(n)) {
      if (dra_fits(n)) out.push_back(n);
      continue;
    }
    auto node = free.find(n);
    if (node == free.end()) continue;
    bool fits = true;
    for (const auto& [resource, amount] : wanted) {
      auto it = node->second.find(resource);
      fits = fits && it != node->second.end() && it->second >= amount;
    }
    if (fits) out.push_back(n);
  }
  return out;
}

SchedulerClients::Outcome SchedulerClients::Attempt(Client& client, const std::string& key) {
  const size_t slash = key.find('/');
  const std::string ns = key.substr(0, slash);
  const std::string name = key.substr(slash + 1);
  std::optional<std::string> stored = fake_->Get("pods", ns, name);
  if (!stored) return Outcome::kGone;
  rapidjson::Document pod;
  pod.Parse(stored->c_str());
  const rapidjson::Value* spec = Member(pod, "spec");
  const rapidjson::Value* node_name = spec ? Member(*spec, "nodeName") : nullptr;
  if (node_name != nullptr && node_name->IsString() && node_name->GetStringLength() > 0) {
    return Outcome::kBound;  // bound (by an earlier attempt whose answer was lost, perhaps)
  }
  const rapidjson::Value* meta = Member(pod, "metadata");
  const std::string uid = meta != nullptr ? json::Str(*meta, "uid") : "";
  // An informer's copy carries no kind/apiVersion (PROTOCOL.md §1).
  pod.RemoveMember("kind");
  pod.RemoveMember("apiVersion");
  const std::string pod_json = json::Serialize(pod);

  const int port = endpoint_();
  if (port < 0) {
    Count(&SchedulerCounters::extender_errors);
    return Outcome::kRetry;
  }
  httplib::Client* http = client.For(port);
  std::vector<std::string> candidates = Candidates(client, ns, name, pod_json);
  if (candidates.empty()) {
    Count(&SchedulerCounters::unschedulable);
    return Outcome::kUnschedulable;
  }

  // Any status but 200 is an error and its body is not read (PROTOCOL.md §0.4).
  auto post = [&](const char* verb, const std::string& body, rapidjson::Document* answer) {
    httplib::Result r = PostJson(*http, verb, body);
    return r && r->status == 200 && !answer->Parse(r->body.c_str()).HasParseError();
  };
  auto has_error = [](const rapidjson::Document& answer) {
    return !answer.IsObject() || !json::Str(answer, "Error").empty();
  };
  auto args = [&](const std::vector<std::string>& nodes) {
    return absl::StrCat(R"({"Pod":)", pod_json, R"(,"Nodes":null,"NodeNames":)", NameList(nodes), "}");
  };

  Count(&SchedulerCounters::filter);
  rapidjson::Document fd;
  if (!post("/filter", args(candidates), &fd) || has_error(fd)) {
    Count(&SchedulerCounters::extender_errors);
    return Outcome::kRetry;
  }
  std::vector<std::string> passing;
  if (const rapidjson::Value* names = Member(fd, "NodeNames"); names != nullptr && names->IsArray()) {
    for (const auto& n : names->GetArray()) {
      if (n.IsString()) passing.push_back(n.GetString());
    }
  }
  if (passing.empty()) {
    Count(&SchedulerCounters::unschedulable);
    return Outcome::kUnschedulable;
  }

  Count(&SchedulerCounters::prioritize);
  rapidjson::Document pd;
  if (!post("/prioritize", args(passing), &pd) || !pd.IsArray()) {
    Count(&SchedulerCounters::extender_errors);
    return Outcome::kRetry;
  }
  std::vector<std::string> best;
  int64_t best_score = -1;
  for (const auto& s : pd.GetArray()) {
    const rapidjson::Value* host = Member(s, "Host");
    const rapidjson::Value* score = Member(s, "Score");
    if (host == nullptr || !host->IsString() || score == nullptr || !score->IsInt64()) continue;
    if (score->GetInt64() > best_score) {
      best_score = score->GetInt64();
      best.clear();
    }
    if (score->GetInt64() == best_score) best.push_back(host->GetString());
  }
  if (best.empty()) best = passing;  // kube-scheduler would still pick among the feasible
  const std::string& chosen = best[client.rng() % best.size()];

  std::string claim;  // the extended-resource claim PreBind wrote (DRA nodes)
  if (IsDraNode(chosen)) {
    absl::StatusOr<DraTestAllocator::Outcome> o;
    {
      absl::MutexLock lock(&allocate_mu_);
      o = dra_.allocator->AllocateAndPreBind(ns, name, chosen);
    }
    if (!o.ok()) {
      Count(&SchedulerCounters::dra_prebind_failed);
      return Outcome::kRetry;
    }
    claim = o->claim_name;
  }

  Count(&SchedulerCounters::bind);
  bind_calls_.fetch_add(1);
  rapidjson::Document bd;
  if (!post("/bind",
            absl::StrCat(R"({"PodName":)", Quote(name), R"(,"PodNamespace":)", Quote(ns),
                         R"(,"PodUID":)", Quote(uid), R"(,"Node":)", Quote(chosen), "}"),
            &bd)) {
    Count(&SchedulerCounters::extender_errors);
    Unreserve(ns, claim);
    return Outcome::kRetry;
  }
  if (has_error(bd)) {
    Count(&SchedulerCounters::bind_errors);
    Unreserve(ns, claim);
    return Outcome::kRetry;
  }
  Count(&SchedulerCounters::bound);
  return Outcome::kBound;
}

}  // namespace gse::testing
