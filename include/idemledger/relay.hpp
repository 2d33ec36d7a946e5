// idemledger/relay.hpp — deliver outbox rows to an external API that goes
// down for minutes at a time, without losing, repeating or hammering.
//
//   idemledger::Relay relay({.schema = "idemledger",
//                            .transport = post_to_api,   // the host's HTTP call
//                            .policies = {{"credited", idemledger::RelayPolicy::retries(5)}}});
//   relay.run(sessions, [] { return stop_requested; });  // until SIGTERM; drains first
//
// The Ledger writes an outbox row in the transaction that changes the
// balance, so a replayed event never writes a second one. The relay:
// - claims undelivered rows under a lease (FOR UPDATE SKIP LOCKED, committed
//   at once) and marks a row published only after the downstream answered
//   2xx: "read" is never committed before "delivered";
// - keeps at most max_in_flight deliveries per process (a fixed set of
//   tracked delivery threads; it claims only as many rows as are free), and
//   on stop claims nothing new and finishes every delivery it holds;
// - retries a failed call (retry policy, full-jitter backoff), then
//   moves the message into relay_dead_letters: an envelope around the
//   unchanged message with dlq_retries (incremented by the write, so it only
//   grows, whichever process or restart writes it), first_dlq_at (set once)
//   and the reason. The database refuses any other change to an envelope;
// - sets the shared "downstream unavailable" marker: the relay's circuit
//   breaker row in PostgreSQL, open for marker_ttl. Every replica pauses
//   (claims nothing) while it lives; when it expires exactly one replica
//   probes with one message; success closes it and every replica drains the
//   DLQ first, at most drain_concurrency at a time per process, before new
//   work; failure re-sets it;
// - applies each topic's policy to a dead letter before resending it: either
//   a retry budget (dropped as max_retries_exceeded once dlq_retries exceeds
//   it), or a deadline from first_dlq_at plus a relevance check against a
//   source of truth: MATCH resend, MISMATCH drop (event_obsolete), EXPIRED
//   drop (expired), QUERY_FAILED back to the DLQ; past the deadline it is
//   dropped (deadline_exceeded) whatever the check would say;
// - drops a message the downstream refuses outright (4xx: retrying cannot
//   help), with the refusal as reason;
// - quarantines a message it cannot decode (a topic without a policy, a
//   payload the topic's validator refuses) at once, spending no retries.
// Dropped messages stay in relay_dead_letters with resolution 'dropped' and
// their reason: nothing is silently deleted.
//
// An outcome that could not be written because the session died after the
// downstream answered is written again on a fresh session, not sent again.
// Exactly once toward the downstream holds while leases do not expire under
// a live delivery (lease > retry.max_attempts × (transport timeout +
// retry.max_delay)). A
// process killed between the 2xx and the mark leaves a row that is delivered
// again after its lease: the transport sends the outbox id as an idempotency
// key so the downstream can tell.
//
// Relay is thread-safe; run() may be called by one thread at a time.
#ifndef IDEMLEDGER_RELAY_HPP
#define IDEMLEDGER_RELAY_HPP

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/circuit_breaker.hpp"
#include "idemledger/connection.hpp"
#include "idemledger/log.hpp"
#include "idemledger/metrics.hpp"
#include "idemledger/migrate.hpp"
#include "idemledger/retry.hpp"

namespace idemledger {

class Connection;

// One message on its way out. From the outbox, or from the DLQ with its
// envelope fields set.
struct RelayMessage {
  std::int64_t outbox_id = 0;
  std::string topic;
  std::string payload;              // the outbox row's JSON, exactly as stored; never rewritten
  std::int64_t dead_letter_id = 0;  // 0: straight from the outbox
  int dlq_retries = 0;
  absl::Duration since_first_dlq;  // measured by the server at claim time
  std::string reason;              // why it was dead-lettered last

  [[nodiscard]] bool from_dead_letters() const { return dead_letter_id != 0; }
};

// Is a dead letter still worth sending? Asked of a source of truth.
enum class Relevance {
  kMatch,        // still true: resend
  kMismatch,     // the world moved on: drop as obsolete
  kExpired,      // no longer wanted whatever its state: drop
  kQueryFailed,  // the source of truth did not answer: back to the DLQ
};
[[nodiscard]] std::string_view to_string(Relevance relevance);

// The host's call to the downstream API. OK for a 2xx. A retryable status
// (is_retryable(): kUnavailable for 5xx, 429 and refused connections,
// kDeadlineExceeded for timeouts) is retried and then dead-lettered; any
// other status is a refusal (4xx) and the message is dropped with it.
using DeliveryTransport = std::function<absl::Status(const RelayMessage& message)>;

// Asked with a session the relay holds, before a dead letter is resent.
using RelevanceCheck = std::function<Relevance(Connection& conn, const RelayMessage& message)>;

// OK if the relay can send `message`; otherwise it goes to quarantine with
// the status message as reason.
using MessageValidator = std::function<absl::Status(const RelayMessage& message)>;

// What the relay does with one topic's dead letters.
struct RelayPolicy {
  // A retry budget: once dlq_retries exceeds it, dropped (max_retries_exceeded).
  [[nodiscard]] static RelayPolicy retries(int max_retries, MessageValidator validate = nullptr);
  // A deadline from first_dlq_at, and a relevance check before every resend.
  [[nodiscard]] static RelayPolicy deadline(absl::Duration deadline, RelevanceCheck relevance,
                                            MessageValidator validate = nullptr);

