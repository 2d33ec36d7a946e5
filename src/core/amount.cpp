#include "idemledger/core/amount.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/multiprecision/cpp_int.hpp>
#include <charconv>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "src/core/internal/absl_compat.hpp"

namespace idemledger {
namespace {

__extension__ using Units = __int128;
__extension__ using UnsignedUnits = unsigned __int128;
// Checked 128-bit arithmetic: overflow is reported, never wrapped.
using CheckedUnits = boost::multiprecision::checked_int128_t;

constexpr int kMaxIntegerDigits = 20;                                // values must be < 10^20
constexpr int kMaxTotalDigits = kMaxIntegerDigits + Amount::kScale;  // NUMERIC(38,18)
// Exponents beyond this cannot yield an acceptable amount from <= 128 digits;
// saturating here keeps "1e999999999" O(length) with no big allocation.
constexpr std::int64_t kExponentSaturation = 1'000'000;

constexpr Units pow10(int n) {
  Units v = 1;
  for (int i = 0; i < n; ++i) v *= 10;
  return v;
}
constexpr Units kUnitsLimit = pow10(kMaxTotalDigits);  // |units| < 10^38

absl::Status invalid(std::string_view rule) {
  return absl::InvalidArgumentError(fmt::format("invalid amount: {}", rule));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Names the rule a string that failed the grammar broke. Only called on
// failure, so it may scan more than once.
absl::Status diagnose_format(std::string_view text) {
  const auto has = [&](auto pred) { return std::any_of(text.begin(), text.end(), pred); };
  if (has([](char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); })) {
    return invalid("must not contain whitespace (leading, trailing or inner)");
  }
  if (text.front() == '+' || text.front() == '-') {
    return invalid("must not carry a sign ('+' or '-'); amounts are positive magnitudes");
  }
  if (has([](char c) { return c == '_' || c == ',' || c == '\''; })) {
    return invalid("must not contain digit separators ('_', ',', '\\'')");
  }
  if (has([](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
    return invalid("must use ASCII digits 0-9 only (no other scripts' digits or symbols)");
  }
  const std::string lower = absl::AsciiStrToLower(std::string(text));
  if (lower == "nan" || lower == "inf" || lower == "infinity" || lower == "snan") {
    return invalid("must be a finite number (NaN and Infinity are not amounts)");
  }
  if (lower.starts_with("0x")) {
    return invalid("hexadecimal is not accepted; use decimal digits");
  }
  if (text.front() == '.') {
    return invalid("needs at least one digit before the decimal point ('.5' -> '0.5')");
  }
  const std::size_t dot = text.find('.');
  if (dot != std::string_view::npos && (dot + 1 == text.size() || !is_digit(text[dot + 1]))) {
    return invalid("needs at least one digit after the decimal point ('5.' -> '5')");
  }
  return invalid("must match ^[0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]+)?$");
}

// Writes `value` as exactly `width` decimal digits, zero-padded, ending at `end`.
char* write_padded(char* end, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i, value /= 10) *--end = static_cast<char>('0' + value % 10);
  return end;
}

std::string render(Units units) {
  // |units| < 10^38 < 2^127, so negation cannot overflow. Two 128-bit
  // divisions split it into 64-bit pieces of at most 18 digits each.
  const bool negative = units < 0;
  const auto magnitude = static_cast<UnsignedUnits>(negative ? -units : units);
  constexpr std::uint64_t kTen18 = 1'000'000'000'000'000'000ULL;
  const auto fraction = static_cast<std::uint64_t>(magnitude % kTen18);
  const UnsignedUnits integer = magnitude / kTen18;
  const auto integer_high = static_cast<std::uint64_t>(integer / kTen18);  // < 100
  const auto integer_low = static_cast<std::uint64_t>(integer % kTen18);

  std::array<char, 64> buffer{};
  char* out = buffer.data();
  if (negative) *out++ = '-';
  if (integer_high != 0) {
    out = std::to_chars(out, buffer.data() + buffer.size(), integer_high).ptr;
    out = write_padded(out + 18, integer_low, 18) + 18;
  } else {
    out = std::to_chars(out, buffer.data() + buffer.size(), integer_low).ptr;
  }
  if (fraction != 0) {
    *out++ = '.';
    char* fraction_end =
        write_padded(out + Amount::kScale, fraction, Amount::kScale) + Amount::kScale;
    while (fraction_end[-1] == '0') --fraction_end;  // canonical: no trailing zeros
    out = fraction_end;
  }
  return std::string(buffer.data(), out);
}

absl::StatusOr<Units> checked_result(const CheckedUnits& value) {
  const CheckedUnits limit = CheckedUnits(kUnitsLimit);
  if (value >= limit || value <= -limit) {
    return absl::OutOfRangeError("amount arithmetic: result does not fit NUMERIC(38,18)");
  }
  return static_cast<Units>(value);
}

template <typename Op>
absl::StatusOr<Units> checked(Units a, Units b, Op op) {
  try {
    return checked_result(op(CheckedUnits(a), CheckedUnits(b)));
  } catch (const std::overflow_error&) {  // Boost's checked backend reports overflow by throwing
    return absl::OutOfRangeError("amount arithmetic: 128-bit overflow");
  }
}

}  // namespace

absl::StatusOr<Amount> Amount::parse(std::string_view text) { return parse_impl(text, false); }

absl::StatusOr<Amount> Amount::parse_balance(std::string_view text) {
  return parse_impl(text, true);
}

absl::StatusOr<Amount> Amount::parse_numeric(std::string_view text) {
  const bool negative = text.starts_with('-');
  absl::StatusOr<Amount> magnitude = parse_impl(negative ? text.substr(1) : text, true);
  if (!magnitude.ok() || !negative) return magnitude;
  return magnitude->negated();
}

int Amount::fractional_digits() const {
  Units fraction = (units_ < 0 ? -units_ : units_) % pow10(kScale);
  if (fraction == 0) return 0;
  int digits = kScale;
  while (fraction % 10 == 0) {
    fraction /= 10;
    --digits;
  }
  return digits;
}

absl::StatusOr<Amount> Amount::parse_impl(std::string_view text, bool allow_zero) {
  if (text.empty()) return invalid("must not be empty");
  if (text.size() > kMaxInputLength) {
    return invalid(
        fmt::format("must be at most {} characters, got {}", kMaxInputLength, text.size()));
  }

  // Grammar: ^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$, scanned once.
  std::size_t pos = 0;
  const auto scan_digits = [&] {
    const std::size_t start = pos;
    while (pos < text.size() && is_digit(text[pos])) ++pos;
    return text.substr(start, pos - start);
  };
  const std::string_view integer_part = scan_digits();
  if (integer_part.empty()) return diagnose_format(text);
  std::string_view fraction_part;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    fraction_part = scan_digits();
    if (fraction_part.empty()) return diagnose_format(text);
  }
  std::int64_t exponent = 0;
  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    ++pos;
    bool negative_exponent = false;
    if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
      negative_exponent = text[pos] == '-';
      ++pos;
    }
    const std::string_view exponent_digits = scan_digits();
    if (exponent_digits.empty()) return diagnose_format(text);
    for (char c : exponent_digits) {
      exponent = std::min<std::int64_t>(exponent * 10 + (c - '0'), kExponentSaturation);
    }
    if (negative_exponent) exponent = -exponent;
  }
  if (pos != text.size()) return diagnose_format(text);

  // value = significand * 10^exponent10. The significand's digits are
  // integer_part then fraction_part; they are walked in place (no copy, no
  // allocation) and trimmed of zeros on both ends, so the checks below see the
  // normalised value.
  const std::size_t total = integer_part.size() + fraction_part.size();
  const auto digit_at = [&](std::size_t i) {
    return i < integer_part.size() ? integer_part[i] : fraction_part[i - integer_part.size()];
  };
  std::size_t first = 0;
  while (first < total && digit_at(first) == '0') ++first;
  if (first == total) {
    if (allow_zero) return Amount();
    return invalid("must be greater than zero");
  }
  std::size_t last = total - 1;
  while (digit_at(last) == '0') --last;
  const std::int64_t exponent10 = exponent - static_cast<std::int64_t>(fraction_part.size()) +
                                  static_cast<std::int64_t>(total - 1 - last);
  const auto significant_digits = static_cast<std::int64_t>(last - first + 1);

  if (exponent10 < -kScale) {
    return invalid("has more than 18 fractional digits (NUMERIC(38,18) would round it)");
  }
  if (significant_digits + exponent10 > kMaxIntegerDigits) {
    return invalid("must be less than 10^20 (NUMERIC(38,18) capacity)");
  }
  // Now significant_digits + exponent10 + 18 <= 38: the scaled value is below 10^38.
  Units units = 0;
  for (std::size_t i = first; i <= last; ++i) units = units * 10 + (digit_at(i) - '0');
  units *= pow10(static_cast<int>(exponent10 + kScale));
  return Amount(units);
}

