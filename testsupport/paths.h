// Where tests and test tools find the repository, ../shared (protocol captures, traces) and
// built binaries: paths compiled in by CMake (testsupport/CMakeLists.txt).
#ifndef GSE_TESTSUPPORT_PATHS_H_
#define GSE_TESTSUPPORT_PATHS_H_

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace gse::testing {

inline std::string SourcePath(const std::string& rel) { return std::string(GSE_SOURCE_DIR) + "/" + rel; }
inline std::string SharedPath(const std::string& rel) { return std::string(GSE_SHARED_DIR) + "/" + rel; }
inline std::string BinPath(const std::string& name) { return std::string(GSE_BIN_DIR) + "/" + name; }

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace gse::testing

#endif  // GSE_TESTSUPPORT_PATHS_H_
