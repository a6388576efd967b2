// LeaderElector: see leader_election.h. Wire format: shared/protocol/kube-api-1.26/lease-*.json.
#include "kube/leader_election.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/json_reader.h"

namespace gse {
namespace {

std::string Str(const rapidjson::Value& obj, const char* key) {
  if (!obj.IsObject()) return "";
  auto it = obj.FindMember(key);
  return it != obj.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}

int64_t Int(const rapidjson::Value& obj, const char* key) {
  if (!obj.IsObject()) return 0;
  auto it = obj.FindMember(key);
  return it != obj.MemberEnd() && it->value.IsInt64() ? it->value.GetInt64() : 0;
}

std::string Serialize(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return buf.GetString();
}

int64_t LeaseSeconds(absl::Duration d) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(d))));
}

}  // namespace

std::string FormatMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

std::string DefaultIdentity() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "unknown-host");
  }
  std::random_device random;
  return absl::StrFormat("%s_%08x%08x", host, random(), random());
}

absl::Status ValidateLeaderElectionOptions(const LeaderElectionOptions& o) {
  if (o.lease_name.empty()) {
    return absl::InvalidArgumentError("--leader-elect-resource-name: must not be empty");
  }
  if (o.lease_namespace.empty()) {
    return absl::InvalidArgumentError("--leader-elect-resource-namespace: must not be empty");
  }
  if (o.retry_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--leader-elect-retry-period: must be positive");
  }
  if (o.renew_deadline <= o.retry_period) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--leader-elect-renew-deadline (", absl::FormatDuration(o.renew_deadline),
        ") must be greater than --leader-elect-retry-period (",
        absl::FormatDuration(o.retry_period), ")"));
  }
  if (o.lease_duration <= o.renew_deadline) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--leader-elect-lease-duration (", absl::FormatDuration(o.lease_duration),
        ") must be greater than --leader-elect-renew-deadline (",
        absl::FormatDuration(o.renew_deadline), ")"));
  }
  return absl::OkStatus();
}

LeaderElector::LeaderElector(KubeClient* client, LeaderElectionOptions options)
    : client_(client),
      options_(std::move(options)),
      identity_(options_.identity.empty() ? DefaultIdentity() : options_.identity) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool LeaderElector::IsLeader() const {
  absl::MutexLock lock(&mu_);
  return leading_;
}

bool LeaderElector::LeaseValid() const {
  // Fencing hot path (every binding POST): one relaxed-enough load, no lock.
  return absl::ToUnixNanos(absl::Now()) < valid_until_ns_.load(std::memory_order_acquire);
}

absl::Time LeaderElector::lease_valid_until() const {
  const int64_t ns = valid_until_ns_.load(std::memory_order_acquire);
  return ns == INT64_MIN ? absl::InfinitePast() : absl::FromUnixNanos(ns);
}

void LeaderElector::SetValidUntil(absl::Time until) {
  valid_until_ns_.store(until == absl::InfinitePast() ? INT64_MIN : absl::ToUnixNanos(until),
                        std::memory_order_release);
}

int64_t LeaderElector::acquisitions() const {
  absl::MutexLock lock(&mu_);
  return stats_.acquisitions;
}

LeadershipStats LeaderElector::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

std::string LeaderElector::holder() const {
  absl::MutexLock lock(&mu_);
  return holder_;
}

void LeaderElector::Log(const std::string& event, const std::string& detail) const {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  w.Key("ts");
  w.String(ts.c_str());
  w.Key("component");
  w.String("leader_election");
  w.Key("event");
  w.String(event.c_str());
  w.Key("identity");
  w.String(identity_.c_str());
  w.Key("lease");
  std::string lease = absl::StrCat(options_.lease_namespace, "/", options_.lease_name);
  w.String(lease.c_str());
  if (!detail.empty()) {
    w.Key("detail");
    w.String(detail.c_str());
  }
  w.EndObject();
  if (options_.log) {
    options_.log(buf.GetString());
  } else {
    std::fprintf(stderr, "%s\n", buf.GetString());
  }
}

std::string LeaderElector::LeasePath(bool collection) const {
  std::string base = absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/",
                                  options_.lease_namespace, "/leases");
  return collection ? base : absl::StrCat(base, "/", options_.lease_name);
}

absl::Duration LeaderElector::CallTimeout() const {
  // Short enough that a hung call cannot keep a leader from noticing its renew deadline.
  return std::max(absl::Milliseconds(100),
                  std::min(options_.retry_period, options_.renew_deadline / 2));
}

