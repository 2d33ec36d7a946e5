// idemledger/amount.hpp — exact money amounts.
//
// An Amount is a signed fixed-point value with 18 fractional digits, held as a
// 128-bit scaled integer. It is what NUMERIC(38,18) stores, so every value
// round-trips through PostgreSQL unchanged. There is no floating point here:
// amounts enter only as strings (or integer base units) and leave only as
// canonical strings.
//
//   absl::StatusOr<idemledger::Amount> a = idemledger::Amount::parse("50.25");
//   if (!a.ok()) return a.status();          // kInvalidArgument naming the rule
//   auto wei = idemledger::Amount::from_base_units("1500000000000000000", 18);
//   std::string sql_value = a->to_string();  // "50.25"
//
// Guarantee: parse() accepts exactly ^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$ with
// a value that is > 0, < 10^20 and has at most 18 fractional digits after
// normalisation; it answers in time linear in the (bounded) input length, also
// for exponents like 1e999999999. Arithmetic is checked: overflow is an error.
//
// Amount is a value type; it is thread-compatible.
#ifndef IDEMLEDGER_AMOUNT_HPP
#define IDEMLEDGER_AMOUNT_HPP

#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace idemledger {

class Amount {
 public:
  // Fractional digits kept; NUMERIC(38,18).
  static constexpr int kScale = 18;
  // Longest input parse() looks at; longer strings are refused unread.
  static constexpr std::size_t kMaxInputLength = 128;

  // Amount() is zero. Zero is a valid balance, never a valid event amount.
  constexpr Amount() = default;

  // Amount::parse()
  //
  // Parses a decimal string from an untrusted source (JSON string field,
  // provider API). Fails with kInvalidArgument and a message naming the rule
  // broken: empty, whitespace, sign, separator, non-ASCII digit, ".5", "5.",
  // NaN/Infinity, hex, zero, too precise, too large, too long.
  [[nodiscard]] static absl::StatusOr<Amount> parse(std::string_view text);

  // Amount::parse_balance()
  //
  // As parse(), but zero is accepted: for balances, which may be empty, read
  // back from NUMERIC columns. Event amounts always go through parse().
  [[nodiscard]] static absl::StatusOr<Amount> parse_balance(std::string_view text);

  // Amount::parse_numeric()
  //
  // Reads what PostgreSQL prints for a NUMERIC(38,18) value: an optional '-'
  // followed by what parse_balance() accepts. For values read back from the
  // database (balances, ledger entries, system accounts that may be
  // negative); never for input from outside.
  [[nodiscard]] static absl::StatusOr<Amount> parse_numeric(std::string_view text);

  // Amount::from_base_units()
  //
  // Converts an integer count of base units (wei, satoshi, token units) with
  // `decimals` decimal places into an Amount, exactly.
  // REQUIRES: 0 <= decimals <= 18; `base_units` is ASCII digits, value > 0.
  [[nodiscard]] static absl::StatusOr<Amount> from_base_units(std::string_view base_units,
                                                              int decimals);

  // to_string()
  //
  // Canonical decimal form: no exponent, no trailing fractional zeros, no
  // trailing '.', '-' for negatives. This is the string sent to SQL and the one
  // the payload fingerprint covers, so "50.0" and "5e1" fingerprint alike.
  [[nodiscard]] std::string to_string() const;

  // Checked arithmetic: a result outside NUMERIC(38,18) is kOutOfRange.
  [[nodiscard]] absl::StatusOr<Amount> checked_add(const Amount& other) const;
  [[nodiscard]] absl::StatusOr<Amount> checked_sub(const Amount& other) const;
  [[nodiscard]] Amount negated() const { return Amount(-units_); }

  // fractional_digits()
  //
  // Digits after the decimal point in to_string(): 0 for 5, 2 for 5.25. An
  // amount fits an asset with `decimals` decimal places iff this <= decimals.
  [[nodiscard]] int fractional_digits() const;

  [[nodiscard]] bool is_zero() const { return units_ == 0; }
  [[nodiscard]] bool is_negative() const { return units_ < 0; }

  friend constexpr bool operator==(const Amount&, const Amount&) = default;
  friend constexpr std::strong_ordering operator<=>(const Amount&, const Amount&) = default;

 private:
  // __int128 is the storage; Boost.Multiprecision does the checked arithmetic
  // and decimal rendering in the .cpp, so consumers never see Boost.
  __extension__ using Units = __int128;
  constexpr explicit Amount(Units units) : units_(units) {}
  static absl::StatusOr<Amount> parse_impl(std::string_view text, bool allow_zero);

  Units units_ = 0;  // value * 10^18
};

}  // namespace idemledger

#endif  // IDEMLEDGER_AMOUNT_HPP
