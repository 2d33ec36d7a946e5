// idemledger/ledger/topics.hpp — the notifications the ledger writes.
//
// With LedgerOptions::write_notifications the ledger writes one outbox row in
// the transaction that decides an outcome: a JSON object with event_id,
// event_type, user_id, asset and amount (and fee, for holds). Its topic is
// one of these; the
// delivery relay (relay/relay.hpp) and its hosts key their policies by the
// same names, so they are defined once, here.
//
//   relay_options.policies[std::string(to_string(OutboxTopic::kCredited))] = ...;
#ifndef IDEMLEDGER_LEDGER_TOPICS_HPP
#define IDEMLEDGER_LEDGER_TOPICS_HPP

#include <optional>
#include <string_view>

#include "idemledger/core/enum_names.hpp"

namespace idemledger {

enum class OutboxTopic {
  kCredited,           // a credit was applied
  kDebited,            // a debit was applied
  kInsufficientFunds,  // a debit or hold was refused for lack of funds
  kHeld,               // a withdrawal's funds are reserved
  kPosted,             // a hold was captured: the withdrawal is in the ledger
  kVoided,             // a hold was released
  kExpired,            // a hold was released past its expiry
};
inline constexpr EnumNames<OutboxTopic, 7> kOutboxTopicNames{{{
    {OutboxTopic::kCredited, "credited"},
    {OutboxTopic::kDebited, "debited"},
    {OutboxTopic::kInsufficientFunds, "insufficient_funds"},
    {OutboxTopic::kHeld, "held"},
    {OutboxTopic::kPosted, "posted"},
    {OutboxTopic::kVoided, "voided"},
    {OutboxTopic::kExpired, "expired"},
}}};
constexpr const auto& enum_names(OutboxTopic) { return kOutboxTopicNames; }
[[nodiscard]] constexpr std::optional<OutboxTopic> parse_outbox_topic(std::string_view text) {
  return kOutboxTopicNames.parse(text);
}

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_TOPICS_HPP