void LeaderElector::SetLeading(bool leading) {
  // Fencing: a replica that stops leading stops writing as the leader before anyone is told.
  if (!leading) SetValidUntil(absl::InfinitePast());
  std::string detail;
  {
    absl::MutexLock lock(&mu_);
    if (leading_ == leading) return;
    leading_ = leading;
    if (leading) {
      ++stats_.acquisitions;
      if (pending_leaderless_ >= absl::ZeroDuration()) {
        stats_.leaderless_total += pending_leaderless_;
        stats_.last_leaderless = pending_leaderless_;
        ++stats_.leaderless_measured;
        detail = absl::StrCat("leaderless at most ", absl::FormatDuration(pending_leaderless_));
      }
    } else {
      ++stats_.losses;
    }
  }
  pending_leaderless_ = -absl::InfiniteDuration();
  Log(leading ? "became_leader" : "stopped_leading", detail);
  if (options_.on_change) options_.on_change(leading);
}

void LeaderElector::SetHolder(const std::string& holder) {
  {
    absl::MutexLock lock(&mu_);
    if (holder_ == holder) return;
    holder_ = holder;
  }
  if (options_.on_holder) options_.on_holder(holder);
}

LeaderElector::Outcome LeaderElector::TryAcquireOrRenew(bool leading) {
  const absl::Time now = absl::Now();
  const absl::Time previous_poll = last_poll_;
  last_poll_ = now;
  others_expiry_ = absl::InfiniteFuture();
  const std::string now_text = FormatMicroTime(now);
  absl::StatusOr<std::string> got = client_->GetWithTimeout(LeasePath(false), CallTimeout());
  if (!got.ok()) {
    if (KubeErrorOf(got.status()).http_code != 404) {
      lease_errors_.fetch_add(1);
      Log("lease_get_failed", std::string(got.status().message()));
      return Outcome::kFailed;
    }
    std::string body = absl::StrFormat(
        R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"%s","namespace":"%s"},)"
        R"("spec":{"holderIdentity":"%s","leaseDurationSeconds":%d,"acquireTime":"%s","renewTime":"%s","leaseTransitions":0}})",
        options_.lease_name, options_.lease_namespace, identity_,
        LeaseSeconds(options_.lease_duration), now_text, now_text);
    absl::StatusOr<std::string> created = client_->PostWithTimeout(LeasePath(true), body, CallTimeout());
    if (!created.ok()) {
      // Another elector creating it first is the race the next round settles, not a failure.
      if (created.status().code() != absl::StatusCode::kAlreadyExists) lease_errors_.fetch_add(1);
      Log("lease_create_failed", std::string(created.status().message()));
      return Outcome::kFailed;
    }
    observed_record_.clear();
    last_write_start_ = now;
    // No record to replace: nobody led before (or the Lease was deleted); nothing to measure.
    SetHolder(identity_);
    return Outcome::kHeld;
  }
  rapidjson::Document doc;
  if (!ParseJsonLimited(*got, doc).ok() || !doc.IsObject() || !doc.HasMember("metadata")) {
    lease_errors_.fetch_add(1);
    Log("lease_get_failed", "not a Lease object");
    return Outcome::kFailed;
  }
  if (!doc.HasMember("spec") || !doc["spec"].IsObject()) {
    doc.AddMember("spec", rapidjson::Value(rapidjson::kObjectType), doc.GetAllocator());
  }
  rapidjson::Value& spec = doc["spec"];
  const std::string holder = Str(spec, "holderIdentity");
  const std::string renew = Str(spec, "renewTime");
  int64_t duration_s = Int(spec, "leaseDurationSeconds");
  const std::string record = absl::StrCat(holder, "|", renew, "|", duration_s, "|",
                                          Str(doc["metadata"], "resourceVersion"));
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = now;
    observed_after_ = previous_poll;  // the record changed after our previous look
  }
  absl::Duration duration = duration_s > 0 ? absl::Seconds(duration_s) : options_.lease_duration;
  if (!holder.empty() && holder != identity_ && now < observed_at_ + duration) {
    others_expiry_ = observed_at_ + duration;
    SetHolder(holder);
    return Outcome::kHeldByOther;
  }
  // Free, expired on our clock, or ours.
  if (holder != identity_ || !leading) SetHolder("");
  auto& alloc = doc.GetAllocator();
  auto set = [&](const char* key, rapidjson::Value v) {
    if (spec.HasMember(key)) {
      spec[key] = v;
    } else {
      spec.AddMember(rapidjson::Value(key, alloc), v, alloc);
    }
  };
  int64_t transitions = Int(spec, "leaseTransitions");
  if (holder != identity_) {
    set("acquireTime", rapidjson::Value(now_text.c_str(), alloc));
    // As client-go: every change of holder (a released lease included) is a transition.
    set("leaseTransitions", rapidjson::Value(transitions + 1));
  }
  set("holderIdentity", rapidjson::Value(identity_.c_str(), alloc));
  set("leaseDurationSeconds", rapidjson::Value(LeaseSeconds(options_.lease_duration)));
  set("renewTime", rapidjson::Value(now_text.c_str(), alloc));
  // metadata.resourceVersion stays as read: the update is conditional on it (409 otherwise).
  absl::StatusOr<std::string> put = client_->PutWithTimeout(LeasePath(false), Serialize(doc), CallTimeout());
  if (!put.ok()) {
    // 409: another elector updated the lease since we read it (the race elections settle).
    if (KubeErrorOf(put.status()).http_code != 409) lease_errors_.fetch_add(1);
    if (KubeErrorOf(put.status()).http_code != 409 || leading) {
      Log(leading ? "lease_renew_failed" : "lease_acquire_failed", std::string(put.status().message()));
    }
    return Outcome::kFailed;
  }
  if (!leading && holder != identity_ && observed_after_ != absl::InfinitePast()) {
    // We replaced another holder's record (expired or released) whose last change we saw
    // happen between two of our polls: it was written after observed_after_.
    pending_leaderless_ = absl::Now() - observed_after_;
  }
  last_write_start_ = now;
  SetHolder(identity_);
  return Outcome::kHeld;
}

