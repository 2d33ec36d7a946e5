// idemledger/event_type.hpp — the kinds of payment event the ledger applies.
//
// Credits (deposit, airdrop) go through process_deposit, debits (withdrawal,
// withdrawal_fee) through process_withdrawal, and reorg_compensation only
// through process_compensation. The database spelling is the lowercase name.
// Functions here are thread-safe.
#ifndef IDEMLEDGER_EVENT_TYPE_HPP
#define IDEMLEDGER_EVENT_TYPE_HPP

#include <optional>
#include <string_view>

namespace idemledger {

enum class EventType { kDeposit, kAirdrop, kWithdrawal, kWithdrawalFee, kReorgCompensation };

[[nodiscard]] std::string_view to_string(EventType t);
// parse_event_type("deposit") == kDeposit; unknown names -> nullopt.
[[nodiscard]] std::optional<EventType> parse_event_type(std::string_view text);
[[nodiscard]] constexpr bool is_credit(EventType t) {
  return t == EventType::kDeposit || t == EventType::kAirdrop;
}

}  // namespace idemledger

#endif  // IDEMLEDGER_EVENT_TYPE_HPP
