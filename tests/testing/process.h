// Child processes for tests that run the real binaries: a free loopback port to give them,
// and posix_spawn with stdout and stderr appended to a log file and no signal blocked (the
// binary blocks SIGTERM/SIGINT itself for its sigwait thread).
#ifndef GSE_TESTS_TESTING_PROCESS_H_
#define GSE_TESTS_TESTING_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace gse::testing {

// A loopback TCP port that was free a moment ago.
int FreePort();
// Starts `binary` with `args`; -1 when it could not be started.
pid_t SpawnProcess(const std::string& binary, const std::vector<std::string>& args,
                   const std::string& log);

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_PROCESS_H_
