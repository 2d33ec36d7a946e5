// idemledger/core/event_type.hpp — the kinds of payment event the ledger applies.
//
// Credits (deposit, airdrop) go through process_deposit, single-phase debits
// (withdrawal, withdrawal_fee) through process_withdrawal, and
// reorg_compensation only through process_compensation. A two-phase
// withdrawal is three events: withdrawal_requested (hold), then
// withdrawal_confirmed (post) or withdrawal_failed (void) naming the request.
// The database spelling is the lowercase name.
// Everything here is constexpr and thread-safe.
#ifndef IDEMLEDGER_CORE_EVENT_TYPE_HPP
#define IDEMLEDGER_CORE_EVENT_TYPE_HPP

#include <optional>
#include <string_view>

#include "idemledger/core/enum_names.hpp"

namespace idemledger {

enum class EventType {
  kDeposit,
  kAirdrop,
  kWithdrawal,
  kWithdrawalFee,
  kReorgCompensation,
  kWithdrawalRequested,  // hold
  kWithdrawalConfirmed,  // post the hold
  kWithdrawalFailed,     // void the hold
};

inline constexpr EnumNames<EventType, 8> kEventTypeNames{{{
    {EventType::kDeposit, "deposit"},
    {EventType::kAirdrop, "airdrop"},
    {EventType::kWithdrawal, "withdrawal"},
    {EventType::kWithdrawalFee, "withdrawal_fee"},
    {EventType::kReorgCompensation, "reorg_compensation"},
    {EventType::kWithdrawalRequested, "withdrawal_requested"},
    {EventType::kWithdrawalConfirmed, "withdrawal_confirmed"},
    {EventType::kWithdrawalFailed, "withdrawal_failed"},
}}};
constexpr const auto& enum_names(EventType) { return kEventTypeNames; }

// parse_event_type("deposit") == kDeposit; unknown names -> nullopt.
[[nodiscard]] constexpr std::optional<EventType> parse_event_type(std::string_view text) {
  return kEventTypeNames.parse(text);
}
[[nodiscard]] constexpr bool is_credit(EventType t) {
  return t == EventType::kDeposit || t == EventType::kAirdrop;
}
// The steps of a two-phase withdrawal.
[[nodiscard]] constexpr bool is_hold_step(EventType t) {
  return t == EventType::kWithdrawalRequested || t == EventType::kWithdrawalConfirmed ||
         t == EventType::kWithdrawalFailed;
}

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_EVENT_TYPE_HPP
