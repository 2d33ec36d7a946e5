// HMAC-SHA256 for the queue module: webhook signatures (intake.cpp) and the
// dead-letter spool's line seals (dlq.cpp). OpenSSL stays behind this header.
#ifndef IDEMLEDGER_SRC_QUEUE_INTERNAL_HMAC_HPP
#define IDEMLEDGER_SRC_QUEUE_INTERNAL_HMAC_HPP

#include <array>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace idemledger::internal {

using Digest = std::array<unsigned char, 32>;

// HMAC-SHA256 with `key` over the concatenation of `parts` (no copy made).
Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);

// The digest written as exactly 64 hex digits (either case); nullopt otherwise.
std::optional<Digest> parse_hex_digest(std::string_view hex);

// Equal in constant time: how much of a digest matched must not leak.
bool digests_equal(const Digest& a, const Digest& b);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_QUEUE_INTERNAL_HMAC_HPP
