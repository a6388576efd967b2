// Helpers the DRA suites share: the fact sheet's objects (shared/protocol/dra/), edited in
// place, and decoded with a failure that names the decoder's error.
#ifndef GSE_TESTS_TESTING_DRA_FIXTURES_H_
#define GSE_TESTS_TESTING_DRA_FIXTURES_H_

#include <string>

#include "state/dra_objects.h"

namespace gse::testing {

// The text of shared/protocol/dra/<rel>.
std::string Dra(const std::string& rel);
// `json` with the first occurrence of `from` replaced by `to`; fails the test when absent.
std::string Edit(const std::string& json, const std::string& from, const std::string& to);
// DecodeDraObjects(json); fails the test (with the error and the input) and returns an empty
// batch when it does not decode.
DraObjectBatch DecodeDra(const std::string& json);

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_DRA_FIXTURES_H_
