#include "src/internal/schema_name.hpp"

#include <fmt/format.h>

#include "absl/strings/str_replace.h"
#include "src/internal/absl_compat.hpp"

namespace idemledger::internal {

absl::Status validate_identifier(std::string_view what, std::string_view name) {
  const auto lower_or_underscore = [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; };
  bool ok = !name.empty() && name.size() <= 63 && lower_or_underscore(name.front());
  for (char c : name) ok = ok && (lower_or_underscore(c) || (c >= '0' && c <= '9'));
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("{} name must match [a-z_][a-z0-9_]{{0,62}}, got \"{}\"", what, name));
}

std::string with_schema(std::string_view sql, std::string_view schema) {
  return absl::StrReplaceAll(to_absl(sql), {{"{schema}", to_absl(schema)}});
}

}  // namespace idemledger::internal
