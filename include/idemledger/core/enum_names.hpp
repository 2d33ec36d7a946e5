// idemledger/core/enum_names.hpp — one constexpr name table per enum, giving
// both its spelling (to_string) and its reading (parse).
//
//   enum class Color { kRed, kGreen };
//   inline constexpr EnumNames<Color, 2> kColorNames{{{Color::kRed, "red"},
//                                                     {Color::kGreen, "green"}}};
//   constexpr const auto& enum_names(Color) { return kColorNames; }   // found by ADL
//   to_string(Color::kRed) == "red"; parse_enum<Color>("green") == Color::kGreen
//
// The ADL hook `enum_names(E)` lets generic code (to_string, parse_enum,
// Row::get<E>) read any enum the library defines. Everything here is
// constexpr and thread-safe.
#ifndef IDEMLEDGER_CORE_ENUM_NAMES_HPP
#define IDEMLEDGER_CORE_ENUM_NAMES_HPP

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace idemledger {

template <typename E, std::size_t N>
struct EnumNames {
  std::array<std::pair<E, std::string_view>, N> entries;

  // The spelling of `value`; "unknown" for a value outside the table (only
  // reachable by casting an integer into the enum).
  [[nodiscard]] constexpr std::string_view name(E value) const {
    for (const auto& [e, text] : entries) {
      if (e == value) return text;
    }
    return "unknown";
  }

  // The value spelled `text`; nullopt for anything else (exact, case-sensitive).
  [[nodiscard]] constexpr std::optional<E> parse(std::string_view text) const {
    for (const auto& [e, spelling] : entries) {
      if (spelling == text) return e;
    }
    return std::nullopt;
  }

  [[nodiscard]] static constexpr std::size_t size() { return N; }
};

// True for enums that publish a table through the enum_names(E) ADL hook.
template <typename E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  enum_names(e).parse(std::string_view());
};

// to_string() of every named enum: its spelling in the table.
template <NamedEnum E>
[[nodiscard]] constexpr std::string_view to_string(E value) {
  return enum_names(value).name(value);
}

// parse_enum<E>("...") reads a spelling back; nullopt for anything else.
template <NamedEnum E>
[[nodiscard]] constexpr std::optional<E> parse_enum(std::string_view text) {
  return enum_names(E{}).parse(text);
}

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_ENUM_NAMES_HPP
