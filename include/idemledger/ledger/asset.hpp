// idemledger/ledger/asset.hpp — what an amount is an amount of.
//
// Every balance is per (user, asset). An asset is registered once — a code,
// its decimals (0..18), optionally the chain and contract it lives at — and
// from then on an amount in it may carry at most that many decimal places:
// 1.0000001 USDC (6 decimals) is refused, naming the rule.
//
//   (void)idemledger::add_asset(conn, schema, {.code = "USDC", .decimals = 6,
//                                              .chain = "ethereum",
//                                              .contract =
//                                              "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"});
//   absl::StatusOr<idemledger::Asset> usdc = idemledger::find_asset(conn, schema, "USDC");
//   absl::StatusOr<idemledger::Amount> a = usdc->from_base_units("1500000");   // 1.5
//
// One registered asset is the default: the single-balance API (events that
// name no asset) uses it. migrate() creates it (MigrateOptions).
//
// AssetCode and Asset are value types. The functions are thread-safe; the
// Connection is not.
#ifndef IDEMLEDGER_LEDGER_ASSET_HPP
#define IDEMLEDGER_LEDGER_ASSET_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

namespace internal {
void asset_literal_must_match_upper_alnum_then_upper_alnum_dot_dash_underscore_up_to_16(
    const char*);

constexpr bool is_asset_code(std::string_view code) {
  const auto upper_or_digit = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (code.empty() || code.size() > 16 || !upper_or_digit(code.front())) return false;
  for (char c : code) {
    if (!upper_or_digit(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}
}  // namespace internal

// AssetCode
//
// "ETH", "USDC", "WBTC": [A-Z0-9][A-Z0-9._-]{0,15}. Checked once, where it
// enters (AssetCode::create), or by the compiler for a literal.
class AssetCode {
 public:
  static constexpr std::size_t kMaxLength = 16;

  [[nodiscard]] static absl::StatusOr<AssetCode> create(std::string_view code);

  consteval AssetCode(const char* literal) {  // NOLINT(google-explicit-constructor)
    const std::string_view code(literal);
    if (!internal::is_asset_code(code)) {
      internal::asset_literal_must_match_upper_alnum_then_upper_alnum_dot_dash_underscore_up_to_16(
          literal);
    }
    assign(code);
  }

  [[nodiscard]] constexpr std::string_view code() const { return {code_.data(), size_}; }
  friend constexpr bool operator==(const AssetCode& a, const AssetCode& b) {
    return a.code() == b.code();
  }

 private:
  constexpr AssetCode() = default;
  constexpr void assign(std::string_view code) {
    for (std::size_t i = 0; i < code.size(); ++i) code_[i] = code[i];
    size_ = static_cast<std::uint8_t>(code.size());
  }
  std::array<char, kMaxLength> code_{};
  std::uint8_t size_ = 0;
};

struct Asset {
  AssetCode code = "DEFAULT";
  int decimals = 18;     // 0..18
  std::string chain;     // "" or [a-z0-9][a-z0-9_-]{0,31}: where it lives
  std::string contract;  // "" (the chain's native coin) or its token contract
  bool enabled = true;   // a disabled asset takes no new money; what exists settles
  bool is_default = false;

  // admits()
  //
  // OK if `amount` has at most `decimals` decimal places; kInvalidArgument
  // naming the amount, the asset and its decimals otherwise.
  [[nodiscard]] absl::Status admits(const Amount& amount) const;

  // from_base_units()
  //
  // An integer count of the asset's smallest unit (wei, satoshi, ...) as an
  // Amount: "1500000" USDC is 1.5.
  [[nodiscard]] absl::StatusOr<Amount> from_base_units(std::string_view units) const;
};

// add_asset()
//
// Registers `asset` (not as the default: migrate() names that one).
// Idempotent: registering the same definition again is OK; a different one
// under a known code, or a (chain, contract) another code has, is
// kAlreadyExists naming what differs. kInvalidArgument for decimals outside
// 0..18 or a malformed chain or contract.
[[nodiscard]] absl::Status add_asset(Connection& conn, const Schema& schema, const Asset& asset);

// The registered assets, by code.
[[nodiscard]] absl::StatusOr<std::vector<Asset>> list_assets(Connection& conn,
                                                             const Schema& schema);
// One registered asset; kNotFound if unknown.
[[nodiscard]] absl::StatusOr<Asset> find_asset(Connection& conn, const Schema& schema,
                                               const AssetCode& code);
// set_asset_enabled()
//
// A disabled asset takes no new credits, debits or holds (intake answers 400);
// posts and voids of existing holds, and replays, still settle. An operator
// decision: `reason` and `actor` (both non-empty) are recorded in
// operator_actions ("asset_enable" / "asset_disable") in the same statement.
// kNotFound for an unknown asset.
[[nodiscard]] absl::Status set_asset_enabled(Connection& conn, const Schema& schema,
                                             const AssetCode& code, bool enabled,
                                             std::string_view reason, std::string_view actor);

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_ASSET_HPP
