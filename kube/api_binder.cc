// ApiBinder: see api_binder.h. Wire format: shared/protocol/kube-api-1.26/binding-*.json.
#include "kube/api_binder.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/json_reader.h"

namespace gse {
namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void Str(JsonWriter& w, const std::string& s) {
  w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
}

std::string BindingPath(const BindTarget& t) {
  return absl::StrCat("/api/v1/namespaces/", t.pod_namespace, "/pods/", t.pod_name, "/binding");
}

// Retrying cannot change these answers.
bool Definitive(int http_code) {
  return http_code == 400 || http_code == 401 || http_code == 403 || http_code == 404 ||
         http_code == 409 || http_code == 422;
}

}  // namespace

ApiBinder::ApiBinder(KubeClient* client, ApiBinderOptions options)
    : client_(client), options_(options) {}

std::string ApiBinder::BindingBody(const BindTarget& target,
                                   const std::map<std::string, std::string>& annotations) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("apiVersion");
  w.String("v1");
  w.Key("kind");
  w.String("Binding");
  w.Key("metadata");
  w.StartObject();
  w.Key("name");
  Str(w, target.pod_name);
  w.Key("namespace");
  Str(w, target.pod_namespace);
  if (!target.pod_uid.empty()) {
    // Precondition: the API server refuses (409) when the pod's UID differs.
    w.Key("uid");
    Str(w, target.pod_uid);
  }
  if (!annotations.empty()) {
    w.Key("annotations");
    w.StartObject();
    for (const auto& [k, v] : annotations) {
      Str(w, k);
      Str(w, v);
    }
    w.EndObject();
  }
  w.EndObject();
  w.Key("target");
  w.StartObject();
  w.Key("apiVersion");
  w.String("v1");
  w.Key("kind");
  w.String("Node");
  w.Key("name");
  Str(w, target.node);
  w.EndObject();
  w.EndObject();
  return buf.GetString();
}

BindOutcome ApiBinder::ReadBack(const BindTarget& target,
                               const std::map<std::string, std::string>& annotations,
                               absl::Duration timeout, bool unanswered) {
  absl::StatusOr<std::string> body = client_->GetWithTimeout(
      absl::StrCat("/api/v1/namespaces/", target.pod_namespace, "/pods/", target.pod_name),
      timeout);
  if (!body.ok()) {
    get_errors_.fetch_add(1);
    // 404: no pod of that name exists, so ours is bound nowhere. Anything else tells nothing.
    return KubeErrorOf(body.status()).http_code == 404 ? BindOutcome::kNotBound
                                                      : BindOutcome::kUnknown;
  }
  rapidjson::Document doc;
  if (!ParseJsonLimited(*body, doc).ok() || !doc.IsObject()) return BindOutcome::kUnknown;
  auto member = [](const rapidjson::Value& v, const char* key) -> const rapidjson::Value* {
    if (!v.IsObject()) return nullptr;
    auto it = v.FindMember(key);
    return it == v.MemberEnd() ? nullptr : &it->value;
  };
  const rapidjson::Value* meta = member(doc, "metadata");
  const rapidjson::Value* spec = member(doc, "spec");
  if (meta == nullptr || spec == nullptr) return BindOutcome::kUnknown;
  const rapidjson::Value* uid = member(*meta, "uid");
  if (uid == nullptr || !uid->IsString()) return BindOutcome::kUnknown;
  // Another pod of the same name: ours was deleted, so it is bound nowhere.
  if (!target.pod_uid.empty() && target.pod_uid != uid->GetString()) return BindOutcome::kNotBound;
  const rapidjson::Value* node = member(*spec, "nodeName");
  const bool unbound = node == nullptr || (node->IsString() && node->GetStringLength() == 0);
  // Bound to another node: a binding cannot move a bound pod, so no POST of ours committed or
  // ever will. Still pending: none committed so far; but a POST that got no answer may still
  // be inside the API server and commit later, so only answered attempts make that final.
  if (node != nullptr && node->IsString() && !unbound && target.node != node->GetString()) {
    return BindOutcome::kNotBound;
  }
  if (unbound) return unanswered ? BindOutcome::kUnknown : BindOutcome::kNotBound;
  if (!node->IsString()) return BindOutcome::kUnknown;
  const rapidjson::Value* ann = member(*meta, "annotations");
  for (const auto& [k, v] : annotations) {
    const rapidjson::Value* got = ann == nullptr ? nullptr : member(*ann, k.c_str());
    // On this node with other units (another binding of the same pod): which units it uses is
    // the watch's to tell; this call's holding is neither confirmed nor freed.
    if (got == nullptr || !got->IsString() || v != got->GetString()) return BindOutcome::kUnknown;
  }
  return BindOutcome::kBound;
}

