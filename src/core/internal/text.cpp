#include "src/core/internal/text.hpp"

#include <fmt/format.h>

namespace idemledger::internal {
namespace {

// Length of the well-formed UTF-8 sequence starting at text[i], or 0.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  std::uint32_t code_point = 0;
  std::uint32_t min_code_point = 0;
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, code_point = lead & 0x1F, min_code_point = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code_point = lead & 0x0F, min_code_point = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code_point = lead & 0x07, min_code_point = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  if (code_point < min_code_point || code_point > 0x10FFFF ||
      (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    return 0;
  }
  return length;
}

constexpr char kHexDigits[] = "0123456789abcdef";

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence_length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool is_tx_hash(std::string_view text) {
  if (text.size() != 66 || !text.starts_with("0x")) return false;
  for (char c : text.substr(2)) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return false;
  }
  return true;
}

void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const std::size_t n = utf8_sequence_length(text, i);
    if (n == 0) {
      out += "\\ufffd";  // one replacement per invalid byte, like nlohmann's "replace"
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += "\\u00";
          out.push_back(kHexDigits[(c >> 4) & 0xf]);
          out.push_back(kHexDigits[c & 0xf]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void JsonLine::key(std::string_view k) {
  if (out_.size() > 1) out_.push_back(',');
  append_json_string(out_, k);
  out_.push_back(':');
}

JsonLine& JsonLine::add(std::string_view k, std::string_view value) {
  key(k);
  append_json_string(out_, value);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, std::int64_t value) {
  key(k);
  fmt::format_to(std::back_inserter(out_), "{}", value);
  return *this;
}

std::string JsonLine::finish() {
  out_ += "}\n";
  return std::move(out_);
}

std::string to_hex(std::span<const unsigned char> bytes) {
  std::string hex(2 * bytes.size(), '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    hex[2 * i] = kHexDigits[bytes[i] >> 4];
    hex[2 * i + 1] = kHexDigits[bytes[i] & 0x0f];
  }
  return hex;
}

std::string quoted_for_humans(std::string_view text, std::size_t max_bytes) {
  const std::string_view shown = text.substr(0, max_bytes);
  std::string out = "\"";
  for (char c : shown) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '"' && c != '\\') {
      out.push_back(c);
    } else {
      out += "\\x";
      out.push_back(kHexDigits[byte >> 4]);
      out.push_back(kHexDigits[byte & 0xf]);
    }
  }
  out += '"';
  if (text.size() > shown.size()) out += "...";
  return out;
}

}  // namespace idemledger::internal
