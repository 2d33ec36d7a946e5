// idemledger/queue/dlq.hpp — dead letters that are never lost.
//
// The dead_letter_queue table keeps every failed attempt (no unique on the
// event id). Most dead letters are written by the database itself, in the
// same transaction that fails the event (dispatcher.hpp). This is the path for
// the moment the database cannot take one: the record is appended to a local
// spool file (one sealed JSON line, fsync'd) and drained back into the table
// when the database returns; if even the spool fails, a critical alert carries
// the whole record, so an operator can still restore it.
//
//   DeadLetterQueue dlq({.schema = "idemledger", .spool_path = "/var/lib/app/dlq.spool",
//                        .spool_key = key_from_config});   // >= 32 bytes
//   if (absl::Status s = dlq.check_options(); !s.ok()) exit_with(s);  // at startup
//   dlq.record(conn, letter);           // kTable, kSpool or kAlertOnly
//   absl::StatusOr<int> n = dlq.drain_spool(conn);   // on start-up and periodically
//
// Guarantees:
// - A record written to the spool reaches the table exactly once (each
//   carries a unique spool id; the table has a unique index on it), even if
//   the process dies between the drain's commit and the spool's truncation.
// - Nothing but a letter this library spooled becomes a dead letter (which an
//   operator may replay into money): every line is sealed with HMAC-SHA256
//   under `spool_key`, and the drain moves only lines whose seal matches and
//   whose fields all have their types. Any other line — forged, altered, torn
//   by a crash, another key's — goes to the quarantine file with a critical
//   alert, and the lines after it are still drained.
// - The spool and quarantine files are used only if they are regular files
//   (never followed through a symbolic link), owned by this process's user,
//   with one name and mode 0600; created 0600. Anything else is refused with
//   a critical alert: nothing read, nothing truncated, nothing appended.
// - A spool above `max_spool_bytes` is not read (alert; kResourceExhausted).
// - No exception escapes: malformed input is a status or a quarantined line.
// Replaying or discarding a dead letter is an operator action, never automatic.
//
// DeadLetterQueue is thread-safe; several processes may share one spool file
// (every access holds an exclusive flock on it).
#ifndef IDEMLEDGER_QUEUE_DLQ_HPP
#define IDEMLEDGER_QUEUE_DLQ_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/alert.hpp"
#include "idemledger/core/event_status.hpp"
#include "idemledger/core/log.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/ledger/dead_letter.hpp"
#include "idemledger/ledger/ledger.hpp"

namespace idemledger {

class Connection;

// The shortest spool key accepted, in bytes.
inline constexpr std::size_t kMinSpoolKeyLength = 32;
// A spool line longer than this is quarantined unread.
inline constexpr std::size_t kMaxSpoolLineLength = 1 << 20;

struct DeadLetterQueueOptions {
  Schema schema = kDefaultSchema;
  std::string spool_path;  // a local file; its directory must exist; "" for no spool
  // Seals each spool line; required (>= kMinSpoolKeyLength bytes) with a
  // spool. Without one nothing is spooled (record() alerts with the whole
  // letter) and drain_spool() is kFailedPrecondition.
  std::string spool_key;
  std::string quarantine_path;  // "" means spool_path + ".quarantine"
  std::int64_t max_spool_bytes = std::int64_t{64} << 20;
  AlertSink* alerts = nullptr;  // nullptr means stderr_alert_sink()
  LogSink* log = nullptr;       // spooling and draining; nullptr logs nothing
};

class DeadLetterQueue {
 public:
  explicit DeadLetterQueue(DeadLetterQueueOptions options);

  enum class Destination { kTable, kSpool, kAlertOnly };

  // check_options(): OK, or kFailedPrecondition naming what the options lack
  // (a spool without a long enough key). For a service's startup check.
  [[nodiscard]] absl::Status check_options() const;

  // record()
  //
  // Writes `letter` to the table, else to the spool, else into a critical
  // alert with the full record. Never fails silently; never throws.
  Destination record(Connection& conn, const DeadLetter& letter) const;

  // spool()
  //
  // Appends `letter` to the spool directly (when the caller already knows the
  // database is gone); false if the spool could not be written and fsync'd.
  [[nodiscard]] bool spool(const DeadLetter& letter) const;

  // drain_spool()
  //
  // Inserts every sealed, well-typed spooled record into the table in one
  // transaction, appends every other line to the quarantine file (alert),
  // then empties the spool. Returns how many records were moved (0 if none).
  // kFailedPrecondition: the spool file was refused (alerted) or no key;
  // kResourceExhausted: above max_spool_bytes; kUnavailable: I/O, or the
  // quarantine file could not take a bad line (then nothing is drained).
  [[nodiscard]] absl::StatusOr<int> drain_spool(Connection& conn) const;

  // What an operator decided about one dead letter, and what came of it.
  struct ReplayResult {
    std::string event_id;
    std::int64_t audit_id = 0;  // the operator_actions row
    // Unset: the event is pending again and a worker applies it. Set: the
    // dead letter had no queued event (a reorg compensation, a host-recorded
    // letter) and was applied now, with this outcome.
    std::optional<Outcome> applied_now;
  };

  // replay()
  //
  // Re-enters the normal exactly-once path for dead letter `id`: in one
  // transaction, records (action, reason, actor) in operator_actions, closes
  // every open dead letter of the event, and either moves its failed event
  // back to pending with fresh retry budgets (the operator-only FSM edge) or
  // applies it through `ledger` at once. If that apply fails, nothing changed
  // and the letter stays open. kNotFound: no such letter; kFailedPrecondition:
  // already resolved; kInvalidArgument: empty reason or actor.
  // REQUIRES: `ledger` uses this queue's schema.
  [[nodiscard]] absl::StatusOr<ReplayResult> replay(Connection& conn, const Ledger& ledger,
                                                    std::int64_t id, std::string_view reason,
                                                    std::string_view actor) const;

  // A dead letter as an operator sees it, with its event's state (if it has
  // a queued event: a reorg compensation's letter has none).
  struct Record {
    std::int64_t id = 0;
    DeadLetter letter;
    int attempt = 0;
    absl::Time created_at;
    std::optional<std::string> resolution;  // nullopt: open
    std::optional<EventStatus> event_status;
    int retry_count = 0;
    int recovery_count = 0;
  };

  // list(): open dead letters, newest first, at most `limit`.
  [[nodiscard]] absl::StatusOr<std::vector<Record>> list(Connection& conn, int limit) const;
  // show(): one dead letter, open or resolved; kNotFound if there is none.
  [[nodiscard]] absl::StatusOr<Record> show(Connection& conn, std::int64_t id) const;

  // discard()
  //
  // Closes dead letter `id` without replaying it and records who and why.
  // Returns the operator_actions id. kNotFound if no such open letter.
  [[nodiscard]] absl::StatusOr<std::int64_t> discard(Connection& conn, std::int64_t id,
                                                     std::string_view reason,
                                                     std::string_view actor) const;

 private:
  void refuse_file(std::string_view path, std::string_view why) const;

  DeadLetterQueueOptions options_;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_QUEUE_DLQ_HPP
