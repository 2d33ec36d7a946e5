// Amount::parse against an independent reading of the same text.
//
// For every input: no crash; the verdict equals what the grammar and rules
// say (checked here by a regex and Boost's decimal float, not by our code);
// and for every accepted input parse(to_string(a)) == a and the value equals
// the decimal the text spells.
#include <boost/multiprecision/cpp_dec_float.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <string_view>

#include "idemledger/core/amount.hpp"

namespace {

// 150 significant digits: every accepted amount (< 10^20, 18 decimals) and
// every mantissa an input of at most 128 characters can spell is exact.
using Decimal = boost::multiprecision::number<boost::multiprecision::cpp_dec_float<150>>;

[[noreturn]] void fail(std::string_view text, const char* what) {
  std::fprintf(stderr, "amount_parse_fuzz: %s for input \"%.*s\"\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

// What the specification says about `text`, decided without Amount.
bool should_accept(const std::string& text) {
  static const std::regex kGrammar("[0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]+)?");
  if (text.size() > 128 || !std::regex_match(text, kGrammar)) return false;
  const std::size_t e = text.find_first_of("eE");
  const std::string mantissa = text.substr(0, e);
  if (mantissa.find_first_not_of("0.") == std::string::npos) return false;  // zero
  long exponent = 0;
  if (e != std::string::npos) {
    const std::string digits = text.substr(e + 1);
    // Beyond +-1000 the value is far outside (0, 10^20) with at most 18
    // decimals whatever the (at most 127-digit) mantissa is.
    const std::string magnitude = digits.substr(digits.find_first_of("0123456789"));
    const std::size_t first = magnitude.find_first_not_of('0');
    if (first != std::string::npos && magnitude.size() - first > 4) return false;
    exponent = std::strtol(digits.c_str(), nullptr, 10);
    if (exponent > 1000 || exponent < -1000) return false;
  }
  const Decimal value = Decimal(mantissa) * boost::multiprecision::pow(Decimal(10), exponent);
  if (value <= 0 || value >= Decimal("1e20")) return false;
  const Decimal scaled = value * Decimal("1e18");
  return scaled == boost::multiprecision::trunc(scaled);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<idemledger::Amount> parsed = idemledger::Amount::parse(text);
  if (parsed.ok() != should_accept(text)) {
    fail(text, parsed.ok() ? "accepted what the rules refuse" : "refused what the rules accept");
  }
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument) fail(text, "wrong code");
    return 0;
  }
  const std::string canonical = parsed->to_string();
  const absl::StatusOr<idemledger::Amount> again = idemledger::Amount::parse(canonical);
  if (!again.ok() || *again != *parsed) fail(text, "parse(to_string(a)) != a");
  if (again->to_string() != canonical) fail(text, "to_string is not canonical");
  const std::size_t e = text.find_first_of("eE");
  const long exponent = e == std::string::npos ? 0 : std::strtol(text.c_str() + e + 1, nullptr, 10);
  const Decimal spelled =
      Decimal(text.substr(0, e)) * boost::multiprecision::pow(Decimal(10), exponent);
  if (Decimal(canonical) != spelled) fail(text, "value differs from the decimal the text spells");
  return 0;
}
