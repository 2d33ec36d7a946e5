#include "idemledger/core/schema.hpp"

#include <fmt/format.h>

#include "src/core/internal/text.hpp"

namespace idemledger {

absl::StatusOr<Schema> Schema::create(std::string_view name) {
  if (!internal::is_sql_identifier(name)) {
    // The name may be anything a misconfigured environment holds: shown
    // bounded and escaped, never raw.
    return absl::InvalidArgumentError(
        fmt::format("schema name must match [a-z_][a-z0-9_]{{0,62}}, got {}",
                    internal::quoted_for_humans(name)));
  }
  Schema s;
  s.assign(name);
  return s;
}

std::string Schema::qualify(std::string_view sql) const {
  static constexpr std::string_view kPlaceholder = "{schema}";
  std::string out;
  out.reserve(sql.size() + 4 * name().size());
  for (std::size_t at = 0;;) {
    const std::size_t next = sql.find(kPlaceholder, at);
    out.append(sql.substr(at, next - at));
    if (next == std::string_view::npos) return out;
    out.append(name());
    at = next + kPlaceholder.size();
  }
}

}  // namespace idemledger
