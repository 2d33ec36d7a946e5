#include "idemledger/event_status.hpp"

#include <fmt/format.h>

#include <array>

#include "idemledger/connection.hpp"
#include "idemledger/status.hpp"
#include "src/internal/absl_compat.hpp"
#include "src/internal/schema_name.hpp"
#include "src/internal/sqlstates.hpp"

namespace idemledger {
namespace {
constexpr std::array<std::string_view, 5> kNames = {"pending", "enqueued", "processing",
                                                    "confirmed", "failed"};
}  // namespace

std::string_view to_string(EventStatus s) { return kNames[static_cast<std::size_t>(s)]; }

std::optional<EventStatus> parse_event_status(std::string_view text) {
  for (EventStatus s : kAllEventStatuses) {
    if (to_string(s) == text) return s;
  }
  return std::nullopt;
}

absl::Status transition_event_status(Connection& conn, std::string_view schema,
                                     std::string_view event_id, EventStatus from, EventStatus to) {
  // Checked here too so an invalid edge costs no round trip; the server-side
  // function checks the same table (copied from kValidTransitions by migrate).
  if (!is_valid_transition(from, to)) {
    return absl::FailedPreconditionError(
        fmt::format("invalid event status transition {} -> {}", to_string(from), to_string(to)));
  }
  if (absl::Status s = internal::validate_identifier("schema", schema); !s.ok()) return s;
  const std::string sql =
      internal::with_schema("SELECT {schema}.transition_event($1, $2, $3)", schema);
  absl::StatusOr<Result> r =
      conn.execute(sql, {Param(event_id), Param(to_string(from)), Param(to_string(to))});
  if (r.ok()) return absl::OkStatus();
  return internal::interpret_ledger_error(r.status());
}

}  // namespace idemledger
