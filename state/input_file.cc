#include "state/input_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "state/k8s_objects.h"

namespace gse {

absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": cannot read the file: ", std::strerror(errno)));
  }
  std::string data;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    data.append(buf, n);
    if (data.size() > kMaxJsonBytes) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": cannot read the file: ", std::strerror(err)));
  }
  return data;
}

}  // namespace gse
