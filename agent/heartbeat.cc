// Heartbeat: see heartbeat.h. Wire format: shared/protocol/kube-api-1.26/lease-*.json.
#include "agent/heartbeat.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/agent_log.h"
#include "kube/agent_leases.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::agent {
namespace {

std::string Serialize(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return buf.GetString();
}

}  // namespace

Heartbeat::Heartbeat(KubeClient* client, HeartbeatOptions options)
    : client_(client), options_(std::move(options)) {}

Heartbeat::~Heartbeat() { Stop(); }

std::string Heartbeat::Path(bool collection) const {
  const std::string base = absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/",
                                        options_.lease_namespace, "/leases");
  return collection ? base : absl::StrCat(base, "/", AgentLeaseName(options_.node));
}

absl::Status Heartbeat::RenewOnce() {
  const std::string holder = options_.holder.empty() ? options_.node : options_.holder;
  const int64_t duration_s = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(3 * absl::ToDoubleSeconds(options_.interval))));
  const absl::Duration timeout = std::clamp(options_.interval / 2, absl::Seconds(1), absl::Seconds(10));
  absl::Status last;
  // The Lease our last write returned, if any: renewing from it saves the GET (one request
  // per renewal instead of two); a 409 says someone else wrote it, and the next attempt reads.
  std::string cached;
  {
    absl::MutexLock lock(&mu_);
    cached = std::move(last_written_);
    last_written_.clear();
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string now = FormatLeaseTime(absl::Now());
    absl::StatusOr<std::string> got =
        attempt == 0 && !cached.empty() ? absl::StatusOr<std::string>(cached)
                                        : client_->GetWithTimeout(Path(false), timeout);
    if (!got.ok() && KubeErrorOf(got.status()).http_code == 404) {
      rapidjson::Document doc(rapidjson::kObjectType);
      auto& a = doc.GetAllocator();
      rapidjson::Value meta(rapidjson::kObjectType), spec(rapidjson::kObjectType);
      const std::string name = AgentLeaseName(options_.node);
      meta.AddMember("name", rapidjson::Value(name.c_str(), a), a);
      meta.AddMember("namespace", rapidjson::Value(options_.lease_namespace.c_str(), a), a);
      spec.AddMember("holderIdentity", rapidjson::Value(holder.c_str(), a), a);
      spec.AddMember("leaseDurationSeconds", rapidjson::Value(duration_s), a);
      spec.AddMember("acquireTime", rapidjson::Value(now.c_str(), a), a);
      spec.AddMember("renewTime", rapidjson::Value(now.c_str(), a), a);
      doc.AddMember("apiVersion", "coordination.k8s.io/v1", a);
      doc.AddMember("kind", "Lease", a);
      doc.AddMember("metadata", meta, a);
      doc.AddMember("spec", spec, a);
      absl::StatusOr<std::string> created = client_->PostWithTimeout(Path(true), Serialize(doc), timeout);
      if (created.ok()) {
        absl::MutexLock lock(&mu_);
        last_written_ = *std::move(created);
        return absl::OkStatus();
      }
      last = created.status();
      if (KubeErrorOf(last).http_code == 409) continue;  // created meanwhile: read it again
      return last;
    }
    if (!got.ok()) return got.status();
    rapidjson::Document doc;
    doc.Parse(got->c_str());
    if (doc.HasParseError() || !doc.IsObject()) {
      return absl::DataLossError(absl::StrCat("GET ", Path(false), ": not a Lease object"));
    }
    auto& a = doc.GetAllocator();
    if (!doc.HasMember("spec") || !doc["spec"].IsObject()) {
      doc.RemoveMember("spec");
      doc.AddMember("spec", rapidjson::Value(rapidjson::kObjectType), a);
    }
    rapidjson::Value& spec = doc["spec"];
    auto set = [&](const char* key, rapidjson::Value v) {
      if (spec.HasMember(key)) {
        spec[key] = v;
      } else {
        spec.AddMember(rapidjson::Value(key, a), v, a);
      }
    };
    set("holderIdentity", rapidjson::Value(holder.c_str(), a));
    set("leaseDurationSeconds", rapidjson::Value(duration_s));
    set("renewTime", rapidjson::Value(now.c_str(), a));
    // The read resourceVersion stays in metadata: the PUT is conditional on it.
    absl::StatusOr<std::string> put = client_->PutWithTimeout(Path(false), Serialize(doc), timeout);
    if (put.ok()) {
      absl::MutexLock lock(&mu_);
      last_written_ = *std::move(put);
      return absl::OkStatus();
    }
    last = put.status();
    if (KubeErrorOf(last).http_code != 409) return last;
  }
  return last;
}

void Heartbeat::Start() {
  if (options_.lease_namespace.empty() || thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void Heartbeat::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

HeartbeatCounters Heartbeat::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void Heartbeat::Run() {
  bool failing = false;
  while (true) {
    const absl::Time started = absl::Now();
    const absl::Status s = RenewOnce();
    {
      absl::MutexLock lock(&mu_);
      if (s.ok()) {
        ++counters_.renewals;
        counters_.last_renewal = started;
      } else {
        ++counters_.failures;
      }
    }
    // One line per change of outcome (a dead API server must not flood the log).
    if (!s.ok() && !failing) {
      LogEvent("heartbeat_failed", {{"node", options_.node},
                                    {"lease", absl::StrCat(options_.lease_namespace, "/",
                                                           AgentLeaseName(options_.node))},
                                    {"error", std::string(s.message())}});
    } else if (s.ok() && failing) {
      LogEvent("heartbeat_renewed", {{"node", options_.node}});
    }
    failing = !s.ok();
    // Sleeps in short steps so Stop is prompt; the next tick is `interval` after this one.
    const absl::Time next = started + options_.interval;
    while (absl::Now() < next) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      absl::SleepFor(std::min(absl::Milliseconds(20), next - absl::Now()));
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
  }
}

}  // namespace gse::agent