void LeaderElector::Release() {
  absl::StatusOr<std::string> got = client_->GetWithTimeout(LeasePath(false), CallTimeout());
  if (!got.ok()) {
    lease_errors_.fetch_add(1);
    return;
  }
  rapidjson::Document doc;
  if (!ParseJsonLimited(*got, doc).ok() || !doc.IsObject() || !doc.HasMember("spec") || !doc["spec"].IsObject()) return;
  rapidjson::Value& spec = doc["spec"];
  if (Str(spec, "holderIdentity") != identity_) return;
  auto& alloc = doc.GetAllocator();
  spec["holderIdentity"] = rapidjson::Value("", alloc);
  std::string now_text = FormatMicroTime(absl::Now());
  if (spec.HasMember("renewTime")) spec["renewTime"] = rapidjson::Value(now_text.c_str(), alloc);
  if (spec.HasMember("leaseDurationSeconds")) spec["leaseDurationSeconds"] = 1;
  absl::StatusOr<std::string> put = client_->PutWithTimeout(LeasePath(false), Serialize(doc), CallTimeout());
  if (!put.ok()) lease_errors_.fetch_add(1);
  Log(put.ok() ? "released" : "release_failed", put.ok() ? "" : std::string(put.status().message()));
}

void LeaderElector::Run() {
  // Not absl's BitGen: it seeds from a pool inside Debian's uninstrumented Abseil, which
  // ThreadSanitizer reports as a race when two electors start at once.
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(1.0, 1.2);
  absl::Time last_renew = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    bool leading = IsLeader();
    if (leading && absl::Now() - last_renew >= options_.renew_deadline) {
      SetLeading(false);  // renewals kept failing: step down before the lease can expire
      SetHolder("");      // and who leads next is not known until a read succeeds
      leading = false;
    }
    Outcome outcome = TryAcquireOrRenew(leading);
    absl::Time now = absl::Now();
    if (outcome == Outcome::kHeld) {
      // Measured from the write's start (its renewTime), not from its answer: a follower
      // counts from when it saw the write, which is later, so this replica's renew deadline
      // (and its fencing, LeaseValid) ends before any follower may take over.
      last_renew = last_write_start_;
      SetValidUntil(last_renew + options_.renew_deadline);
      SetLeading(true);
    } else if (leading) {
      if (outcome == Outcome::kHeldByOther) {
        SetLeading(false);  // someone else holds it: stop deciding at once
      } else if (now - last_renew >= options_.renew_deadline) {
        SetLeading(false);
        SetHolder("");
      }
    }
    // client-go jitters acquisition attempts (factor 1.2); renewals run on the period.
    absl::Duration wait = IsLeader() ? options_.retry_period
                                     : options_.retry_period * jitter(rng);
    if (!IsLeader() && others_expiry_ != absl::InfiniteFuture()) {
      // Another holder's record expires on our clock before the next period would end: look
      // again right then instead of up to 1.2 retry periods later (what made a take-over after
      // a crash last up to lease duration + 2 x 1.2 retry periods).
      wait = std::min(wait, std::max(absl::Milliseconds(1),
                                     others_expiry_ - absl::Now() + absl::Milliseconds(1)));
    }
    if (IsLeader()) {
      // Wake in time to step down exactly at the renew deadline if renewals keep failing.
      wait = std::min(wait, std::max(absl::Milliseconds(1),
                                     last_renew + options_.renew_deadline - absl::Now()));
    }
    // Sleep in short steps so Stop() is prompt (timed absl waits are not visible to TSan with
    // Debian's uninstrumented Abseil, see cmake/tsan_absl_sync.cc).
    for (absl::Time until = absl::Now() + wait; absl::Now() < until;) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
      }
      absl::SleepFor(std::min(absl::Milliseconds(5), until - absl::Now()));
    }
  }
  if (IsLeader()) {
    // No write as the leader may go out once the release can let a follower in.
    SetValidUntil(absl::InfinitePast());
    if (options_.release_on_stop) Release();
    SetLeading(false);
    SetHolder("");
  }
}

}  // namespace gse
