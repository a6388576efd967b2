// DecisionLog: formatting with RapidJSON's Writer (which escapes quotes, backslashes and
// control characters) over strings made valid UTF-8 first (the Writer passes bytes through
// unchecked, and one invalid byte makes the whole line unparseable for a log collector).
#include "extender/decision_log.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <mutex>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/assignment.h"

ABSL_FLAG(gse::DecisionLogLevel, decision_log, gse::DecisionLogLevel::kAll,
          "one JSON line per bind decision on stderr (pod, project, offering, node, units, "
          "outcome, reason, latency): off | failures (every outcome but bound) | all");

namespace gse {
namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void String(JsonWriter& w, absl::string_view s) {
  const std::string valid = ValidUtf8(s);
  w.String(valid.data(), static_cast<rapidjson::SizeType>(valid.size()));
}

// Seconds with microsecond resolution; RapidJSON writes doubles in shortest form.
void Seconds(JsonWriter& w, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    w.Null();
    return;
  }
  w.Double(std::round(seconds * 1e6) / 1e6);
}

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

}  // namespace

bool AbslParseFlag(absl::string_view text, DecisionLogLevel* level, std::string* error) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "off") {
    *level = DecisionLogLevel::kOff;
  } else if (t == "failures") {
    *level = DecisionLogLevel::kFailures;
  } else if (t == "all") {
    *level = DecisionLogLevel::kAll;
  } else {
    *error = "want off, failures or all";
    return false;
  }
  return true;
}

std::string AbslUnparseFlag(DecisionLogLevel level) {
  switch (level) {
    case DecisionLogLevel::kOff: return "off";
    case DecisionLogLevel::kFailures: return "failures";
    case DecisionLogLevel::kAll: return "all";
  }
  return "all";
}

std::string ValidUtf8(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      out.append("\xEF\xBF\xBD");  // U+FFFD for this one byte; resynchronise at the next
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

DecisionLog::Sink FdSink(int fd) {
  return [fd](absl::string_view line) {
    // One mutex for all fd sinks of the process: two sinks on the same fd must not interleave.
    static std::mutex* const mu = new std::mutex;
    std::lock_guard<std::mutex> lock(*mu);
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;  // dropped: logging must not fail or block a bind
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  };
}

DecisionLog::DecisionLog(DecisionLogLevel level, Sink sink)
    : DecisionLog(std::optional<DecisionLogLevel>(level), std::move(sink)) {}

DecisionLog::DecisionLog(std::optional<DecisionLogLevel> level, Sink sink)
    : fixed_level_(level), sink_(std::move(sink)) {}

DecisionLog& DecisionLog::Default() {
  static DecisionLog* const log = new DecisionLog(std::nullopt, FdSink(STDERR_FILENO));
  return *log;
}

DecisionLogLevel DecisionLog::level() const {
  return fixed_level_.has_value() ? *fixed_level_ : absl::GetFlag(FLAGS_decision_log);
}

bool DecisionLog::Wants(absl::string_view outcome) const {
  switch (level()) {
    case DecisionLogLevel::kOff: return false;
    case DecisionLogLevel::kFailures: return outcome != "bound";
    case DecisionLogLevel::kAll: return true;
  }
  return true;
}

void DecisionLog::Log(const BindDecision& decision) const {
  if (!sink_ || !Wants(decision.outcome)) return;
  sink_(FormatLine(decision, absl::Now()));
}

void DecisionLog::Log(const FilterNotes& notes) const {
  if (!sink_ || notes.dra_notes.empty() || !Wants(kFilterNotesOutcome)) return;
  sink_(FormatLine(notes, absl::Now()));
}

namespace {

// The fields every line starts with, up to the pod's project.
void Head(JsonWriter& w, absl::Time now, const char* event, absl::string_view ns,
          absl::string_view name, absl::string_view uid, absl::string_view project) {
  w.Key("ts");
  String(w, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", now, absl::UTCTimeZone()));
  w.Key("component");
  w.String("extender");
  w.Key("event");
  w.String(event);
  w.Key("pod");
  String(w, ns.empty() && name.empty() ? std::string() : absl::StrCat(ns, "/", name));
  w.Key("uid");
  String(w, uid);
  w.Key("project");
  String(w, project);
}

void Notes(JsonWriter& w, const std::vector<std::string>& notes) {
  w.Key("dra_notes");
  w.StartArray();
  for (const std::string& n : notes) String(w, n);
  w.EndArray();
}

std::string Line(const rapidjson::StringBuffer& buf) {
  std::string line(buf.GetString(), buf.GetSize());
  line.push_back('\n');
  return line;
}

}  // namespace

std::string DecisionLog::FormatLine(const FilterNotes& n, absl::Time now) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  Head(w, now, "filter", n.pod_namespace, n.pod_name, n.pod_uid, n.project);
  w.Key("offering");
  String(w, n.offering);
  w.Key("candidates");
  w.Int(n.candidates);
  w.Key("passed");
  w.Int(n.passed);
  Notes(w, n.dra_notes);
  w.EndObject();
  return Line(buf);
}

std::string DecisionLog::FormatLine(const BindDecision& d, absl::Time now) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  Head(w, now, "bind", d.pod_namespace, d.pod_name, d.pod_uid, d.project);
  w.Key("offering");
  String(w, d.offering);
  w.Key("node");
  String(w, d.node);
  w.Key("units");
  w.StartArray();
  for (int32_t index : d.unit_indices) String(w, UnitId(d.node, d.offering, index));
  w.EndArray();
  w.Key("amount");
  w.Int(d.amount_per_unit);
  w.Key("placement");
  String(w, d.placement);
  w.Key("outcome");
  String(w, d.outcome);
  w.Key("reason");
  String(w, d.reason);
  w.Key("latency_seconds");
  Seconds(w, d.latency_seconds);
  w.Key("api_seconds");
  Seconds(w, d.api_seconds);
  if (!d.dra_notes.empty()) Notes(w, d.dra_notes);
  w.EndObject();
  return Line(buf);
}

}  // namespace gse
