// idemledger/relay/relay.hpp — deliver outbox rows to an external API that
// goes down for minutes at a time, without losing, repeating or hammering.
//
//   absl::StatusOr<std::unique_ptr<idemledger::Relay>> relay = idemledger::Relay::create(
//       {.schema = "idemledger",
//        .transport = post_to_api,   // the host's HTTP call
//        .policies = {{"credited", idemledger::RelayPolicy::retries(5)}}});
//   if (!relay.ok()) return relay.status();              // a configuration it cannot run
//   (*relay)->run(sessions, [] { return stop_requested; });  // until SIGTERM; drains first
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
// - applies each topic's policy (relay/policy.hpp) to a dead letter before
//   resending it;
// - drops a message the downstream refuses outright (4xx: retrying cannot
//   help), with the refusal as reason;
// - quarantines a message it cannot decode (a topic without a policy, a
//   payload the topic's validator refuses) at once, spending no retries.
// Dropped messages stay in relay_dead_letters with resolution 'dropped' and
// their reason: nothing is silently deleted.
//
// An outcome that could not be written because the session died after the
// downstream answered is written again on a fresh session, not sent again.
// Delivery is at least once; a message reaches the downstream twice only when
// the relay could not see its 2xx:
// - the call ran past the transport's deadline and the downstream still acted
//   on it (a request queued behind hung ones, say): the relay counts the call
//   failed and sends again;
// - a process killed between the 2xx and the mark: the row is delivered again
//   after its lease.
// A lease never expires under a live delivery (lease > retry.max_attempts ×
// (transport timeout + retry.max_delay)), so two replicas never hold one row.
// A process paused past its lease (a frozen VM, SIGSTOP, swap) is the
// exception, and it sends nothing once its claim has ended by its own clocks
// (RelayMessage::claimed_until, and claim_ends by the monotonic clock, which
// a wall-clock step cannot move): each call checks first, and the transport
// gets that end to pass on (the example transport's X-Relay-Deadline), so a
// downstream that honours it ignores a call that reached it too late.
// The example transport sends the outbox id as an idempotency key, so the
// downstream can tell, and the attempt's deadline, so it can refuse work its
// caller gave up on.
//
// Relay is thread-safe; run() may be called by one thread at a time.
#ifndef IDEMLEDGER_RELAY_RELAY_HPP
#define IDEMLEDGER_RELAY_RELAY_HPP

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/log.hpp"
#include "idemledger/core/metrics.hpp"
#include "idemledger/core/retry.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/relay/circuit_breaker.hpp"
#include "idemledger/relay/policy.hpp"

namespace idemledger {

namespace internal {
class RelayStore;
class DeliveryPool;
}  // namespace internal

// The host's call to the downstream API. OK for a 2xx. A retryable status
// (is_retryable(): kUnavailable for 5xx, 429 and refused connections,
// kDeadlineExceeded for timeouts) is retried and then dead-lettered; any
// other status is a refusal (4xx) and the message is dropped with it.
using DeliveryTransport = std::function<absl::Status(const RelayMessage& message)>;

enum class RelayMode {
  kNormal,    // delivering the outbox
  kPaused,    // the downstream-unavailable marker lives: claiming nothing
  kDraining,  // the marker is gone and due dead letters wait: DLQ first
};
inline constexpr EnumNames<RelayMode, 3> kRelayModeNames{{{
    {RelayMode::kNormal, "normal"},
    {RelayMode::kPaused, "paused"},
    {RelayMode::kDraining, "draining"},
}}};
constexpr const auto& enum_names(RelayMode) { return kRelayModeNames; }

// What became of one delivery.
enum class RelayDisposition {
  kDelivered,     // 2xx; outbox row published (and dead letter resolved)
  kDeadLettered,  // retries exhausted: into the DLQ (or back, dlq_retries + 1)
  kDropped,       // policy, deadline, relevance or a refusal ended it; kept with its reason
  kQuarantined,   // undecodable: relay_quarantine, no retries spent
  kNotClaimed,    // the lease was lost meanwhile; whoever holds it now decides
};
inline constexpr EnumNames<RelayDisposition, 5> kRelayDispositionNames{{{
    {RelayDisposition::kDelivered, "delivered"},
    {RelayDisposition::kDeadLettered, "dead_lettered"},
    {RelayDisposition::kDropped, "dropped"},
    {RelayDisposition::kQuarantined, "quarantined"},
    {RelayDisposition::kNotClaimed, "not_claimed"},
}}};
constexpr const auto& enum_names(RelayDisposition) { return kRelayDispositionNames; }

struct RelayOptions {
  // REQUIRES: migrate() ran for it.
  Schema schema = kDefaultSchema;
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
  // idemledger_relay_messages_total{result}, idemledger_relay_errors_total{step},
  // idemledger_relay_mode, idemledger_relay_in_flight and the breaker's state;
  // nullptr records nothing.
  prometheus::Registry* metrics = nullptr;
  // One line per dead-lettered, dropped or quarantined message, per mode
  // change and per error run() meets; nullptr logs nothing.
  LogSink* log = nullptr;
};

class Relay {
 public:
  // create()
  //
  // kInvalidArgument for a configuration it cannot run: no transport, no sane
  // concurrency, a topic with no or two policies.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Relay>> create(RelayOptions options);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // run()
  //
  // Delivers until `stop_requested()` returns true, then stops claiming,
  // finishes every delivery in flight and returns. Uses max_in_flight + 1
  // sessions at most. Each cycle: decide(), then (unless paused) claim as
  // many rows as delivery threads are free, from the DLQ while draining. It
  // rides out database and downstream outages: every error it meets is
  // logged and counted (idemledger_relay_errors_total{step}), then the cycle
  // starts over after poll_interval.
  void run(const SessionLender& sessions, const std::function<bool()>& stop_requested);

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
  struct Delivery {
    RelayDisposition disposition = RelayDisposition::kDelivered;
    // False if it was decided without calling (quarantine, policy, relevance):
    // a probe that made no call has not tested the downstream yet.
    bool called_downstream = false;
  };
  [[nodiscard]] absl::StatusOr<Delivery> deliver(Connection& conn, const RelayMessage& message,
                                                 bool probe = false);

