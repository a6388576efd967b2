// Kubernetes quantities as the mirror reads them: allocatable, requests, quota hard values and
// GPU feature discovery counts. Expected values are written as the arithmetic they stand for.
#include "state/quantity.h"

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gse {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kKi = int64_t{1} << 10;
constexpr int64_t kGi = int64_t{1} << 30;
constexpr int64_t kPi = int64_t{1} << 50;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

struct Case {
  const char* text;
  int64_t milli;
};
void PrintTo(const Case& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class QuantityValueTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantityValueTest, ParsesToMilliUnits) {
  const Case& c = GetParam();
  absl::StatusOr<int64_t> got = ParseQuantityMilli(c.text);
  ASSERT_TRUE(got.ok()) << c.text << ": " << got.status();
  EXPECT_EQ(*got, c.milli) << c.text;
}

INSTANTIATE_TEST_SUITE_P(
    Table, QuantityValueTest,
    ::testing::Values(
        // Plain counts and CPU as nodes report them.
        Case{"0", 0}, Case{"1", 1000}, Case{"7", 7000}, Case{"110", 110 * 1000},
        Case{"127500m", 127500}, Case{"007", 7000}, Case{"+5", 5000},
        // Binary suffixes: memory and hugepages.
        Case{"4Gi", 4 * kGi * 1000}, Case{"1055311780Ki", 1055311780 * kKi * 1000},
        Case{"512Gi", 512 * kGi * 1000}, Case{"1Mi", (int64_t{1} << 20) * 1000},
        Case{"1Ti", (int64_t{1} << 40) * 1000}, Case{"8Pi", 8 * kPi * 1000},
        Case{"0.5Ki", 512 * 1000}, Case{"1.5Gi", 3 * (kGi / 2) * 1000},
        // 1.0000000001Gi = 2^30 * 1000 + 1e-10 * 2^30 * 1000 (= 107.37...) milli: rounds up.
        Case{"1.0000000001Gi", kGi * 1000 + 108},
        // Decimal SI suffixes.
        Case{"1k", 1000 * 1000}, Case{"2M", int64_t{2000000} * 1000},
        Case{"3G", int64_t{3000000000} * 1000}, Case{"3T", int64_t{3000000000000} * 1000},
        Case{"1P", int64_t{1000000000000000} * 1000},
        Case{"1698539192723", int64_t{1698539192723} * 1000},
        // Fractions: whole milli exact, anything below a milli rounds up.
        Case{"1.5", 1500}, Case{".5", 500}, Case{"1.", 1000},
        Case{"1.G", int64_t{1000000000} * 1000}, Case{"0.1m", 1}, Case{"100n", 1},
        Case{"1000000n", 1}, Case{"1000001n", 2}, Case{"1u", 1}, Case{"1500u", 2}, Case{"2000u", 2},
        Case{"0.0015", 2},
        // Decimal exponents.
        Case{"1e3", 1000 * 1000}, Case{"1E3", 1000 * 1000}, Case{"1e+3", 1000 * 1000},
        Case{"1e03", 1000 * 1000}, Case{"1E-3", 1}, Case{"12E-2", 120}, Case{"1.5e1", 15000},
        Case{"1e-999999", 1}, Case{"0e999999", 0},
        // Zero in every spelling.
        Case{"-0", 0}, Case{"0.000", 0}, Case{"0Ei", 0}, Case{"0m", 0},
        // Negative values come back negative; rounding is away from zero like Kubernetes.
        Case{"-1", -1000}, Case{"-500m", -500}, Case{"-0.1m", -1}, Case{"-4Gi", -4 * kGi * 1000},
        // The int64 boundary itself.
        Case{"9223372036854775807m", kMax}, Case{"9223372036854775.807", kMax},
        Case{"-9223372036854775807m", -kMax},
        // 64 bytes is still accepted.
        Case{"0000000000000000000000000000000000000000000000000000000000000001", 1000}));

struct BadCase {
  const char* text;
  const char* reason;  // substring of the error
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class QuantityErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(QuantityErrorTest, RejectsWithReasonNamingTheInput) {
  const BadCase& c = GetParam();
  absl::StatusOr<int64_t> got = ParseQuantityMilli(c.text);
  ASSERT_FALSE(got.ok()) << c.text << " parsed as " << *got;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.reason)) << c.text;
}

