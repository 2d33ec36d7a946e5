#include "idemledger/core/amount.hpp"

#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace idemledger {
namespace {

using ::testing::HasSubstr;

std::string canonical(std::string_view text) {
  absl::StatusOr<Amount> a = Amount::parse(text);
  EXPECT_TRUE(a.ok()) << text << ": " << a.status();
  return a.ok() ? a->to_string() : "";
}

void expect_rejected(std::string_view text, std::string_view rule) {
  absl::StatusOr<Amount> a = Amount::parse(text);
  ASSERT_FALSE(a.ok()) << "accepted: " << text;
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << text;
  EXPECT_THAT(std::string(a.status().message()), HasSubstr(std::string(rule))) << text;
}

TEST(AmountParse, AcceptsTheGrammarAndCanonicalises) {
  EXPECT_EQ(canonical("50"), "50");
  EXPECT_EQ(canonical("50.25"), "50.25");
  EXPECT_EQ(canonical("0.000000000000000001"), "0.000000000000000001");
  EXPECT_EQ(canonical("00050.2500"), "50.25");
  EXPECT_EQ(canonical("5e1"), "50");
  EXPECT_EQ(canonical("5E+1"), "50");
  EXPECT_EQ(canonical("1500e-3"), "1.5");
  EXPECT_EQ(canonical("1e-18"), "0.000000000000000001");
  EXPECT_EQ(canonical("99999999999999999999.999999999999999999"),
            "99999999999999999999.999999999999999999");
}

TEST(AmountParse, TrailingZerosBeyondEighteenDigitsAreFine) {
  // The seed's case: 19 fractional digits, all zeros after normalisation.
  EXPECT_EQ(canonical("50.0000000000000000000"), "50");
  EXPECT_EQ(canonical("1.0000000000000000010e1"), "10.00000000000000001");
}

TEST(AmountParse, RejectsEachBrokenRuleByName) {
  expect_rejected("", "empty");
  expect_rejected(" 50", "whitespace");
  expect_rejected("50 ", "whitespace");
  expect_rejected("5 0", "whitespace");
  expect_rejected("50\n", "whitespace");
  expect_rejected("+50.1", "sign");
  expect_rejected("-5", "sign");
  expect_rejected("1_000", "separator");
  expect_rejected("1,000", "separator");
  expect_rejected("\xd9\xa5\xd9\xa0", "ASCII digits");  // Arabic-Indic "٥٠"
  expect_rejected("５０", "ASCII digits");              // full-width
  expect_rejected(".5", "before the decimal point");
  expect_rejected("5.", "after the decimal point");
  expect_rejected("5.e3", "after the decimal point");
  expect_rejected("NaN", "finite");
  expect_rejected("nan", "finite");
  expect_rejected("Infinity", "finite");
  expect_rejected("inf", "finite");
  expect_rejected("0x1A", "hexadecimal");
  expect_rejected("1e", "must match");
  expect_rejected("1e+", "must match");
  expect_rejected("1.2.3", "must match");
  expect_rejected("0", "greater than zero");
  expect_rejected("0.000", "greater than zero");
  expect_rejected("0e5", "greater than zero");
  expect_rejected("1e-19", "18 fractional digits");
  expect_rejected("0.0000000000000000001", "18 fractional digits");
  expect_rejected("100000000000000000000", "10^20");
  expect_rejected("1e20", "10^20");
  expect_rejected(std::string(129, '1'), "at most 128");
}

TEST(AmountParse, TenToTheTwentyIsExclusive) {
  EXPECT_TRUE(Amount::parse("99999999999999999999").ok());
  expect_rejected("100000000000000000000", "10^20");
  expect_rejected("100000000000000000000.000", "10^20");
  expect_rejected("99999999999999999999.9999999999999999999", "18 fractional digits");
}

TEST(AmountParse, HugeExponentsAnswerInstantly) {
  const auto start = std::chrono::steady_clock::now();
  expect_rejected("1e999999999", "10^20");
  expect_rejected("1e-999999999", "18 fractional digits");
  expect_rejected("1e99999999999999999999999999999999999999", "10^20");
  expect_rejected("0e999999999999", "greater than zero");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
}

TEST(AmountParse, ZeroIsAValidBalanceOnly) {
  absl::StatusOr<Amount> zero = Amount::parse_balance("0.000000000000000000");
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->is_zero());
  EXPECT_EQ(zero->to_string(), "0");
}

TEST(AmountBaseUnits, ConvertsExactly) {
  EXPECT_EQ(Amount::from_base_units("1500000000000000000", 18)->to_string(), "1.5");
  EXPECT_EQ(Amount::from_base_units("1", 18)->to_string(), "0.000000000000000001");
  EXPECT_EQ(Amount::from_base_units("123", 0)->to_string(), "123");
  EXPECT_EQ(Amount::from_base_units("100000000", 8)->to_string(), "1");
  EXPECT_EQ(Amount::from_base_units("00123", 2)->to_string(), "1.23");
}

TEST(AmountBaseUnits, RejectsBadInput) {
  EXPECT_EQ(Amount::from_base_units("1", 19).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Amount::from_base_units("1", -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Amount::from_base_units("", 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Amount::from_base_units("1.5", 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Amount::from_base_units("-1", 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Amount::from_base_units("0", 2).status().code(), absl::StatusCode::kInvalidArgument);
  // 10^20 whole units is out of range; one base unit less is not.
  EXPECT_FALSE(Amount::from_base_units("100000000000000000000", 0).ok());
  EXPECT_TRUE(Amount::from_base_units("99999999999999999999999999999999999999", 18).ok());
  EXPECT_FALSE(Amount::from_base_units("100000000000000000000000000000000000000", 18).ok());
}

TEST(AmountArithmetic, IsExactAndChecked) {
  const Amount a = *Amount::parse("0.1");
  const Amount b = *Amount::parse("0.2");
  EXPECT_EQ(a.checked_add(b)->to_string(), "0.3");  // not 0.30000000000000004
  EXPECT_EQ(a.checked_sub(b)->to_string(), "-0.1");
  EXPECT_EQ(a.negated().to_string(), "-0.1");
  const Amount big = *Amount::parse("99999999999999999999.999999999999999999");
  absl::StatusOr<Amount> overflow = big.checked_add(big);
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(big.negated().checked_sub(big).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_LT(a, b);
  EXPECT_EQ(*Amount::parse("5e1"), *Amount::parse("50.000"));
}

}  // namespace
}  // namespace idemledger
