// Kubernetes resource.Quantity parsing, exact to the milli-unit.
//
// Grammar (k8s.io/apimachinery/pkg/api/resource, ParseQuantity):
//   quantity ::= [+-] number suffix
//   number   ::= digits | digits "." [digits] | "." digits
//   suffix   ::= "" | n u m k M G T P E         (decimal SI)
//              | Ki Mi Gi Ti Pi Ei              (binary SI)
//              | (e|E) [+-] digits              (decimal exponent)
// Kubernetes rounds a parsed amount up, away from zero, to the nano and MilliValue() rounds
// up, away from zero, again; rounding once to the milli gives the same result, so that is
// what we do. Unlike Kubernetes we do not silently cap huge values: out of range is an error.
//
// The arithmetic is exact: the mantissa is kept as decimal digits (at most 64 input bytes),
// multiplied by the binary suffix, and only the final integer has to fit an int64. That keeps
// "0.5Ki" (= 512, exact) and "1.0000000001Gi" (rounded up) right without floating point.
#include "state/quantity.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gse {
namespace {

// Longer inputs are hostile: no real quantity needs more than a few dozen bytes.
constexpr size_t kMaxQuantityBytes = 64;
// Beyond this a non-zero mantissa over- or underflows anyway; clamping keeps loops short.
constexpr int kExponentClamp = 1000;
constexpr uint64_t kMaxMagnitude = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The input as it appears in error messages: quoted, escaped, long inputs cut short.
std::string Quote(absl::string_view text) {
  if (text.size() > kMaxQuantityBytes) {
    return absl::StrCat("\"", absl::CEscape(text.substr(0, kMaxQuantityBytes)), "...\" (",
                        text.size(), " bytes)");
  }
  return absl::StrCat("\"", absl::CEscape(text), "\"");
}

absl::Status NotAQuantity(absl::string_view text, absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrCat(Quote(text), " is not a quantity: ", reason));
}

absl::Status OutOfRange(absl::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat(
      Quote(text), " is out of range: more than ", kMaxMagnitude, " milli-units"));
}

// Suffix -> power of ten or power of two. Returns false for anything that is not a suffix.
bool ParseSuffix(absl::string_view s, int* exp10, int* exp2) {
  *exp10 = 0;
  *exp2 = 0;
  if (s.empty()) return true;
  if (s.size() == 1) {
    switch (s[0]) {
      case 'n': *exp10 = -9; return true;
      case 'u': *exp10 = -6; return true;
      case 'm': *exp10 = -3; return true;
      case 'k': *exp10 = 3; return true;
      case 'M': *exp10 = 6; return true;
      case 'G': *exp10 = 9; return true;
      case 'T': *exp10 = 12; return true;
      case 'P': *exp10 = 15; return true;
      case 'E': *exp10 = 18; return true;  // exa; "1E3" is an exponent, handled below
      default: return false;
    }
  }
  if (s.size() == 2 && s[1] == 'i') {
    switch (s[0]) {
      case 'K': *exp2 = 10; return true;
      case 'M': *exp2 = 20; return true;
      case 'G': *exp2 = 30; return true;
      case 'T': *exp2 = 40; return true;
      case 'P': *exp2 = 50; return true;
      case 'E': *exp2 = 60; return true;
      default: return false;
    }
  }
  if (s[0] != 'e' && s[0] != 'E') return false;
  size_t i = 1;
  bool negative = false;
  if (s[i] == '+' || s[i] == '-') {
    negative = s[i] == '-';
    ++i;
  }
  if (i == s.size()) return false;
  int value = 0;
  for (; i < s.size(); ++i) {
    if (!IsDigit(s[i])) return false;
    value = value * 10 + (s[i] - '0');
    if (value > kExponentClamp) value = kExponentClamp;
  }
  *exp10 = negative ? -value : value;
  return true;
}

}  // namespace

