// idemledger/core/status.hpp — errors, SQLSTATE mapping and the one retry rule.
//
// Every fallible call returns absl::Status / absl::StatusOr. The canonical code
// says what the caller should do (abseil's guidance):
//   kUnavailable       retry the call: connection lost, lock not available
//                      (55P03), server shutting down (57P0x), commit in doubt
//                      (retried only for keyed operations, see below)
//   kAborted           retry the whole transaction: deadlock (40P01),
//                      serialization failure (40001), concurrent status change
//   kDeadlineExceeded  statement_timeout fired (57014); retry later
//   kInvalidArgument   bad input: never retry
//   kNotFound          unknown user / event
//   kAlreadyExists     same idempotency key, different payload (a conflict)
//   kFailedPrecondition FSM violation, terminal event, insufficient balance for
//                      a compensation: fix the state first
//
//   absl::StatusOr<Outcome> r = ledger.process_deposit(conn, event);
//   if (!r.ok() && idemledger::is_retryable(r.status())) { /* run it again */ }
//   std::optional<std::string> code = idemledger::sqlstate(r.status());
//
// The SQLSTATE, "connection unusable", "commit in doubt" and "keyed operation"
// travel as payloads so logs keep them and the pool can drop a poisoned
// connection.
//
// An in-doubt commit (the connection died before the answer to a commit) may
// have landed. Running the operation again is safe only if it is keyed: the
// ledger's and intake's operations are (the retry answers kAlreadyApplied or
// "duplicate" if the first try landed) and mark their statuses so;
// is_retryable() is false for an in-doubt status without that mark (libpqxx's
// perform() refuses the same retry for the same reason).
// Functions here are thread-safe.
#ifndef IDEMLEDGER_CORE_STATUS_HPP
#define IDEMLEDGER_CORE_STATUS_HPP

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace idemledger {

// Payload type URLs.
inline constexpr std::string_view kSqlStatePayload = "idemledger/sqlstate";
inline constexpr std::string_view kConnectionBrokenPayload = "idemledger/connection-broken";
inline constexpr std::string_view kCommitInDoubtPayload = "idemledger/commit-in-doubt";
inline constexpr std::string_view kIdempotentPayload = "idemledger/idempotent";

// is_retryable()
//
// True for kUnavailable, kAborted and kDeadlineExceeded — except an in-doubt
// commit of an operation that is not keyed (idempotent_operation()), which
// might apply twice if run again: the caller must find out what happened.
[[nodiscard]] bool is_retryable(const absl::Status& status);

// status_from_sqlstate()
//
// Maps a server error to a canonical status carrying the SQLSTATE. 23505 and
// 23514 map to kAlreadyExists / kFailedPrecondition here, but the ledger
// interprets them before they could reach a caller.
[[nodiscard]] absl::Status status_from_sqlstate(std::string_view sqlstate,
                                                std::string_view message);

// True if the SQLSTATE means the session is gone (class 08, 57P01..57P03)
// or cannot write (25006: a standby, or a primary demoted under it — replace
// the session, never retry on it).
[[nodiscard]] bool sqlstate_breaks_connection(std::string_view sqlstate);

// The SQLSTATE carried by `status`, if any.
[[nodiscard]] std::optional<std::string> sqlstate(const absl::Status& status);

// True if the connection that produced `status` must not be reused.
[[nodiscard]] bool connection_broken(const absl::Status& status);
void mark_connection_broken(absl::Status& status);

// True if the connection died while a commit was in flight: the transaction
// may or may not have landed. Never guess; retry with the same idempotency key.
[[nodiscard]] bool commit_in_doubt(const absl::Status& status);
void mark_commit_in_doubt(absl::Status& status);

// True if `status` comes from a keyed operation: running it again can never
// apply it twice, so even an in-doubt commit may be retried.
[[nodiscard]] bool idempotent_operation(const absl::Status& status);
// Marks `status` as coming from a keyed operation; returns it (for chaining).
absl::Status mark_idempotent(absl::Status status);

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_STATUS_HPP
