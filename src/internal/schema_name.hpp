// Validation of configured SQL identifiers. A schema name is configuration, not
// input, but it is the one thing spliced into SQL text (identifiers cannot be
// bound parameters), so it must match a strict pattern first.
#ifndef IDEMLEDGER_SRC_INTERNAL_SCHEMA_NAME_HPP
#define IDEMLEDGER_SRC_INTERNAL_SCHEMA_NAME_HPP

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace idemledger::internal {

// OK if `name` matches [a-z_][a-z0-9_]{0,62}; kInvalidArgument naming the rule otherwise.
absl::Status validate_identifier(std::string_view what, std::string_view name);

// `sql` with every "{schema}" replaced by `schema`.
// REQUIRES: validate_identifier("schema", schema).ok().
std::string with_schema(std::string_view sql, std::string_view schema);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_INTERNAL_SCHEMA_NAME_HPP
