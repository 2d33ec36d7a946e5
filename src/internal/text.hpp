// Text helpers shared by the core: UTF-8 validation and JSON log lines.
#ifndef IDEMLEDGER_SRC_INTERNAL_TEXT_HPP
#define IDEMLEDGER_SRC_INTERNAL_TEXT_HPP

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace idemledger::internal {

// True if `text` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
// True for "0x" followed by 64 hex digits: a chain transaction hash.
bool is_tx_hash(std::string_view text);

bool is_valid_utf8(std::string_view text);

// {"k":"v",...}\n with JSON string escaping of every key and value.
std::string json_line(std::initializer_list<std::pair<std::string_view, std::string_view>> fields);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_INTERNAL_TEXT_HPP