absl::StatusOr<int64_t> ParseQuantityMilli(absl::string_view text) {
  if (text.empty()) return NotAQuantity(text, "empty");
  if (text.size() > kMaxQuantityBytes) {
    return NotAQuantity(text, absl::StrCat("longer than ", kMaxQuantityBytes, " bytes"));
  }

  size_t i = 0;
  bool negative = false;
  if (text[i] == '+' || text[i] == '-') {
    negative = text[i] == '-';
    ++i;
  }
  const size_t int_begin = i;
  while (i < text.size() && IsDigit(text[i])) ++i;
  const size_t int_end = i;
  size_t frac_begin = i, frac_end = i;
  if (i < text.size() && text[i] == '.') {
    frac_begin = ++i;
    while (i < text.size() && IsDigit(text[i])) ++i;
    frac_end = i;
  }
  if (int_end == int_begin && frac_end == frac_begin) return NotAQuantity(text, "no digits");

  const absl::string_view suffix = text.substr(i);
  int exp10 = 0, exp2 = 0;
  if (!ParseSuffix(suffix, &exp10, &exp2)) {
    return NotAQuantity(text, absl::StrCat("unknown suffix ", Quote(suffix)));
  }

  // value = digits * 10^(exp10 - fraction digits) * 2^exp2, in milli-units: exponent + 3.
  // Digits are little-endian so that multiplication and trimming work at the back.
  std::vector<uint32_t> digits;
  digits.reserve(kMaxQuantityBytes + 24);
  for (size_t k = frac_end; k > frac_begin; --k) digits.push_back(text[k - 1] - '0');
  for (size_t k = int_end; k > int_begin; --k) digits.push_back(text[k - 1] - '0');
  int exponent = exp10 - static_cast<int>(frac_end - frac_begin) + 3;

  auto trim = [&] {
    while (!digits.empty() && digits.back() == 0) digits.pop_back();  // leading zeros
    size_t zeros = 0;
    while (zeros < digits.size() && digits[zeros] == 0) ++zeros;      // trailing zeros
    digits.erase(digits.begin(), digits.begin() + static_cast<ptrdiff_t>(zeros));
    exponent += static_cast<int>(zeros);
  };
  trim();
  if (digits.empty()) return int64_t{0};  // "-0", "0e999", "0.000Ei"

  for (int done = 0; done < exp2; done += 10) {  // times 1024 per binary step
    uint32_t carry = 0;
    for (uint32_t& d : digits) {
      const uint32_t v = d * 1024 + carry;
      d = v % 10;
      carry = v / 10;
    }
    while (carry != 0) {
      digits.push_back(carry % 10);
      carry /= 10;
    }
  }
  trim();  // 5 * 1024 = 5120: the product may end in zeros again

  // Now value = digits * 10^exponent with a non-zero last digit, so any negative exponent
  // means a non-zero fraction of a milli-unit, which rounds up (away from zero).
  uint64_t magnitude = 0;
  const int ndigits = static_cast<int>(digits.size());
  if (exponent >= 0) {
    if (ndigits + exponent > 19) return OutOfRange(text);  // >= 10^19 > int64 max
    for (int k = ndigits - 1; k >= 0; --k) magnitude = magnitude * 10 + digits[k];
    for (int k = 0; k < exponent; ++k) magnitude *= 10;
  } else {
    const int drop = -exponent;
    if (drop < ndigits) {
      if (ndigits - drop > 19) return OutOfRange(text);
      for (int k = ndigits - 1; k >= drop; --k) magnitude = magnitude * 10 + digits[k];
    }
    magnitude += 1;
  }
  if (magnitude > kMaxMagnitude) return OutOfRange(text);
  const int64_t value = static_cast<int64_t>(magnitude);
  return negative ? -value : value;
}

absl::StatusOr<int64_t> ParseWholeCount(absl::string_view text) {
  absl::StatusOr<int64_t> milli = ParseQuantityMilli(text);
  if (!milli.ok()) return milli.status();
  if (*milli < 0) return absl::InvalidArgumentError(absl::StrCat(Quote(text), " is negative"));
  if (*milli % 1000 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(Quote(text), " is not a whole number"));
  }
  return *milli / 1000;
}

}  // namespace gse
