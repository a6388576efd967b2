#include "tests/testing/dra_fixtures.h"

#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "testsupport/paths.h"

namespace gse::testing {

std::string Dra(const std::string& rel) { return ReadFileOrDie(SharedPath("protocol/dra/" + rel)); }

std::string Edit(const std::string& json, const std::string& from, const std::string& to) {
  const size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return json;
  std::string out = json;
  out.replace(at, from.size(), to);
  return out;
}

DraObjectBatch DecodeDra(const std::string& json) {
  absl::StatusOr<DraObjectBatch> b = DecodeDraObjects(json);
  EXPECT_TRUE(b.ok()) << b.status() << "\n" << json;
  return b.ok() ? *std::move(b) : DraObjectBatch();
}

}  // namespace gse::testing
