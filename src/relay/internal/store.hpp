// The relay's tables, as one catalogue of statements: what run() reads to
// decide, the leased claims, and every outcome written back. Each write is
// conditional on the claim (claimed_by = this process, still unresolved), so
// a writer that lost its lease changes nothing and is told so.
#ifndef IDEMLEDGER_SRC_RELAY_INTERNAL_STORE_HPP
#define IDEMLEDGER_SRC_RELAY_INTERNAL_STORE_HPP

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/breaker.hpp"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/relay/policy.hpp"

namespace idemledger::internal {

class RelayStore {
 public:
  explicit RelayStore(const Schema& schema);

  // What decide() needs, in one read: due dead letters, undelivered outbox
  // rows nobody holds, and the marker's state (nullopt: never set).
  struct Snapshot {
    bool due_dead_letters = false;
    bool outbox_waiting = false;
    std::optional<BreakerState> marker;
  };
  absl::StatusOr<Snapshot> snapshot(Connection& conn, std::string_view marker_name) const;

  // Leased claims, committed at once; oldest first.
  absl::StatusOr<std::vector<RelayMessage>> claim_outbox(Connection& conn, std::string_view owner,
                                                         absl::Duration lease, int limit) const;
  absl::StatusOr<std::vector<RelayMessage>> claim_dead_letters(Connection& conn,
                                                               std::string_view owner,
                                                               absl::Duration lease,
                                                               int limit) const;

  // Outcomes. Each answers false if the claim was lost meanwhile (nothing written).
  absl::StatusOr<bool> mark_delivered(Connection& conn, const RelayMessage& m,
                                      std::string_view owner) const;
  // Into the envelope (from the outbox: dlq_retries 1; again: + 1). `budget`
  // set: past it the same statement drops it (max_retries_exceeded). Answers
  // nullopt if the claim was lost, else whether it ended dropped.
  absl::StatusOr<std::optional<bool>> dead_letter(Connection& conn, const RelayMessage& m,
                                                  std::string_view owner, std::string_view reason,
                                                  absl::Duration backoff,
                                                  std::optional<int> budget) const;
  absl::StatusOr<bool> drop(Connection& conn, const RelayMessage& m, std::string_view owner,
                            std::string_view reason) const;
  absl::StatusOr<bool> quarantine(Connection& conn, const RelayMessage& m, std::string_view owner,
                                  std::string_view reason) const;
  // Gives claims back (their lease ends now).
  absl::Status release(Connection& conn, std::span<const RelayMessage> messages,
                       std::string_view owner) const;

 private:
  // Off the outbox into an envelope; `dropped_reason` set: born dropped.
  absl::StatusOr<bool> divert(Connection& conn, const RelayMessage& m, std::string_view owner,
                              std::string_view reason, absl::Duration backoff,
                              std::optional<std::string_view> dropped_reason) const;

  std::string snapshot_;
  std::string claim_outbox_;
  std::string claim_dead_letters_;
  std::string delivered_from_outbox_;
  std::string delivered_from_dead_letters_;
  std::string dead_letter_from_outbox_;
  std::string dead_letter_again_;
  std::string drop_dead_letter_;
  std::string quarantine_;
  std::string release_outbox_;
  std::string release_dead_letters_;
};

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_RELAY_INTERNAL_STORE_HPP