  std::optional<int> max_retries;  // set: the retry-budget policy
  absl::Duration deadline_after = absl::InfiniteDuration();
  RelevanceCheck relevance;   // set: the deadline policy
  MessageValidator validate;  // nullptr: any JSON object decodes
};

// ledger_relevance()
//
// A RelevanceCheck for the Ledger's own notifications, with its tables as
// the source of truth: "credited"/"debited" MATCH while the event is
// confirmed and no reorg compensation reversed it, else MISMATCH;
// "insufficient_funds" MATCH while the event is failed; anything else
// EXPIRED (the ledger cannot vouch for it); a query error QUERY_FAILED.
[[nodiscard]] RelevanceCheck ledger_relevance(std::string_view schema = kDefaultSchema);

enum class RelayMode {
  kNormal,    // delivering the outbox
  kPaused,    // the downstream-unavailable marker lives: claiming nothing
  kDraining,  // the marker is gone and due dead letters wait: DLQ first
};
[[nodiscard]] std::string_view to_string(RelayMode mode);

// What became of one delivery.
enum class RelayDisposition {
  kDelivered,     // 2xx; outbox row published (and dead letter resolved)
  kDeadLettered,  // retries exhausted: into the DLQ (or back, dlq_retries + 1)
  kDropped,       // policy, deadline, relevance or a refusal ended it; kept with its reason
  kQuarantined,   // undecodable: relay_quarantine, no retries spent
  kNotClaimed,    // the lease was lost meanwhile; whoever holds it now decides
};
[[nodiscard]] std::string_view to_string(RelayDisposition disposition);

struct RelayOptions {
  // REQUIRES: migrate() ran for it.
  std::string schema = std::string(kDefaultSchema);
  // Names the downstream: its marker is the circuit breaker "relay:<name>".
  std::string name = "notify_api";
  DeliveryTransport transport;  // REQUIRES: set
  // Per topic; a topic without one is quarantined.
  absl::flat_hash_map<std::string, RelayPolicy> policies;

  int max_in_flight = 8;      // deliveries at once per process (NORMAL)
  int drain_concurrency = 2;  // dead letters at once per process (DRAINING)
  // Calls per delivery before it is dead-lettered, and the backoff between.
  RetryPolicy retry = {
      .max_attempts = 3, .base_delay = absl::Milliseconds(50), .max_delay = absl::Seconds(1)};
  // Exclusive hold on a claimed row; must outlast one whole delivery.
  absl::Duration lease = absl::Seconds(60);
  // A dead letter sent back (QUERY_FAILED, a failed resend) is due again after this.
  absl::Duration dlq_backoff = absl::Seconds(5);
  // How long the downstream-unavailable marker lives (the breaker's open
  // period), and how many dead-lettered deliveries in a row set it.
  absl::Duration marker_ttl = absl::Seconds(30);
  int failure_threshold = 3;
  absl::Duration probe_lease = absl::Seconds(30);
  // Between looks for work when there is none, or while paused.
  absl::Duration poll_interval = absl::Milliseconds(200);
  // This process among the replicas; empty: "<hostname>:<pid>".
  std::string owner;
  // idemledger_relay_messages_total{result}, idemledger_relay_mode,
  // idemledger_relay_in_flight and the breaker's state; nullptr records nothing.
  MetricsRegistry* metrics = nullptr;
  // One line per dead-lettered, dropped or quarantined message and per mode
  // change; nullptr logs nothing.
  LogSink* log = nullptr;
};

class Relay {
 public:
  explicit Relay(RelayOptions options);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // run()
  //
  // Delivers until `stop_requested()` returns true, then stops claiming,
  // finishes every delivery in flight and returns. Uses max_in_flight + 1
  // sessions at most. Each cycle: decide(), then (unless paused) claim as many
  // rows as delivery threads are free, from the DLQ while draining. Returns an error only for a
  // configuration it cannot run (it rides out database and downstream outages).
  absl::Status run(const SessionLender& sessions, const std::function<bool()>& stop_requested);

