#include "idemledger/ledger/dead_letter.hpp"

#include "idemledger/core/connection.hpp"

namespace idemledger {

absl::Status append_dead_letter(Connection& conn, const Schema& schema, const DeadLetter& l,
                                std::string_view spool_id) {
  const auto or_null = [](std::string_view s) { return s.empty() ? Param() : Param(s); };
  return conn
      .execute(schema.qualify("SELECT {schema}.dead_letter_append($1, $2, $3::bigint, $4, "
                              "$5::numeric, $6, $7, $8, $9)"),
               Params(l.event_id, l.event_type, l.user_id, or_null(l.asset), or_null(l.amount),
                      l.reason, l.error, or_null(l.trace_id), or_null(spool_id)))
      .status();
}

}  // namespace idemledger
