#include "idemledger/ledger/transitions.hpp"

#include <fmt/format.h>

#include "idemledger/core/connection.hpp"
#include "src/ledger/internal/sqlstates.hpp"

namespace idemledger {

absl::Status transition_event_status(Connection& conn, const Schema& schema,
                                     std::string_view event_id, EventStatus from, EventStatus to) {
  // Checked here too so an invalid edge costs no round trip; the server-side
  // function checks the same table (copied from kValidTransitions by migrate).
  if (!is_valid_transition(from, to)) {
    return absl::FailedPreconditionError(
        fmt::format("invalid event status transition {} -> {}", to_string(from), to_string(to)));
  }
  absl::StatusOr<Result> r =
      conn.execute(schema.qualify("SELECT {schema}.transition_event($1, $2, $3)"),
                   Params(event_id, to_string(from), to_string(to)));
  if (r.ok()) return absl::OkStatus();
  return internal::interpret_ledger_error(r.status());
}

}  // namespace idemledger
