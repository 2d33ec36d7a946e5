// idemledger/queue/intake.hpp — accepting provider webhooks: verify, parse, record.
//
// Intake only writes the event into PostgreSQL (as `pending`) and answers;
// workers apply it later (dispatcher.hpp). Nothing is applied here, so a
// process dying after the answer loses nothing and a redelivery is harmless.
//
//   absl::StatusOr<WebhookVerifier> v = WebhookVerifier::create(secret, absl::Minutes(5));
//   if (absl::Status s = v->verify(raw_body, sig_header, ts_header, absl::Now()); !s.ok())
//     return 401;                                    // before any parsing
//   absl::StatusOr<WebhookEvent> e = parse_webhook(raw_body);
//   if (!e.ok()) return 400;                         // message names the rule
//   absl::StatusOr<RecordResult> r = record_webhook_event(conn, schema, *e, trace_id, raw_body);
//   // kAlreadyExists -> 409; kAccepted / kDuplicate / kUnmatchedAddress -> 200
//
// A server with many concurrent deliveries records them together (group
// commit: one transaction for many, below): through one RecordBatcher, whose
// callers block while the first of them records for all, or by gathering
// them itself and calling record_webhook_events() for each batch.
//
// Guarantees: the signature is checked over the raw bytes (a re-serialised
// body fails) in constant time; a secret under 32 bytes refuses to start.
// Deposits are credited to the owner of `to_address` (deposit_addresses),
// never to a user id the payload claims; an unknown address is recorded in
// unmatched_deposits for review and credited to nobody. The same event id
// with different content is a conflict, never a duplicate.
//
// WebhookVerifier is thread-safe after creation; the functions are thread-safe.
#ifndef IDEMLEDGER_QUEUE_INTAKE_HPP
#define IDEMLEDGER_QUEUE_INTAKE_HPP

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/event_type.hpp"
#include "idemledger/core/mutex.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

inline constexpr std::size_t kMinWebhookSecretLength = 32;
inline constexpr std::size_t kMaxWebhookBodyLength = std::size_t{64} * 1024;
inline constexpr std::size_t kMaxAddressLength = 128;

class WebhookVerifier {
 public:
  // create()
  //
  // kInvalidArgument if `secret` is shorter than 32 bytes. With a non-zero
  // `timestamp_tolerance` every request must carry a timestamp within that
  // window of now, and the signature covers "<timestamp>.<body>", so a
  // captured request cannot be replayed later.
  [[nodiscard]] static absl::StatusOr<WebhookVerifier> create(
      std::string secret, absl::Duration timestamp_tolerance = absl::ZeroDuration());

  // verify()
  //
  // OK, or kUnauthenticated naming what failed: missing or malformed
  // signature (lowercase or uppercase hex of HMAC-SHA256, optionally prefixed
  // "sha256="), mismatch, missing or stale timestamp.
  [[nodiscard]] absl::Status verify(std::string_view raw_body, std::string_view signature,
                                    std::string_view timestamp, absl::Time now) const;

  // sign()
  //
  // The hex signature verify() expects (for providers' simulators and tests).
  [[nodiscard]] std::string sign(std::string_view raw_body, std::string_view timestamp = {}) const;

 private:
  WebhookVerifier(std::string secret, absl::Duration tolerance)
      : secret_(std::move(secret)), tolerance_(tolerance) {}
  std::string secret_;
  absl::Duration tolerance_;
};

// Longest hold a withdrawal request may ask for.
inline constexpr absl::Duration kMaxHoldExpiry = absl::Hours(24 * 30);

// A webhook as the provider sent it, validated.
struct WebhookEvent {
  std::string event_id;
  EventType type = EventType::kDeposit;
  std::optional<Amount> amount;  // required but for a void; a post without one captures all
  // The asset: its code, or its chain (+ contract; none: the chain's native
  // coin), or neither: the default asset. A post or void takes its hold's.
  std::string asset;
  std::string chain;
  std::string contract;
  std::string to_address;               // credits: where the funds arrived
  std::string tx_hash;                  // credits, optional: the chain transaction (0x + 64 hex)
  std::optional<std::int64_t> user_id;  // debits and withdrawal steps: our own user id
  std::optional<Amount> fee;            // withdrawal_requested / _confirmed, optional
  std::string hold_id;                  // withdrawal_confirmed / _failed: the request's event_id
  std::optional<absl::Duration> expires_in;  // withdrawal_requested, optional
};

// parse_webhook()
//
// Strict JSON: an object of at most 64 KiB, valid UTF-8, no duplicate keys;
// "event_id" a string of 1..128 bytes; "event_type" one of deposit, airdrop,
// withdrawal, withdrawal_fee, withdrawal_requested, withdrawal_confirmed,
// withdrawal_failed; amounts ("amount", "fee") are JSON *strings* (a number
// is refused: it may already have been rounded) that Amount::parse accepts.
// The asset is "asset" (a code) or "chain" (+ "contract"), not both; its
// registration and decimals are checked when the event is recorded.
// Credits need "to_address" (string, 1..128 bytes) and may carry "tx_hash"
// (0x + 64 hex digits) for the finality check; debits and withdrawal steps
// need "user_id" (positive integer); withdrawal_requested an "amount", and
// optionally "fee" and "expires_in_s" (1..2592000); withdrawal_confirmed and
// withdrawal_failed a "withdrawal_id" (the request's event_id), a
// confirmation optionally the captured "amount" and "fee", a failure no
// amount. Unknown fields are ignored. kInvalidArgument names the rule broken.
[[nodiscard]] absl::StatusOr<WebhookEvent> parse_webhook(std::string_view raw_body);

