// Text helpers shared by every module: UTF-8 validation, the one JSON string
// writer (log lines, alert lines), hex, and quoting of untrusted text for
// humans (error messages, terminals).
#ifndef IDEMLEDGER_SRC_CORE_INTERNAL_TEXT_HPP
#define IDEMLEDGER_SRC_CORE_INTERNAL_TEXT_HPP

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace idemledger::internal {

// True if `text` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view text);

// True for "0x" followed by 64 hex digits: a chain transaction hash.
bool is_tx_hash(std::string_view text);

// Appends `text` as a JSON string literal: quotes, backslashes and control
// characters escaped, each invalid UTF-8 sequence replaced by U+FFFD, so the
// line is valid JSON whatever the input.
void append_json_string(std::string& out, std::string_view text);

// One JSON object on one line, built field by field:
//   JsonLine line; line.add("msg", "x").add("n", 7); std::string s = line.finish();  // {...}\n
class JsonLine {
 public:
  JsonLine& add(std::string_view key, std::string_view value);
  JsonLine& add(std::string_view key, std::int64_t value);
  // The object, closed and followed by a newline.
  std::string finish();

 private:
  void key(std::string_view k);
  std::string out_ = "{";
};

// Lowercase hex of `bytes`.
std::string to_hex(std::span<const unsigned char> bytes);

// `text` in double quotes for an error message or a terminal: printable
// ASCII as is, everything else (control characters, bytes >= 0x7f) as \xNN,
// cut after `max_bytes` input bytes with "..." appended. Never lets escape
// sequences or newlines of untrusted text through.
std::string quoted_for_humans(std::string_view text, std::size_t max_bytes = 80);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_CORE_INTERNAL_TEXT_HPP
