// AgentLog: the agent's log, one JSON object per line on stderr, e.g.
//   {"time":"2026-01-02T03:04:05.678Z","component":"gpu-slice-agent","event":"registered",
//    "resource":"nvidia.com/mig-1g.5gb.shared"}
// Values are escaped as JSON strings. Thread-safe (one line is written under a mutex); tests
// may capture lines with SetLogSinkForTest.
#ifndef GSE_AGENT_AGENT_LOG_H_
#define GSE_AGENT_AGENT_LOG_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace gse::agent {

using LogFields = std::vector<std::pair<std::string, std::string>>;

// Writes one line {"time":..,"component":"gpu-slice-agent","event":event, fields...}.
void LogEvent(absl::string_view event, const LogFields& fields = {});
// The line LogEvent would write, without the time (tests, Event messages).
std::string LogLine(absl::string_view event, const LogFields& fields);
// Replaces stderr as the destination (nullptr: back to stderr).
void SetLogSinkForTest(std::function<void(const std::string& line)> sink);

}  // namespace gse::agent

#endif  // GSE_AGENT_AGENT_LOG_H_
