// idemledger/core/schema.hpp — the PostgreSQL schema the library's tables live in.
//
// A schema name is the one thing spliced into SQL text (identifiers cannot be
// bound parameters), so it is checked once, where it enters, and then carried
// as a Schema that cannot hold anything else:
//
//   idemledger::Ledger ledger({.schema = "payments"});          // a literal: checked at compile
//   time absl::StatusOr<idemledger::Schema> s = idemledger::Schema::create(getenv("SCHEMA")); if
//   (!s.ok()) return s.status();                              // kInvalidArgument naming the rule
//   std::string sql = s->qualify("SELECT balance FROM {schema}.accounts");
//
// Guarantee: a Schema always matches [a-z_][a-z0-9_]{0,62} — lower case,
// never quoted, never longer than PostgreSQL's 63-byte identifier limit.
//
// Schema is a small trivially copyable value type; it is thread-compatible.
#ifndef IDEMLEDGER_CORE_SCHEMA_HPP
#define IDEMLEDGER_CORE_SCHEMA_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace idemledger {

namespace internal {
// Not constexpr on purpose: reaching it in a consteval context is the compile
// error that names a bad literal.
void schema_literal_must_match_a_z_underscore_then_a_z_0_9_underscore_up_to_63(const char*);

constexpr bool is_sql_identifier(std::string_view name) {
  const auto lower_or_underscore = [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; };
  if (name.empty() || name.size() > 63 || !lower_or_underscore(name.front())) return false;
  for (char c : name) {
    if (!lower_or_underscore(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}
}  // namespace internal

class Schema {
 public:
  static constexpr std::size_t kMaxLength = 63;

  // Schema::create()
  //
  // For names that arrive at run time (environment, flags, configuration
  // files): kInvalidArgument, naming the rule, unless `name` matches
  // [a-z_][a-z0-9_]{0,62}.
  [[nodiscard]] static absl::StatusOr<Schema> create(std::string_view name);

  // A literal in the source, checked by the compiler: Schema s = "payments";
  // An invalid literal does not compile. (Implicit, so options structs keep
  // their designated initialisers: {.schema = "payments"}.)
  consteval Schema(const char* literal) {  // NOLINT(google-explicit-constructor)
    const std::string_view name(literal);
    if (!internal::is_sql_identifier(name)) {
      internal::schema_literal_must_match_a_z_underscore_then_a_z_0_9_underscore_up_to_63(literal);
    }
    assign(name);
  }

  [[nodiscard]] constexpr std::string_view name() const { return {name_.data(), size_}; }

  // qualify()
  //
  // `sql` with every "{schema}" replaced by the name.
  [[nodiscard]] std::string qualify(std::string_view sql) const;

  friend constexpr bool operator==(const Schema& a, const Schema& b) {
    return a.name() == b.name();
  }

 private:
  constexpr Schema() = default;
  constexpr void assign(std::string_view name) {
    for (std::size_t i = 0; i < name.size(); ++i) name_[i] = name[i];
    size_ = static_cast<std::uint8_t>(name.size());
  }

  std::array<char, kMaxLength + 1> name_{};
  std::uint8_t size_ = 0;
};

// Where migrate() puts the tables unless told otherwise.
inline constexpr Schema kDefaultSchema = "idemledger";

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_SCHEMA_HPP
