// The byte encoding behind idempotency keys and payload fingerprints: each
// field as its 4-byte big-endian length, then its bytes. Because every field
// says where it ends, distinct field tuples never share an encoding (the
// seed's "a::b" joins let ("a::", "b") and ("a", ":b") collide). Kept apart
// from the hashing so the fuzz target can check the encoding itself.
#ifndef IDEMLEDGER_SRC_LEDGER_INTERNAL_KEY_ENCODING_HPP
#define IDEMLEDGER_SRC_LEDGER_INTERNAL_KEY_ENCODING_HPP

#include <span>
#include <string>
#include <string_view>

namespace idemledger::internal {

// Appends the length-prefixed encoding of `fields` to `out`.
// REQUIRES: every field is shorter than 2^32 bytes.
void append_key_preimage(std::string& out, std::span<const std::string_view> fields);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_LEDGER_INTERNAL_KEY_ENCODING_HPP
