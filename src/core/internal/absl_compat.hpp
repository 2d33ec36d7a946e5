// Debian 12's abseil is built with its own absl::string_view (not an alias of
// std::string_view); these convert at the boundary without copying.
#ifndef IDEMLEDGER_SRC_CORE_INTERNAL_ABSL_COMPAT_HPP
#define IDEMLEDGER_SRC_CORE_INTERNAL_ABSL_COMPAT_HPP

#include <fmt/format.h>

#include <string_view>

#include "absl/strings/string_view.h"

namespace idemledger::internal {

inline absl::string_view to_absl(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view to_std(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace idemledger::internal

// Lets fmt::format take absl::Status::message() directly.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  auto format(absl::string_view s, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};

#endif  // IDEMLEDGER_SRC_CORE_INTERNAL_ABSL_COMPAT_HPP
