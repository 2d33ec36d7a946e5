#include "idemledger/core/result.hpp"

#include <fmt/format.h>

#include <charconv>

#include "absl/time/civil_time.h"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/text.hpp"

namespace idemledger {
namespace internal {

bool read_value(std::string_view text, std::string& out) {
  out.assign(text);
  return true;
}

bool read_value(std::string_view text, std::int64_t& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

bool read_value(std::string_view text, int& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

bool read_value(std::string_view text, bool& out) {
  if (text == "t" || text == "true") return out = true, true;
  if (text == "f" || text == "false") return out = false, true;
  return false;
}

bool read_value(std::string_view text, Amount& out) {
  absl::StatusOr<Amount> a = Amount::parse_numeric(text);
  if (!a.ok()) return false;
  out = *a;
  return true;
}

// PostgreSQL's timestamptz output in the ISO DateStyle:
// "2026-11-29 20:46:00.073152+00", offsets "+05:30" or "-03" also possible.
bool read_value(std::string_view text, absl::Time& out) {
  std::string normalized(text);
  const std::size_t sign = normalized.find_last_of("+-");
  if (sign == std::string::npos || sign < 19) return false;
  if (normalized.size() - sign == 3) normalized += ":00";  // "+00" -> "+00:00"
  std::string error;
  return absl::ParseTime("%Y-%m-%d %H:%M:%E*S%Ez", normalized, &out, &error);
}

}  // namespace internal

absl::StatusOr<Row> Result::single_row(std::string_view what) const {
  if (rows.size() != 1) {
    return absl::InternalError(fmt::format("{}: expected one row, got {}", what, rows.size()));
  }
  return Row(*this, 0);
}

bool Row::is_null(std::size_t column) const {
  return column >= size() || !result_->rows[index_][column].has_value();
}

std::string Row::column_name(std::size_t column) const {
  if (column < result_->columns.size()) return result_->columns[column];
  return fmt::format("#{}", column);
}

absl::Status Row::unreadable(std::size_t column, std::string_view expected,
                             std::string_view got) const {
  return absl::InternalError(
      fmt::format("column {}: expected {}{}", column_name(column), expected,
                  got.empty() ? "" : fmt::format(", got {}", internal::quoted_for_humans(got))));
}

}  // namespace idemledger
