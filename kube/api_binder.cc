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

bool ApiBinder::BoundAsRequested(const BindTarget& target,
                                 const std::map<std::string, std::string>& annotations,
                                 absl::Duration timeout) {
  absl::StatusOr<std::string> body = client_->GetWithTimeout(
      absl::StrCat("/api/v1/namespaces/", target.pod_namespace, "/pods/", target.pod_name),
      timeout);
  if (!body.ok()) {
    get_errors_.fetch_add(1);
    return false;
  }
  rapidjson::Document doc;
  if (!ParseJsonLimited(*body, doc).ok() || !doc.IsObject()) return false;
  auto member = [](const rapidjson::Value& v, const char* key) -> const rapidjson::Value* {
    if (!v.IsObject()) return nullptr;
    auto it = v.FindMember(key);
    return it == v.MemberEnd() ? nullptr : &it->value;
  };
  const rapidjson::Value* meta = member(doc, "metadata");
  const rapidjson::Value* spec = member(doc, "spec");
  if (meta == nullptr || spec == nullptr) return false;
  const rapidjson::Value* uid = member(*meta, "uid");
  if (!target.pod_uid.empty() && (uid == nullptr || !uid->IsString() || target.pod_uid != uid->GetString())) {
    return false;
  }
  const rapidjson::Value* node = member(*spec, "nodeName");
  if (node == nullptr || !node->IsString() || target.node != node->GetString()) return false;
  const rapidjson::Value* ann = member(*meta, "annotations");
  for (const auto& [k, v] : annotations) {
    const rapidjson::Value* got = ann == nullptr ? nullptr : member(*ann, k.c_str());
    if (got == nullptr || !got->IsString() || v != got->GetString()) return false;
  }
  return true;
}

absl::Status ApiBinder::Bind(const BindTarget& target,
                             const std::map<std::string, std::string>& annotations) {
  const std::string path = BindingPath(target);
  const std::string body = BindingBody(target, annotations);
  const absl::Time deadline = absl::Now() + options_.deadline;
  // The write limiter may hold a POST only while it can still be answered in time.
  const WriteDeadline within{deadline - std::min(options_.send_margin, options_.deadline / 4),
                             deadline};
  bool ambiguous = false;  // an attempt may have committed without us hearing the answer
  absl::Status last = absl::DeadlineExceededError("no attempt made");
  // The last answer the API server itself gave (an HTTP status), kept for the error: a final
  // attempt cut short by the deadline ("Read" timeout) says less than the 500 before it.
  absl::Status last_answer;
  int attempt = 0;
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
      if (attempt == 0) return r.status();
      break;  // earlier attempts decide below: ambiguous ones are read back, others failed
    }
    ++attempt;
    attempts_.fetch_add(1);
    if (r.ok()) return absl::OkStatus();
    bind_errors_.fetch_add(1);
    last = r.status();
    KubeError e = KubeErrorOf(last);
    if (e.http_code != 0) last_answer = last;
    if (e.http_code == 409 && (ambiguous || attempt > 1 || e.message.find("already assigned") != std::string::npos)) {
      // "already assigned": possibly by our own earlier attempt (or an earlier bind of
      // kube-scheduler's retry): the pod itself says whether it holds what we asked.
      remaining = deadline - absl::Now();
      if (BoundAsRequested(target, annotations,
                           std::max(absl::Milliseconds(100), std::min(options_.attempt_timeout, remaining)))) {
        confirmed_by_read_.fetch_add(1);
        return absl::OkStatus();
      }
    }
    if (Definitive(e.http_code)) return last;
    // Transport errors, 5xx and 429: the request may or may not have been applied (429: not).
    ambiguous = ambiguous || e.http_code == 0 || e.http_code >= 500;
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
  if (ambiguous && BoundAsRequested(target, annotations, absl::Milliseconds(500))) {
    confirmed_by_read_.fetch_add(1);
    return absl::OkStatus();
  }
  // Report the server's last answer when a later attempt only failed in transport, and say so.
  std::string tail;
  if (!last_answer.ok() && KubeErrorOf(last).http_code == 0) {
    tail = absl::StrCat("; the last attempt: ", last.message());
    last = last_answer;
  }
  absl::Status out(last.code(), absl::StrCat(last.message(), " (", attempt, " attempt",
                                             attempt == 1 ? "" : "s", " within ",
                                             absl::FormatDuration(options_.deadline), tail, ")"));
  // Keep the API's reason and message readable through KubeErrorOf.
  last.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace gse