INSTANTIATE_TEST_SUITE_P(
    Table, QuantityErrorTest,
    ::testing::Values(
        BadCase{"", "\"\" is not a quantity: empty"}, BadCase{" ", "\" \" is not a quantity"},
        BadCase{" 1", "\" 1\" is not a quantity: no digits"},
        BadCase{"1 ", "\"1 \" is not a quantity: unknown suffix \" \""},
        BadCase{"1.2.3", "\"1.2.3\" is not a quantity: unknown suffix \".3\""},
        BadCase{"1Kii", "\"1Kii\" is not a quantity: unknown suffix \"Kii\""},
        BadCase{"++1", "\"++1\" is not a quantity: no digits"}, BadCase{"+-1", "no digits"},
        BadCase{"abc", "\"abc\" is not a quantity"}, BadCase{".", "no digits"},
        BadCase{"-", "no digits"}, BadCase{"+", "no digits"}, BadCase{"1e", "unknown suffix \"e\""},
        BadCase{"1e+", "unknown suffix"}, BadCase{"1ee3", "unknown suffix"},
        BadCase{"1e3.5", "unknown suffix"}, BadCase{"1K", "unknown suffix \"K\""},
        BadCase{"1mi", "unknown suffix"}, BadCase{"1Ki3", "unknown suffix"},
        BadCase{"1m1", "unknown suffix"}, BadCase{"1,5", "unknown suffix"},
        BadCase{"0x10", "unknown suffix"}, BadCase{"1_000", "unknown suffix"},
        BadCase{"inf", "no digits"}, BadCase{"NaN", "no digits"},
        // Non-ASCII digits: ARABIC-INDIC DIGIT THREE, FULLWIDTH DIGIT ONE.
        BadCase{"\xd9\xa3", "no digits"}, BadCase{"\xef\xbc\x91", "no digits"},
        BadCase{"1\xef\xbc\x91", "unknown suffix"},
        // Too big for int64 milli-units.
        BadCase{"99999999999999999999", "\"99999999999999999999\" is out of range"},
        BadCase{"9223372036854775808m", "out of range"},
        BadCase{"9223372036854775.8071", "out of range"}, BadCase{"1E", "out of range"},
        BadCase{"9Pi", "out of range"}, BadCase{"1Ei", "out of range"},
        BadCase{"1e999999", "out of range"}, BadCase{"-99999999999999999999", "out of range"},
        // Longer than 64 bytes.
        BadCase{"00000000000000000000000000000000000000000000000000000000000000001",
                "longer than 64 bytes"}));

TEST(QuantityTest, NulByteIsEscapedInMessage) {
  absl::StatusOr<int64_t> got = ParseQuantityMilli(absl::string_view("1\0x", 3));
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("\"1\\000x\""));
}

TEST(QuantityTest, HugeInputIsCutShortInMessage) {
  const std::string huge(100000, '9');
  absl::StatusOr<int64_t> got = ParseQuantityMilli(huge);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("(100000 bytes)"));
  EXPECT_LT(got.status().message().size(), 200u);
}

TEST(WholeCountTest, AcceptsWholeNonNegativeCounts) {
  EXPECT_EQ(ParseWholeCount("7").value(), 7);
  EXPECT_EQ(ParseWholeCount("0").value(), 0);
  EXPECT_EQ(ParseWholeCount("-0").value(), 0);
  EXPECT_EQ(ParseWholeCount("28").value(), 28);
  EXPECT_EQ(ParseWholeCount("2000m").value(), 2);
  EXPECT_EQ(ParseWholeCount("1k").value(), 1000);
  EXPECT_EQ(ParseWholeCount("1e3").value(), 1000);
  EXPECT_EQ(ParseWholeCount("1Ki").value(), 1024);
}

TEST(WholeCountTest, RejectsFractionsNegativesAndGarbage) {
  absl::StatusOr<int64_t> frac = ParseWholeCount("1500m");
  ASSERT_FALSE(frac.ok());
  EXPECT_EQ(frac.status().message(), "\"1500m\" is not a whole number");

  absl::StatusOr<int64_t> half = ParseWholeCount("0.5");
  ASSERT_FALSE(half.ok());
  EXPECT_THAT(std::string(half.status().message()), HasSubstr("is not a whole number"));

  // 100n rounds up to 1 milli-unit, which is still not a whole count.
  EXPECT_FALSE(ParseWholeCount("100n").ok());

  absl::StatusOr<int64_t> neg = ParseWholeCount("-1");
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "\"-1\" is negative");

  absl::StatusOr<int64_t> bad = ParseWholeCount("abc");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"abc\" is not a quantity"));

  EXPECT_FALSE(ParseWholeCount("").ok());
  EXPECT_FALSE(ParseWholeCount("99999999999999999999").ok());
}

}  // namespace
}  // namespace gse
