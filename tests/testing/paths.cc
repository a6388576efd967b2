// Anchors gse_test_support when no other support source exists yet.
#include "tests/testing/paths.h"