enum class RecordResult {
  kAccepted,          // new: recorded as pending, workers notified
  kDuplicate,         // the same event, recorded before: nothing written
  kUnmatchedAddress,  // a deposit to an address nobody owns: kept for review
};
inline constexpr EnumNames<RecordResult, 3> kRecordResultNames{{{
    {RecordResult::kAccepted, "accepted"},
    {RecordResult::kDuplicate, "duplicate"},
    {RecordResult::kUnmatchedAddress, "unmatched_address"},
}}};
constexpr const auto& enum_names(RecordResult) { return kRecordResultNames; }

// record_webhook_event()
//
// Records `event` as pending (INSERT ... ON CONFLICT (event_id) DO NOTHING)
// and notifies listening workers, in one transaction. kAlreadyExists if the
// id is known with different content; kNotFound for a debit of an unknown user;
// kInvalidArgument for an unknown asset or an amount beyond its decimals;
// kFailedPrecondition for a disabled asset.
// Keyed by the event id: a retry after an in-doubt commit answers kDuplicate.
[[nodiscard]] absl::StatusOr<RecordResult> record_webhook_event(Connection& conn,
                                                                const Schema& schema,
                                                                const WebhookEvent& event,
                                                                std::string_view trace_id,
                                                                std::string_view raw_body);

// Most deliveries RecordBatcher records in one transaction: any that is not
// a plain deposit is a subtransaction (and all of them in a batch that falls
// back one by one), and past 64 in one transaction PostgreSQL's per-backend
// subtransaction cache overflows and slows every session's snapshots.
inline constexpr std::size_t kMaxRecordBatch = 64;

// One delivery for record_webhook_events(); the views must outlive the call.
struct WebhookDelivery {
  const WebhookEvent* event = nullptr;
  std::string_view trace_id;
  std::string_view raw_body;
};

// record_webhook_events()
//
// Records `deliveries` (1..kMaxRecordBatch of them) in one transaction — one
// statement, one commit, one notification — and returns one answer per
// delivery, in order: the answer record_webhook_event() would have given it
// alone (a refused delivery is refused alone; the others are recorded), with
// RecordBatcher's one exception below (a retryable kAborted for a delivery
// PostgreSQL picks to break two batches' wait on each other). If the batch
// fails as a whole (a lost connection, an in-doubt commit, a timeout), every
// answer is that retryable status and none of the deliveries may be
// acknowledged; recording them again answers kDuplicate for what did commit.
// More than kMaxRecordBatch deliveries, or an empty span: kInvalidArgument
// for each (nothing is sent). This is the group commit's whole database
// side, for a host that gathers deliveries itself (RecordBatcher gathers
// blocking callers; examples/webhook_intake gathers asynchronously).
[[nodiscard]] std::vector<absl::StatusOr<RecordResult>> record_webhook_events(
    Connection& conn, const Schema& schema, std::span<const WebhookDelivery> deliveries);

struct RecordBatcherOptions {
  Schema schema = kDefaultSchema;
  // The longest the first delivery of a batch waits for others; zero
  // records at once what has gathered meanwhile.
  absl::Duration max_wait = absl::Milliseconds(2);
  // A batch this full is recorded without waiting longer (1..kMaxRecordBatch).
  std::size_t max_batch = 32;
  // A batch goes at once while fewer than this many are being recorded, and
  // otherwise gathers until one of those commits (or it is full, or max_wait
  // passes): no wait when intake is idle, batches as large as the load when
  // it is not. 0: every batch gathers for max_wait.
  int max_in_flight = 1;
};

// RecordBatcher
//
// Intake's group commit: concurrent record() calls are gathered — while an
// earlier batch is being recorded, for at most max_wait, until max_batch —
// and recorded in one transaction — one commit, one flush of the WAL, for
// all of them — by the first caller of the batch, on its own connection,
// while the others wait.
//
// Guarantees: record() returns only after the transaction holding its
// delivery committed, with exactly the answer record_webhook_event() would
// have given it (a delivery the batch refuses — a conflict, an unknown user
// or asset — is refused alone; the others are recorded). One exception, and
// a safe one: a delivery whose id another batch is recording at that moment
// as another kind of event (a conflicting replay) may be refused with a
// retryable kAborted instead, when PostgreSQL breaks the two batches' wait
// on each other; recorded again, it gets its answer. If the batch fails
// as a whole (a lost connection, an in-doubt commit, a timeout), every call
// in it returns that retryable status and nothing of it is known to be
// durable, so no caller may acknowledge; recording again is keyed by event id
// and answers kDuplicate for whatever did commit.
//
// Thread-safe; each caller passes a Connection no other thread uses meanwhile.
class RecordBatcher {
 public:
  explicit RecordBatcher(RecordBatcherOptions options);

  [[nodiscard]] absl::StatusOr<RecordResult> record(Connection& conn, const WebhookEvent& event,
                                                    std::string_view trace_id,
                                                    std::string_view raw_body);

 private:
  struct Delivery {
    WebhookDelivery delivery;
    absl::StatusOr<RecordResult> result = absl::UnknownError("not recorded");
  };
  struct Batch {
    std::vector<Delivery*> deliveries;
    bool closed = false;  // no delivery joins any more
    bool done = false;    // every result is set
  };
  // Records `deliveries` in one transaction and sets each result.
  void record_all(Connection& conn, const std::vector<Delivery*>& deliveries) const;

  RecordBatcherOptions options_;
  Mutex mu_;
  std::shared_ptr<Batch> open_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // batches being recorded
};

}  // namespace idemledger

#endif  // IDEMLEDGER_QUEUE_INTAKE_HPP
