// idemledger/ledger/idempotency_key.hpp — collision-free keys and payload fingerprints.
//
// The idempotency key names "this event, of this type": the unique constraint
// on it is what makes a redelivered event a no-op. The fingerprint names "this
// content": stored beside the key, it turns a replay of the same id with a
// different user/amount/type into a conflict instead of a silent duplicate.
//
//   std::string key = idemledger::idempotency_key("evt_42", "deposit");
//   std::string fp  = idemledger::payload_fingerprint(7, amount, "deposit");
//
// Guarantee: both are lowercase hex SHA-256 over each field prefixed by its
// 4-byte big-endian length, so no two distinct field tuples share an encoding
// (unlike "a::b" or NUL-joined keys: ("a:", ":b") vs ("a", "::b")).
//
// Functions here are thread-safe.
#ifndef IDEMLEDGER_LEDGER_IDEMPOTENCY_KEY_HPP
#define IDEMLEDGER_LEDGER_IDEMPOTENCY_KEY_HPP

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "idemledger/core/amount.hpp"

namespace idemledger {

// Hex length of every key and fingerprint.
inline constexpr std::size_t kKeyHexLength = 64;

// idempotency_key()
//
// Key of an event: SHA-256 over the length-prefixed `event_id`, `event_type`.
// REQUIRES: each field is shorter than 4 GiB.
[[nodiscard]] std::string idempotency_key(std::string_view event_id, std::string_view event_type);

// Same encoding over any number of fields, for keys of other operations.
[[nodiscard]] std::string idempotency_key(std::span<const std::string_view> fields);
[[nodiscard]] std::string idempotency_key(std::initializer_list<std::string_view> fields);

// payload_fingerprint()
//
// Fingerprint of an event's content: the same encoding over the decimal user
// id, the canonical amount string and the event type.
[[nodiscard]] std::string payload_fingerprint(std::int64_t user_id, const Amount& amount,
                                              std::string_view event_type);

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_IDEMPOTENCY_KEY_HPP