  // The mode this process last decided on (NORMAL before run()).
  [[nodiscard]] RelayMode mode() const { return mode_.load(std::memory_order_relaxed); }

  // --- the steps run() is made of; usable one by one ----------------------

  // decide()
  //
  // Consults the shared marker and the DLQ. `probe` set means the marker
  // expired and this process is the one to try: it sends one message (from
  // the DLQ when draining) with deliver(..., /*probe=*/true) before anything else.
  struct Decision {
    RelayMode mode = RelayMode::kNormal;
    bool probe = false;
  };
  [[nodiscard]] absl::StatusOr<Decision> decide(Connection& conn);

  // claim_outbox() / claim_dead_letters()
  //
  // Leases up to `limit` undelivered outbox rows (oldest first) / due dead
  // letters, committed before returning.
  [[nodiscard]] absl::StatusOr<std::vector<RelayMessage>> claim_outbox(Connection& conn, int limit);
  [[nodiscard]] absl::StatusOr<std::vector<RelayMessage>> claim_dead_letters(Connection& conn,
                                                                             int limit);

  // deliver()
  //
  // Everything that happens to one claimed message: decoding (or
  // quarantine), the dead letter's policy, the calls with retries, and the
  // recording of the outcome. `probe`: this is the breaker's one trial call.
  // A non-OK status means the outcome could not be recorded; the lease then
  // brings the message back.
  struct Outcome {
    RelayDisposition disposition = RelayDisposition::kDelivered;
    // False if it was decided without calling (quarantine, policy, relevance):
    // a probe that made no call has not tested the downstream yet.
    bool called_downstream = false;
  };
  [[nodiscard]] absl::StatusOr<Outcome> deliver(Connection& conn, const RelayMessage& message,
                                                bool probe = false);

  // release()
  //
  // Gives claimed messages back without trying them (their lease ends now).
  [[nodiscard]] absl::Status release(Connection& conn, const std::vector<RelayMessage>& messages);

  // Who this process is among the replicas.
  [[nodiscard]] std::string owner() const { return breaker_.owner(); }

 private:
  struct Sql;
  absl::Status validate_options() const;
  [[nodiscard]] absl::Status decode(const RelayMessage& message) const;
  [[nodiscard]] absl::Status send_with_retries(const RelayMessage& message) const;
  // What deliver() decided and did, not yet written down: `record` writes it,
  // and run() may write it again on a fresh session if the first one died
  // after the downstream had answered (instead of sending it again).
  struct Attempt {
    std::function<absl::StatusOr<RelayDisposition>(Connection&)> record;
    bool called_downstream = false;
  };
  [[nodiscard]] Attempt attempt(Connection& conn, const RelayMessage& message, bool probe);
  [[nodiscard]] absl::StatusOr<Outcome> finish(Connection& conn, const Attempt& attempt);
  // The reason a dead letter must not be resent now (empty: send it), or
  // kQueryFailed's requeue.
  struct Verdict {
    std::optional<std::string> drop_reason;
    bool requeue = false;
  };
  [[nodiscard]] Verdict judge(Connection& conn, const RelayMessage& message,
                              const RelayPolicy& policy) const;
  absl::StatusOr<RelayDisposition> record_delivered(Connection& conn, const RelayMessage& message);
  absl::StatusOr<RelayDisposition> record_dead_letter(Connection& conn, const RelayMessage& message,
                                                      const RelayPolicy& policy,
                                                      std::string_view reason);
  absl::StatusOr<RelayDisposition> record_dropped(Connection& conn, const RelayMessage& message,
                                                  std::string_view reason);
  absl::StatusOr<RelayDisposition> record_quarantined(Connection& conn, const RelayMessage& message,
                                                      std::string_view reason);
  // Tells the shared marker how the downstream answered (see failures_recorded_).
  void report_downstream(Connection& conn, bool probe, bool healthy);
  void count(RelayDisposition disposition);
  void log_message(LogLevel level, std::string_view what, const RelayMessage& message,
                   std::string_view reason) const;
  void set_mode(RelayMode mode);

  RelayOptions options_;
  absl::Status options_status_;
  std::unique_ptr<const Sql> sql_;  // null when options_status_ is not OK
  std::string marker_name_;         // the breaker's name: "relay:<name>"
  CircuitBreaker breaker_;
  std::atomic<RelayMode> mode_{RelayMode::kNormal};
  // Set after this process recorded a failure: its next success resets the
  // shared count (successes otherwise write nothing, so the marker row is
  // not a hot spot).
  std::atomic<bool> failures_recorded_{false};
  Counter* results_[5] = {};
  Gauge* mode_gauge_ = nullptr;
  Gauge* in_flight_gauge_ = nullptr;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_RELAY_HPP
