// idemledger/core/event_type.hpp — the kinds of payment event the ledger applies.
//
// Credits (deposit, airdrop) go through process_deposit, debits (withdrawal,
// withdrawal_fee) through process_withdrawal, and reorg_compensation only
// through process_compensation. The database spelling is the lowercase name.
// Everything here is constexpr and thread-safe.
#ifndef IDEMLEDGER_CORE_EVENT_TYPE_HPP
#define IDEMLEDGER_CORE_EVENT_TYPE_HPP

#include <optional>
#include <string_view>

#include "idemledger/core/enum_names.hpp"

namespace idemledger {

enum class EventType { kDeposit, kAirdrop, kWithdrawal, kWithdrawalFee, kReorgCompensation };

inline constexpr EnumNames<EventType, 5> kEventTypeNames{{{
    {EventType::kDeposit, "deposit"},
    {EventType::kAirdrop, "airdrop"},
    {EventType::kWithdrawal, "withdrawal"},
    {EventType::kWithdrawalFee, "withdrawal_fee"},
    {EventType::kReorgCompensation, "reorg_compensation"},
}}};
constexpr const auto& enum_names(EventType) { return kEventTypeNames; }

// parse_event_type("deposit") == kDeposit; unknown names -> nullopt.
[[nodiscard]] constexpr std::optional<EventType> parse_event_type(std::string_view text) {
  return kEventTypeNames.parse(text);
}
[[nodiscard]] constexpr bool is_credit(EventType t) {
  return t == EventType::kDeposit || t == EventType::kAirdrop;
}

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_EVENT_TYPE_HPP