BindResult ApiBinder::Bind(const BindTarget& target,
                           const std::map<std::string, std::string>& annotations) {
  const std::string path = BindingPath(target);
  const std::string body = BindingBody(target, annotations);
  const absl::Time deadline = absl::Now() + options_.deadline;
  // The write limiter may hold a POST only while it can still be answered in time.
  // Fencing: the lease is checked right before each POST goes out (after the limiter's turn).
  const WriteDeadline within{deadline - std::min(options_.send_margin, options_.deadline / 4),
                             deadline, options_.lease_valid};
  bool ambiguous = false;  // an attempt may have committed without us hearing the answer
  bool unanswered = false;  // an attempt got no answer at all: it may still be in flight
  absl::Status last = absl::DeadlineExceededError("no attempt made");
  absl::Status last_answer;  // the last answer the API server itself gave (an HTTP status)
  int attempt = 0;
  // The last error, saying how many attempts it took; the API's reason and message stay
  // readable through KubeErrorOf.
  // When a later attempt only failed in transport, the server's last answer is reported (and
  // the transport failure named): a final attempt cut short by the deadline says less.
  auto described = [&](absl::string_view suffix) {
    absl::Status shown = last;
    std::string tail;
    if (!last_answer.ok() && KubeErrorOf(last).http_code == 0) {
      tail = absl::StrCat("; the last attempt: ", last.message());
      shown = last_answer;
    }
    absl::Status out(shown.code(), absl::StrCat(shown.message(), " (", attempt, " attempt",
                                                attempt == 1 ? "" : "s", " within ",
                                                absl::FormatDuration(options_.deadline), tail,
                                                ")", suffix));
    shown.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
    return out;
  };
  // The pod itself says whether an attempt committed. Without an ambiguous attempt none of
  // ours can have (every answer was a refusal), so "cannot tell" is then "not bound" too.
  auto settle_by_reading = [&](absl::Duration timeout) {
    switch (ReadBack(target, annotations, timeout, unanswered)) {
      case BindOutcome::kBound:
        confirmed_by_read_.fetch_add(1);
        return BindResult::Bound();
      case BindOutcome::kNotBound:
        return BindResult::NotBound(described(""));
      case BindOutcome::kUnknown:
        break;
    }
    if (!ambiguous) return BindResult::NotBound(described(""));
    return BindResult::Unknown(described("; whether the pod is bound is unknown"));
  };
  // Set when a POST was kept back because this replica's Lease is no longer valid.
  absl::Status fenced;
  auto fenced_status = [&](const absl::Status& from_client) {
    std::string earlier;
    if (attempt > 0) {
      earlier = absl::StrCat("; after ", attempt, " attempt", attempt == 1 ? "" : "s",
                             ", the last: ", last.message());
    }
    absl::Status out(from_client.code(),
                     absl::StrCat("binding POST not sent: this replica's leader Lease is no "
                                  "longer valid on its own clock (no renewal succeeded within "
                                  "--leader-elect-renew-deadline, or it stepped down), so "
                                  "another replica may lead",
                                  earlier));
    from_client.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
    return out;
  };
  while (true) {
    absl::Duration remaining = deadline - absl::Now();
    if (remaining <= absl::Milliseconds(10)) break;
    absl::StatusOr<std::string> r = client_->PostWithin(
        path, body, std::min(options_.attempt_timeout, remaining), within);
    if (IsNotSent(r.status())) {
      // burst (issue 14): the write limiter had no turn for this POST before the bind's
      // deadline, so this attempt sent nothing. With no earlier attempt the pod is definitely
      // not bound (no POST was sent): answered at once, kube-scheduler retries the pod. Not an
      // API error. (For the tri-state Binder result this is "not bound".)
      not_sent_.fetch_add(1);
      if (attempt == 0) return BindResult::NotBound(r.status());
      break;  // earlier attempts decide below: ambiguous ones are read back, others failed
    }
    if (IsFenced(r.status())) {
      // issue 12: a leader that lost (or may have lost) the Lease sends no binding that could
      // commit after the next leader's relist. Nothing was sent for this attempt.
      lease_lost_.fetch_add(1);
      fenced = fenced_status(r.status());
      if (attempt == 0) return BindResult::NotBound(fenced);
      break;  // earlier attempts decide below
    }
    ++attempt;
    attempts_.fetch_add(1);
    if (r.ok()) return BindResult::Bound();
    bind_errors_.fetch_add(1);
    last = r.status();
    KubeError e = KubeErrorOf(last);
    if (e.http_code != 0) last_answer = last;
    const bool already_assigned =
        e.http_code == 409 && (ambiguous || attempt > 1 ||
                               e.message.find("already assigned") != std::string::npos);
    if (already_assigned || (Definitive(e.http_code) && ambiguous)) {
      // "already assigned": possibly by our own earlier attempt (or an earlier bind of
      // kube-scheduler's retry). Any other refusal after an ambiguous attempt says nothing
      // about that attempt either.
      remaining = deadline - absl::Now();
      return settle_by_reading(
          std::max(absl::Milliseconds(100), std::min(options_.attempt_timeout, remaining)));
    }
    if (Definitive(e.http_code)) return BindResult::NotBound(described(""));
    // Transport errors and 5xx: the request may or may not have been applied; 429: it was not.
    ambiguous = ambiguous || e.http_code == 0 || e.http_code >= 500;
    unanswered = unanswered || e.http_code == 0;
    absl::Duration pause = options_.retry_backoff * attempt;
    if (e.retry_after > pause) {
      // The server's Retry-After (429 from kube-apiserver's flow control): wait as asked, or,
      // when the wait would end after the last moment a POST may go out, end the bind now so
      // that kube-scheduler retries it sooner.
      if (absl::Now() + e.retry_after > within.send_by) break;
      pause = e.retry_after;
    }
    pause = std::min(pause, deadline - absl::Now());
    if (pause > absl::ZeroDuration()) absl::SleepFor(pause);
  }
  if (!fenced.ok()) {
    // Earlier attempts were all refused, or the read-back shows none committed: not bound,
    // and the reason the bind stopped is the lost Lease.
    if (!ambiguous) return BindResult::NotBound(fenced);
    BindResult read = settle_by_reading(absl::Milliseconds(500));
    return read.outcome == BindOutcome::kNotBound ? BindResult::NotBound(fenced) : read;
  }
  if (!ambiguous) return BindResult::NotBound(described(""));  // nothing of ours was applied
  return settle_by_reading(absl::Milliseconds(500));
}

}  // namespace gse
