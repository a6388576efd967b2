// AgentLog: JSON lines on stderr.
#include "agent/agent_log.h"

#include <cstdio>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::agent {
namespace {

absl::Mutex sink_mu;
std::function<void(const std::string&)>* sink ABSL_GUARDED_BY(sink_mu) = nullptr;

std::string Render(absl::string_view time, absl::string_view event, const LogFields& fields) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  auto str = [&w](absl::string_view s) {
    w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  };
  w.StartObject();
  if (!time.empty()) {
    w.Key("time");
    str(time);
  }
  w.Key("component");
  str("gpu-slice-agent");
  w.Key("event");
  str(event);
  for (const auto& [k, v] : fields) {
    str(k);
    str(v);
  }
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace

std::string LogLine(absl::string_view event, const LogFields& fields) {
  return Render("", event, fields);
}

void LogEvent(absl::string_view event, const LogFields& fields) {
  const std::string line =
      Render(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), event,
             fields);
  absl::MutexLock lock(&sink_mu);
  if (sink != nullptr) {
    (*sink)(line);
    return;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

void SetLogSinkForTest(std::function<void(const std::string& line)> fn) {
  absl::MutexLock lock(&sink_mu);
  delete sink;
  sink = fn ? new std::function<void(const std::string&)>(std::move(fn)) : nullptr;
}

}  // namespace gse::agent