absl::StatusOr<Amount> Amount::from_base_units(std::string_view base_units, int decimals) {
  if (decimals < 0 || decimals > kScale) {
    return absl::InvalidArgumentError(
        fmt::format("invalid base units: decimals must be 0..18, got {}", decimals));
  }
  if (base_units.empty() || base_units.size() > kMaxInputLength ||
      !std::all_of(base_units.begin(), base_units.end(), is_digit)) {
    return absl::InvalidArgumentError(
        "invalid base units: must be 1..128 ASCII digits 0-9 (an integer count of base units)");
  }
  const std::size_t first_nonzero = base_units.find_first_not_of('0');
  if (first_nonzero == std::string_view::npos) {
    return absl::InvalidArgumentError("invalid base units: must be greater than zero");
  }
  const std::string_view digits = base_units.substr(first_nonzero);
  if (static_cast<int>(digits.size()) - decimals > kMaxIntegerDigits) {
    return absl::InvalidArgumentError(
        "invalid base units: value must be less than 10^20 (NUMERIC(38,18) capacity)");
  }
  Units units = 0;
  for (char c : digits) units = units * 10 + (c - '0');
  return Amount(units * pow10(kScale - decimals));
}

std::string Amount::to_string() const { return render(units_); }

absl::StatusOr<Amount> Amount::checked_add(const Amount& other) const {
  absl::StatusOr<Units> sum = checked(units_, other.units_, std::plus<>());
  if (!sum.ok()) return sum.status();
  return Amount(*sum);
}

absl::StatusOr<Amount> Amount::checked_sub(const Amount& other) const {
  absl::StatusOr<Units> difference = checked(units_, other.units_, std::minus<>());
  if (!difference.ok()) return difference.status();
  return Amount(*difference);
}

}  // namespace idemledger
