#include "idemledger/core/status.hpp"

#include <fmt/format.h>

#include "absl/strings/cord.h"
#include "src/core/internal/absl_compat.hpp"

namespace idemledger {

bool is_retryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
      return !commit_in_doubt(status) || idempotent_operation(status);
    default:
      return false;
  }
}

bool sqlstate_breaks_connection(std::string_view sqlstate) {
  // 25006: the session is on a node that cannot write — a standby, or a
  // primary demoted under it. Nothing was written; a new connection (with
  // target_session_attrs=read-write) finds the primary.
  // 25P03, 25P04, 57P05: the server ended the session for sitting idle in a
  // transaction, for a transaction that ran too long, or for sitting idle:
  // its transaction rolled back.
  return sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" ||
         sqlstate == "57P03" || sqlstate == "57P05" || sqlstate == "25006" ||
         sqlstate == "25P03" || sqlstate == "25P04";
}

absl::Status status_from_sqlstate(std::string_view sqlstate, std::string_view message) {
  const std::string text = fmt::format("{} [SQLSTATE {}]", message, sqlstate);
  absl::Status status;
  if (sqlstate == "55P03" || sqlstate == "53300" || sqlstate_breaks_connection(sqlstate)) {
    status = absl::UnavailableError(text);  // lock not available, too many connections, gone,
                                            // read-only node
  } else if (sqlstate == "40003") {
    status = absl::UnavailableError(text);  // statement completion unknown
    mark_commit_in_doubt(status);
  } else if (sqlstate == "57014") {
    status = absl::DeadlineExceededError(text);  // statement_timeout
  } else if (sqlstate == "40P01" || sqlstate == "40001") {
    status = absl::AbortedError(text);  // deadlock victim / serialization failure
  } else if (sqlstate == "23505") {
    status = absl::AlreadyExistsError(text);
  } else if (sqlstate == "23514" || sqlstate == "23503" || sqlstate == "25P02") {
    status = absl::FailedPreconditionError(text);
  } else if (sqlstate.starts_with("22")) {
    status = absl::InvalidArgumentError(text);  // data exception
  } else {
    status = absl::InternalError(text);
  }
  status.SetPayload(internal::to_absl(kSqlStatePayload), absl::Cord(std::string(sqlstate)));
  if (sqlstate_breaks_connection(sqlstate)) mark_connection_broken(status);
  return status;
}

std::optional<std::string> sqlstate(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(internal::to_absl(kSqlStatePayload));
  if (!payload) return std::nullopt;
  return std::string(*payload);
}

bool connection_broken(const absl::Status& status) {
  return status.GetPayload(internal::to_absl(kConnectionBrokenPayload)).has_value();
}

void mark_connection_broken(absl::Status& status) {
  status.SetPayload(internal::to_absl(kConnectionBrokenPayload), absl::Cord("1"));
}

bool commit_in_doubt(const absl::Status& status) {
  return status.GetPayload(internal::to_absl(kCommitInDoubtPayload)).has_value();
}

void mark_commit_in_doubt(absl::Status& status) {
  status.SetPayload(internal::to_absl(kCommitInDoubtPayload), absl::Cord("1"));
}

}  // namespace idemledger

namespace idemledger {

bool idempotent_operation(const absl::Status& status) {
  return status.GetPayload(internal::to_absl(kIdempotentPayload)).has_value();
}

absl::Status mark_idempotent(absl::Status status) {
  if (!status.ok()) status.SetPayload(internal::to_absl(kIdempotentPayload), absl::Cord("1"));
  return status;
}

}  // namespace idemledger