  // release()
  //
  // Gives claimed messages back without trying them (their lease ends now).
  [[nodiscard]] absl::Status release(Connection& conn, const std::vector<RelayMessage>& messages);

  // Who this process is among the replicas.
  [[nodiscard]] std::string owner() const { return breaker_.owner(); }

 private:
  explicit Relay(RelayOptions options);
  static absl::Status validate(const RelayOptions& options);

  // What deliver() decided and did, not yet written down: `record` writes it,
  // and run() may write it again on a fresh session if the first one died
  // after the downstream had answered (instead of sending it again).
  struct Attempt {
    std::function<absl::StatusOr<RelayDisposition>(Connection&)> record;
    bool called_downstream = false;
  };
  [[nodiscard]] Attempt attempt(Connection& conn, const RelayMessage& message, bool probe);
  [[nodiscard]] absl::StatusOr<Delivery> finish(Connection& conn, const Attempt& attempt);
  struct Sent {
    absl::Status status;
    int calls = 0;             // how many times the transport was called
    bool lease_ended = false;  // stopped: the claim ran out before a call
    absl::Status last_answer;  // the transport's last answer, when calls > 0
  };
  [[nodiscard]] Sent send_with_retries(const RelayMessage& message) const;
  // One pass of run()'s loop on one session; false if there was nothing to do.
  bool cycle(Connection& conn, internal::DeliveryPool& pool);
  // Delivery on a pool thread, with the outcome written again on a fresh
  // session if the first one died after the downstream answered.
  void deliver_on_pool(const SessionLender& sessions, const RelayMessage& message);

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
  // Logs and counts an error run() met at `step`.
  void error(std::string_view step, const absl::Status& status);
  void log_message(LogLevel level, std::string_view what, const RelayMessage& message,
                   std::string_view reason) const;
  void set_mode(RelayMode mode);
  [[nodiscard]] const RelayPolicy* policy_for(std::string_view topic) const;

  RelayOptions options_;
  std::unique_ptr<const internal::RelayStore> store_;
  std::string marker_name_;  // the breaker's name: "relay:<name>"
  CircuitBreaker breaker_;
  std::atomic<RelayMode> mode_{RelayMode::kNormal};
  // Set after this process recorded a failure: its next success resets the
  // shared count (successes otherwise write nothing, so the marker row is
  // not a hot spot).
  std::atomic<bool> failures_recorded_{false};
  prometheus::Counter* results_[kRelayDispositionNames.size()] = {};
  prometheus::Registry* metrics_ = nullptr;
  prometheus::Gauge* mode_gauge_ = nullptr;
  prometheus::Gauge* in_flight_gauge_ = nullptr;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_RELAY_RELAY_HPP
