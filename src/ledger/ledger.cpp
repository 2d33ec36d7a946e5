#include "idemledger/ledger/ledger.hpp"

#include <fmt/format.h>

#include <array>

#include "absl/strings/ascii.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/dead_letter.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/batch_reply.hpp"
#include "src/core/internal/pinned.hpp"
#include "src/core/internal/text.hpp"
#include "src/ledger/internal/balance_check.hpp"
#include "src/ledger/internal/sqlstates.hpp"

namespace idemledger {
namespace {

// An event id, or a hold's (which is its withdrawal's event id): 1..128
// bytes of UTF-8 without NUL — libpq sends text parameters as C strings, so
// a NUL would silently cut the id short.
absl::Status check_event_id(std::string_view id, std::string_view field) {
  if (id.empty() || id.size() > kMaxEventIdLength) {
    return absl::InvalidArgumentError(
        fmt::format("{} must be 1..{} bytes, got {}", field, kMaxEventIdLength, id.size()));
  }
  if (id.find('\0') != std::string_view::npos || !internal::is_valid_utf8(id)) {
    return absl::InvalidArgumentError(
        fmt::format("{} must be valid UTF-8 without NUL bytes", field));
  }
  return absl::OkStatus();
}

absl::Status validate_event(const PaymentEvent& e) {
  if (absl::Status s = check_event_id(e.event_id, "event_id"); !s.ok()) return s;
  if (e.user_id <= 0) {
    return absl::InvalidArgumentError(fmt::format("user_id must be positive, got {}", e.user_id));
  }
  if (e.amount.is_zero() || e.amount.is_negative()) {
    return absl::InvalidArgumentError("amount must be greater than zero");
  }
  return absl::OkStatus();
}

std::string postgres_milliseconds(absl::Duration d) {
  return fmt::format("{}ms", absl::ToInt64Milliseconds(d));
}

// The call's own settings, transaction-scoped (is_local = true) so a pooled
// or PgBouncer-shared session keeps its own, and sent in the same batch as
// the call's statement ($1 lock_timeout, $2 statement_timeout). The
// search_path makes every built-in that statement names unqualified
// pg_catalog's, whatever the caller's search_path holds (the functions pin
// the same, migration 22). These three statements are parsed under the
// caller's search_path, so they name their own functions qualified.
constexpr std::string_view kCallSettingsSql =
    "SELECT pg_catalog.set_config('lock_timeout', $1, true), "
    "pg_catalog.set_config('statement_timeout', $2, true), "
    "pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)";

// Inside a caller's transaction, the settings the ledger makes for its call
// (its timeouts, its search_path) would stay for the rest of that transaction:
// the timeouts would bound (or loosen) the caller's later statements, and the
// search_path would change what their unqualified names mean. The caller's
// own values are kept aside before and put back after, transaction-scoped
// like the settings themselves.
constexpr std::string_view kKeepCallersSettingsSql =
    "SELECT pg_catalog.set_config('idemledger.callers_lock_timeout', "
    "pg_catalog.current_setting('lock_timeout'), true), "
    "pg_catalog.set_config('idemledger.callers_statement_timeout', "
    "pg_catalog.current_setting('statement_timeout'), true), "
    "pg_catalog.set_config('idemledger.callers_search_path', "
    "pg_catalog.current_setting('search_path'), true)";
constexpr std::string_view kRestoreCallersSettingsSql =
    "SELECT pg_catalog.set_config('lock_timeout', "
    "pg_catalog.current_setting('idemledger.callers_lock_timeout'), true), "
    "pg_catalog.set_config('statement_timeout', "
    "pg_catalog.current_setting('idemledger.callers_statement_timeout'), true), "
    "pg_catalog.set_config('search_path', "
    "pg_catalog.current_setting('idemledger.callers_search_path'), true)";

// A host's deposit, first tried as one statement of its own (process_deposit):
// a new credit to an account that exists, without apply_event's PL/pgSQL
// around it. It writes everything or nothing. Each step feeds the next:
//
//   asset       registered, enabled, the amount within its decimals, the
//               account (user, asset) exists, no event row with this id
//   guard       the idempotency record (a concurrent duplicate waits here,
//               then finds it and the chain stops: nothing written)
//   born        the event row, confirmed (a racing writer of the same id
//               fails the statement on its primary key, as apply_event would)
//   credited    the account
//   user_leg,   both entries of the posting
//   system_leg
//   notice      the 'credited' notification, when asked for
//
// true: applied. false: nothing was written, and apply_event decides (a
// replay, an unknown or refused asset, a first credit in an asset, a missing
// user, a queued event). A chain stopped after its guard — balance_events
// already held the key, or the account vanished — raises through
// credit_incomplete() (migration 13), which rolls the statement back.
// Parameters are apply_event's.
constexpr std::string_view kFastCreditSql = R"sql(
WITH asset AS (
    SELECT a.code FROM {schema}.assets a
     WHERE (a.code = $4::text OR ($4::text IS NULL AND a.is_default)) AND a.enabled
       AND scale(trim_scale($5::numeric)) <= a.decimals
       AND EXISTS (SELECT 1 FROM {schema}.accounts x WHERE x.user_id = $3::bigint AND x.asset = a.code)
       AND NOT EXISTS (SELECT 1 FROM {schema}.payment_events e WHERE e.event_id = $1)),
guard AS (
    INSERT INTO {schema}.processed_events AS p (idempotency_key, fingerprint, outcome, asset)
    SELECT $6, $7, 'success', a.code FROM asset a
    ON CONFLICT DO NOTHING
    RETURNING p.asset),
born AS (
    INSERT INTO {schema}.payment_events AS e (event_id, user_id, asset, amount, event_type, status)
    SELECT $1, $3::bigint, g.asset, $5::numeric, $2, 'confirmed' FROM guard g
    RETURNING e.asset),
credited AS (
    UPDATE {schema}.accounts a SET balance = a.balance + $5::numeric
      FROM born b WHERE a.user_id = $3::bigint AND a.asset = b.asset
    RETURNING a.asset),
user_leg AS (
    INSERT INTO {schema}.balance_events AS be (user_id, asset, amount, event_type, source_event_id)
    SELECT $3::bigint, c.asset, $5::numeric, $2, $1 FROM credited c
    ON CONFLICT DO NOTHING
    RETURNING be.asset),
system_leg AS (
    INSERT INTO {schema}.system_entries AS se (asset, account, amount, event_type, source_event_id)
    SELECT u.asset, 'external', -$5::numeric, $2, $1 FROM user_leg u
    RETURNING se.asset),
notice AS (
    INSERT INTO {schema}.outbox (topic, payload)
    SELECT 'credited', jsonb_build_object('event_id', $1, 'event_type', $2, 'user_id', $3::bigint,
                                          'asset', s.asset, 'amount', $5::numeric::text)
      FROM system_leg s WHERE $8::boolean)
SELECT CASE WHEN EXISTS (SELECT 1 FROM system_leg) THEN true
            WHEN EXISTS (SELECT 1 FROM guard)
                THEN {schema}.credit_incomplete($1, $2, EXISTS (SELECT 1 FROM credited))
            ELSE false END)sql";

// What apply_event() answers, read once at the edge.
enum class ApplyAnswer {
  kApplied,
  kAlreadyApplied,
  kInsufficientFunds,
  kOrphanApplied,
  kOrphanInsufficientFunds,
};
constexpr EnumNames<ApplyAnswer, 5> kApplyAnswerNames{{{
    {ApplyAnswer::kApplied, "applied"},
    {ApplyAnswer::kAlreadyApplied, "already_applied"},
    {ApplyAnswer::kInsufficientFunds, "insufficient_funds"},
    {ApplyAnswer::kOrphanApplied, "orphan_applied"},
    {ApplyAnswer::kOrphanInsufficientFunds, "orphan_insufficient_funds"},
}}};
constexpr const auto& enum_names(ApplyAnswer) { return kApplyAnswerNames; }

// The per-asset metrics label of an event that named no asset.
constexpr std::string_view kDefaultAssetLabel = "default";

// An event apply_event() takes: valid and single-phase (a hold step is
// hold(), post() or void_hold()).
absl::Status validate_single_phase(const PaymentEvent& e) {
  if (absl::Status s = validate_event(e); !s.ok()) return s;
  if (is_hold_step(e.type)) {
    return absl::InvalidArgumentError(
        fmt::format("{} is a hold step: use hold(), post() or void_hold()", to_string(e.type)));
  }
  return absl::OkStatus();
}

void alert(AlertSink& sink, std::string_view key, std::string_view message) {
  sink.alert({.severity = AlertSeverity::kCritical, .key = key, .message = message});
}

// What a refused apply means to the caller, for event `event_id`: the
// server's refusal as a status, and for a few of them an alert (one of them
// even an outcome).
absl::StatusOr<Outcome> refusal_outcome(AlertSink& sink, std::string_view event_id,
                                        const absl::Status& error) {
  absl::Status status = internal::interpret_ledger_error(error);
  const std::optional<std::string> state = sqlstate(status);
  if (state == internal::kConflictingReplay) {
    alert(sink, fmt::format("conflicting_replay:{}", event_id), internal::to_std(status.message()));
  } else if (state == internal::kInconsistentRecord) {
    alert(sink, fmt::format("inconsistent_event:{}", event_id), internal::to_std(status.message()));
  } else if (state == internal::kGuardWithoutRecord) {
    // balance_events proves it was applied once; nothing changed now.
    alert(sink, fmt::format("guard_without_record:{}", event_id),
          internal::to_std(status.message()));
    return Outcome::kAlreadyApplied;
  }
  return status;
}

// apply_event()'s answer as an outcome; an orphan record (an idempotency
// record without its event row) is alerted.
Outcome applied_outcome(AlertSink& sink, const PaymentEvent& event, ApplyAnswer answer) {
  switch (answer) {
    case ApplyAnswer::kApplied:
      return Outcome::kApplied;
    case ApplyAnswer::kAlreadyApplied:
      return Outcome::kAlreadyApplied;
    case ApplyAnswer::kInsufficientFunds:
      return Outcome::kInsufficientFunds;
    case ApplyAnswer::kOrphanApplied:
    case ApplyAnswer::kOrphanInsufficientFunds:
      break;
  }
  const std::string_view type = to_string(event.type);
  alert(sink, fmt::format("orphan_{}:{}", type, event.event_id),
        fmt::format("orphan {} event {}: idempotency record exists but payment event not found",
                    type, event.event_id));
  return answer == ApplyAnswer::kOrphanApplied ? Outcome::kAlreadyApplied
                                               : Outcome::kInsufficientFunds;
}

// apply_event()'s parameters $6 and $7 for `event`.
struct EventKeys {
  std::string key;
  std::string fingerprint;
};
EventKeys keys_of(const PaymentEvent& event) {
  const std::string_view type = to_string(event.type);
  // The asset is compared beside the fingerprint (v1 records had none).
  return {.key = idempotency_key(event.event_id, type),
          .fingerprint = payload_fingerprint(event.user_id, event.amount, type)};
}

// hold()'s checks of a request, before anything is sent.
absl::Status validate_hold(const HoldRequest& request) {
  const PaymentEvent as_event{.event_id = request.event_id,
                              .type = EventType::kWithdrawalRequested,
                              .user_id = request.user_id,
                              .amount = request.amount};
  if (absl::Status s = validate_event(as_event); !s.ok()) return s;
  if (request.fee.is_negative()) return absl::InvalidArgumentError("fee must not be negative");
  if (request.expires_in < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("expires_in must not be negative");
  }
  return absl::OkStatus();
}

// A hold's content, for telling its replay from a conflict.
std::string hold_fingerprint(const HoldRequest& request) {
  return idempotency_key({"hold", std::to_string(request.user_id), request.amount.to_string(),
                          request.fee.to_string()});
}

absl::Status validate_post(const PostRequest& request) {
  if (absl::Status s = check_event_id(request.hold_id, "hold_id"); !s.ok()) return s;
  if ((request.amount && (request.amount->is_zero() || request.amount->is_negative())) ||
      (request.fee && request.fee->is_negative())) {
    return absl::InvalidArgumentError("a post captures an amount > 0 and a fee >= 0");
  }
  return absl::OkStatus();
}

absl::Status validate_void(const VoidRequest& request) {
  return check_event_id(request.hold_id, "hold_id");
}

// A refused hold step's status (`id`: the hold's), alerted when it is a
// conflicting replay. Keyed by the hold: running the step again answers
// what happened.
absl::Status hold_step_refusal(AlertSink& sink, std::string_view id, const absl::Status& error) {
  absl::Status status = mark_idempotent(internal::interpret_ledger_error(error));
  if (sqlstate(status) == internal::kConflictingReplay) {
    alert(sink, fmt::format("conflicting_replay:{}", id), internal::to_std(status.message()));
  }
  return status;
}

// A hold step's answer; kRefused is alerted. A post of a released hold
// means funds may have left custody while the ledger released them
// (expired, voided); a void of a posted one, that the chain and the provider
// disagree. Someone must look.
HoldResult hold_step_result(AlertSink& sink, std::string_view what, std::string_view id,
                            HoldOutcome outcome, HoldState state) {
  if (outcome == HoldOutcome::kRefused) {
    alert(sink, fmt::format("hold_refused:{}", id),
          fmt::format("{} of hold {} refused: the hold is {}", what, id, to_string(state)));
  }
  return HoldResult{.outcome = outcome, .state = state};
}

// apply_steps()'s arrays, element j of each being the j-th step sent.
struct StepArrays {
  ArrayText ids, types, users, assets, amounts, keys, fingerprints, fees, expires, hold_ids;

  void add(const PaymentEvent& e) {
    const EventKeys k = keys_of(e);
    add_row(e.event_id, to_string(e.type), e.user_id, e.asset, e.amount, k.key, k.fingerprint,
            std::nullopt, std::nullopt, std::nullopt);
  }
  void add(const HoldRequest& r) {
    add_row(r.event_id, to_string(EventType::kWithdrawalRequested), r.user_id, r.asset, r.amount,
            std::nullopt, hold_fingerprint(r), r.fee, r.expires_in, std::nullopt);
  }
  void add(const PostRequest& r) {
    add_row(null_if_empty(r.event_id), to_string(EventType::kWithdrawalConfirmed), r.user_id,
            std::nullopt, r.amount, std::nullopt, std::nullopt, r.fee, std::nullopt, r.hold_id);
  }
  void add(const VoidRequest& r) {
    add_row(null_if_empty(r.event_id), to_string(EventType::kWithdrawalFailed), r.user_id,
            std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
            r.hold_id);
  }

 private:
  // One element per array; std::nullopt where the step has no such field.
  void add_row(const auto& id, std::string_view type, const auto& user,
               const std::optional<AssetCode>& asset, const auto& amount, const auto& key,
               const auto& fingerprint, const auto& fee, const auto& expires, const auto& hold_id) {
    ids.add(id);
    types.add(type);
    users.add(user);
    assets.add(asset ? Param(asset->code()) : Param());
    amounts.add(amount);
    keys.add(key);
    fingerprints.add(fingerprint);
    fees.add(fee);
    this->expires.add(expires);
    hold_ids.add(hold_id);
  }
};

// A step's own checks (process_steps() answers a failed one without sending it).
absl::Status validate_step(const LedgerStep& step) {
  return std::visit(
      [](const auto& s) -> absl::Status {
        using T = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<T, PaymentEvent>) return validate_single_phase(s);
        if constexpr (std::is_same_v<T, HoldRequest>) return validate_hold(s);
        if constexpr (std::is_same_v<T, PostRequest>) return validate_post(s);
        if constexpr (std::is_same_v<T, VoidRequest>) return validate_void(s);
      },
      step);
}

// "<outcome>:<state>", as apply_steps() answers a hold step.
std::optional<std::pair<HoldOutcome, HoldState>> parse_hold_answer(std::string_view answer) {
  const std::size_t colon = answer.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::optional<HoldOutcome> outcome = kHoldOutcomeNames.parse(answer.substr(0, colon));
  const std::optional<HoldState> state = kHoldStateNames.parse(answer.substr(colon + 1));
  if (!outcome || !state) return std::nullopt;
  return std::pair(*outcome, *state);
}

// True if apply_steps()'s answer `reply` reads as one for `step`'s kind (a
// refusal always does).
bool reply_reads(const LedgerStep& step, const absl::StatusOr<std::string>& reply) {
  if (!reply.ok()) return true;
  if (std::holds_alternative<PaymentEvent>(step))
    return kApplyAnswerNames.parse(*reply).has_value();
  return parse_hold_answer(*reply).has_value();
}

// What step `step` was answered, `reply` being apply_steps()'s row for it
// (one reply_reads() accepted), with the alerts the single call raises.
absl::StatusOr<StepResult> step_result(AlertSink& sink, const LedgerStep& step,
                                       const absl::StatusOr<std::string>& reply) {
  if (const auto* event = std::get_if<PaymentEvent>(&step)) {
    if (!reply.ok()) {
      absl::StatusOr<Outcome> out = refusal_outcome(sink, event->event_id, reply.status());
      if (!out.ok()) return mark_idempotent(out.status());
      return StepResult(*out);
    }
    return StepResult(applied_outcome(sink, *event, *kApplyAnswerNames.parse(*reply)));
  }
  const auto [what, id] = std::visit(
      [](const auto& s) -> std::pair<std::string_view, std::string_view> {
        using T = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<T, HoldRequest>) return {"hold", s.event_id};
        if constexpr (std::is_same_v<T, PostRequest>) return {"post", s.hold_id};
        if constexpr (std::is_same_v<T, VoidRequest>) return {"void", s.hold_id};
        return {"", ""};  // PaymentEvent: answered above
      },
      step);
  if (!reply.ok()) return hold_step_refusal(sink, id, reply.status());
  const auto [outcome, state] = *parse_hold_answer(*reply);
  return StepResult(hold_step_result(sink, what, id, outcome, state));
}

// The metrics label of a step's asset: known for events and holds, not for
// a post or void (the hold's asset is in the database).
std::optional<std::string_view> step_asset(const LedgerStep& step) {
  const std::optional<AssetCode>* asset = nullptr;
  if (const auto* e = std::get_if<PaymentEvent>(&step)) asset = &e->asset;
  if (const auto* h = std::get_if<HoldRequest>(&step)) asset = &h->asset;
  if (asset == nullptr) return std::nullopt;
  return *asset ? (*asset)->code() : kDefaultAssetLabel;
}

std::string_view outcome_name(const StepResult& r) {
  return std::visit(
      [](const auto& v) -> std::string_view {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Outcome>)
          return to_string(v);
        else
          return to_string(v.outcome);
      },
      r);
}

}  // namespace

Ledger::Ledger(LedgerOptions options)
    : options_(std::move(options)),
      apply_sql_(options_.schema.qualify("SELECT {schema}.apply_event($1, $2, $3::bigint, $4, "
                                         "$5::numeric, $6, $7, $8::boolean)")),
      fast_credit_sql_(options_.schema.qualify(kFastCreditSql)),
      batch_sql_(options_.schema.qualify(
          "SELECT * FROM {schema}.apply_steps($1::text[], $2::text[], $3::bigint[], $4::text[], "
          "$5::numeric[], $6::text[], $7::text[], $8::numeric[], $9::bigint[], $10::text[], "
          "$11::boolean)")),
      hold_sql_(options_.schema.qualify(
          "SELECT * FROM {schema}.hold_funds($1, $2::bigint, $3, $4::numeric, $5::numeric, "
          "$6::bigint, $7, $8::boolean)")),
      post_sql_(options_.schema.qualify("SELECT * FROM {schema}.post_hold($1, $2, $3::bigint, "
                                        "$4::numeric, $5::numeric, $6::boolean)")),
      void_sql_(options_.schema.qualify(
          "SELECT * FROM {schema}.void_hold($1, $2, $3::bigint, $4::boolean)")),
      lock_timeout_text_(postgres_milliseconds(options_.lock_timeout)),
      statement_timeout_text_(postgres_milliseconds(options_.statement_timeout)) {}

void Ledger::raise_alert(AlertSeverity severity, std::string_view key,
                         std::string_view message) const {
  AlertSink& sink = alert_sink_or_default(options_.alerts);
  sink.alert({.severity = severity, .key = key, .message = message});
}

absl::StatusOr<Outcome> Ledger::process_deposit(Connection& conn, const PaymentEvent& event) const {
  if (!is_credit(event.type)) {
    return absl::InvalidArgumentError(fmt::format(
        "process_deposit takes deposit or airdrop events, got {}", to_string(event.type)));
  }
  return apply(conn, event, Route::kOneStatementFirst);
}

absl::StatusOr<Outcome> Ledger::process_withdrawal(Connection& conn,
                                                   const PaymentEvent& event) const {
  if (event.type != EventType::kWithdrawal && event.type != EventType::kWithdrawalFee) {
    return absl::InvalidArgumentError(
        fmt::format("process_withdrawal takes withdrawal or withdrawal_fee events, got {}",
                    to_string(event.type)));
  }
  return apply(conn, event, Route::kProcedure);
}

absl::StatusOr<Outcome> Ledger::process_event(Connection& conn, const PaymentEvent& event) const {
  return apply(conn, event, Route::kProcedure);
}

absl::StatusOr<Outcome> Ledger::process_compensation(Connection& conn,
                                                     std::string_view original_tx_hash,
                                                     std::int64_t user_id, const Amount& amount,
                                                     std::optional<AssetCode> asset) const {
  // A transaction hash is keyed in lower case, so two spellings of one
  // transaction are one compensation; one recorded before hashes were
  // normalised keeps its key (one lookup, only for a mixed-case hash).
  std::string hash(original_tx_hash);
  if (internal::is_tx_hash(hash)) {
    const std::string lower = absl::AsciiStrToLower(hash);
    if (lower != hash) {
      absl::StatusOr<Result> legacy = internal::execute_pinned(
          conn,
          options_.schema.qualify(
              "SELECT EXISTS (SELECT 1 FROM {schema}.payment_events WHERE event_id = $1)"),
          Params(fmt::format("{}{}", kReorgEventIdPrefix, hash)));
      if (!legacy.ok()) return legacy.status();
      absl::StatusOr<bool> exists = read_single<bool>(*legacy, "legacy compensation");
      if (!exists.ok()) return exists.status();
      if (!*exists) hash = lower;
    }
  }
  const PaymentEvent event{.event_id = fmt::format("{}{}", kReorgEventIdPrefix, hash),
                           .type = EventType::kReorgCompensation,
                           .user_id = user_id,
                           .amount = amount,
                           .asset = asset};
  absl::StatusOr<Outcome> outcome = apply(conn, event, Route::kProcedure);
  if (outcome.ok() || sqlstate(outcome.status()) != internal::kCompensationExceedsBalance) {
    return outcome;
  }
  // The funds are gone: nothing was debited. Make it impossible to miss.
  const absl::Status dlq =
      append_dead_letter(conn, options_.schema,
                         {.event_id = event.event_id,
                          .event_type = std::string(to_string(event.type)),
                          .user_id = event.user_id,
                          .amount = event.amount.to_string(),
                          .reason = "error",
                          .error = std::string(internal::to_std(outcome.status().message()))});
  raise_alert(AlertSeverity::kCritical, fmt::format("reorg_compensation_failed:{}", event.event_id),
              fmt::format("{}{}", outcome.status().message(),
                          dlq.ok() ? "; recorded in dead_letter_queue"
                                   : fmt::format("; DLQ write failed: {}", dlq.message())));
  return outcome;
}

absl::StatusOr<Outcome> Ledger::apply(Connection& conn, const PaymentEvent& event,
                                      Route route) const {
  const absl::Time start = options_.metrics != nullptr ? absl::Now() : absl::Time();
  absl::StatusOr<Outcome> outcome = apply_unmeasured(conn, event, route);
  // Every apply is keyed by (event_id, type): running it again can never
  // apply it twice, so even an in-doubt commit may be retried.
  if (!outcome.ok()) outcome = mark_idempotent(outcome.status());
  record(start, outcome.status(), outcome.ok() ? to_string(*outcome) : "",
         event.asset ? event.asset->code() : kDefaultAssetLabel);
  return outcome;
}

void Ledger::record(absl::Time start, const absl::Status& status, std::string_view outcome,
                    std::optional<std::string_view> asset) const {
  if (options_.metrics == nullptr) return;
  observe(options_.metrics->apply_duration, absl::Now() - start);
  count(status, outcome, asset);
}

void Ledger::count(const absl::Status& status, std::string_view outcome,
                   std::optional<std::string_view> asset) const {
  if (options_.metrics == nullptr) return;
  LedgerMetrics& m = *options_.metrics;
  if (!status.ok()) {
    (status.code() == absl::StatusCode::kAlreadyExists ? m.conflicts : m.errors).Increment();
    return;
  }
  // Outcome and HoldOutcome share their names.
  prometheus::Counter& counter = outcome == to_string(Outcome::kApplied)          ? m.applied
                                 : outcome == to_string(Outcome::kAlreadyApplied) ? m.duplicates
                                 : outcome == to_string(Outcome::kInsufficientFunds)
                                     ? m.insufficient_funds
                                     : m.refused;
  counter.Increment();
  // The database accepted the asset: a registered one, so the label is bounded.
  if (asset) m.count_for_asset(*asset, outcome);
}

absl::StatusOr<Outcome> Ledger::apply_unmeasured(Connection& conn, const PaymentEvent& event,
                                                 Route route) const {
  if (absl::Status s = validate_single_phase(event); !s.ok()) return s;

  const EventKeys keys = keys_of(event);
  const Params apply(event.event_id, to_string(event.type), event.user_id,
                     event.asset ? Param(event.asset->code()) : Param(), event.amount, keys.key,
                     keys.fingerprint, options_.write_notifications);
  AlertSink& sink = alert_sink_or_default(options_.alerts);

  if (route == Route::kOneStatementFirst) {
    absl::StatusOr<Result> result =
        execute_with_call_settings(conn, fast_credit_sql_, apply.span());
    if (!result.ok()) return refusal_outcome(sink, event.event_id, result.status());
    absl::StatusOr<bool> applied = read_single<bool>(*result, "one-statement credit");
    if (!applied.ok()) return applied.status();
    if (*applied) return Outcome::kApplied;
    // Nothing was written: the whole procedure decides.
  }

  absl::StatusOr<Result> result = execute_with_call_settings(conn, apply_sql_, apply.span());
  if (!result.ok()) return refusal_outcome(sink, event.event_id, result.status());
  absl::StatusOr<ApplyAnswer> answer = read_single<ApplyAnswer>(*result, "apply_event");
  if (!answer.ok()) return answer.status();
  return applied_outcome(sink, event, *answer);
}

absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> Ledger::process_batch(
    Connection& conn, std::span<const PaymentEvent> events) const {
  if (events.size() > kMaxBatchSize) {
    return absl::InvalidArgumentError(
        fmt::format("a batch takes at most {} events, got {}", kMaxBatchSize, events.size()));
  }
  const std::vector<LedgerStep> steps(events.begin(), events.end());
  absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> results = process_steps(conn, steps);
  if (!results.ok()) return results.status();
  std::vector<absl::StatusOr<Outcome>> answers;
  answers.reserve(results->size());
  for (absl::StatusOr<StepResult>& r : *results) {
    // An event is answered an Outcome (step_result()).
    answers.push_back(r.ok() ? absl::StatusOr<Outcome>(std::get<Outcome>(*r))
                             : absl::StatusOr<Outcome>(std::move(r).status()));
  }
  return answers;
}

absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> Ledger::process_steps(
    Connection& conn, std::span<const LedgerStep> steps) const {
  if (steps.size() > kMaxBatchSize) {
    return absl::InvalidArgumentError(
        fmt::format("a batch takes at most {} steps, got {}", kMaxBatchSize, steps.size()));
  }
  const absl::Time start = options_.metrics != nullptr ? absl::Now() : absl::Time();
  std::vector<absl::StatusOr<StepResult>> answers(
      steps.size(), absl::InternalError("no answer from apply_steps"));
  // Element j of each array is steps[sent[j]]; invalid steps are answered here.
  std::vector<std::size_t> sent;
  sent.reserve(steps.size());
  StepArrays arrays;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (absl::Status valid = validate_step(steps[i]); !valid.ok()) {
      answers[i] = std::move(valid);
      continue;
    }
    sent.push_back(i);
    std::visit([&](const auto& s) { arrays.add(s); }, steps[i]);
  }
  if (sent.empty()) return answers;

  const Params params(std::move(arrays.ids).finish(), std::move(arrays.types).finish(),
                      std::move(arrays.users).finish(), std::move(arrays.assets).finish(),
                      std::move(arrays.amounts).finish(), std::move(arrays.keys).finish(),
                      std::move(arrays.fingerprints).finish(), std::move(arrays.fees).finish(),
                      std::move(arrays.expires).finish(), std::move(arrays.hold_ids).finish(),
                      options_.write_notifications);
  absl::StatusOr<Result> result = execute_with_call_settings(conn, batch_sql_, params.span());
  if (!result.ok()) {
    // The transaction did all of it or none of it, and every step is keyed:
    // the same batch can be sent again, even after an in-doubt commit.
    absl::Status status = mark_idempotent(internal::interpret_ledger_error(result.status()));
    record(start, status, "", std::nullopt);
    return status;
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> replies =
      internal::read_batch_reply<std::string>(*result, sent.size(), "apply_steps");
  for (std::size_t j = 0; replies.ok() && j < sent.size(); ++j) {
    if (!reply_reads(steps[sent[j]], (*replies)[j])) {
      replies = absl::InternalError(
          fmt::format("apply_steps answered step {} with \"{}\"", j + 1, *(*replies)[j]));
    }
  }
  if (!replies.ok()) {
    // Committed, but not readable: no step's answer can be trusted (and
    // none is alerted).
    record(start, replies.status(), "", std::nullopt);
    return replies.status();
  }
  AlertSink& sink = alert_sink_or_default(options_.alerts);
  for (std::size_t j = 0; j < sent.size(); ++j) {
    answers[sent[j]] = step_result(sink, steps[sent[j]], (*replies)[j]);
  }
  if (options_.metrics != nullptr) {
    observe(options_.metrics->apply_duration, absl::Now() - start);
    for (const std::size_t i : sent) {
      const absl::StatusOr<StepResult>& out = answers[i];
      count(out.status(), out.ok() ? outcome_name(*out) : "", step_asset(steps[i]));
    }
  }
  return answers;
}

absl::StatusOr<StepResult> Ledger::process_step(Connection& conn, const LedgerStep& step) const {
  return std::visit(
      [&](const auto& s) -> absl::StatusOr<StepResult> {
        using T = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<T, PaymentEvent>) return process_event(conn, s);
        if constexpr (std::is_same_v<T, HoldRequest>) return hold(conn, s);
        if constexpr (std::is_same_v<T, PostRequest>) return post(conn, s);
        if constexpr (std::is_same_v<T, VoidRequest>) return void_hold(conn, s);
      },
      step);
}

absl::StatusOr<Result> Ledger::execute_with_call_settings(Connection& conn, std::string_view sql,
                                                          std::span<const Param> params) const {
  const Params timeouts(lock_timeout_text_, statement_timeout_text_);
  return internal::execute_with_settings(conn,
                                         {.set = kCallSettingsSql,
                                          .params = timeouts.span(),
                                          .keep = kKeepCallersSettingsSql,
                                          .restore = kRestoreCallersSettingsSql},
                                         sql, params);
}

absl::StatusOr<HoldResult> Ledger::run_hold_step(Connection& conn, std::string_view sql,
                                                 std::span<const Param> params,
                                                 std::string_view what, std::string_view id) const {
  AlertSink& sink = alert_sink_or_default(options_.alerts);
  absl::StatusOr<Result> r = execute_with_call_settings(conn, sql, params);
  if (!r.ok()) return hold_step_refusal(sink, id, r.status());
  absl::StatusOr<Row> row = r->single_row(what);
  if (!row.ok()) return row.status();
  auto read = row->read<HoldOutcome, HoldState>();
  if (!read.ok()) return read.status();
  const auto [outcome, state] = *read;
  return hold_step_result(sink, what, id, outcome, state);
}

absl::StatusOr<HoldResult> Ledger::hold(Connection& conn, const HoldRequest& request) const {
  const absl::Time start = options_.metrics != nullptr ? absl::Now() : absl::Time();
  if (absl::Status valid = validate_hold(request); !valid.ok()) return valid;
  const Params params(request.event_id, request.user_id,
                      request.asset ? Param(request.asset->code()) : Param(), request.amount,
                      request.fee, request.expires_in, hold_fingerprint(request),
                      options_.write_notifications);
  absl::StatusOr<HoldResult> r = run_hold_step(conn, hold_sql_, params, "hold", request.event_id);
  record(start, r.status(), r.ok() ? to_string(r->outcome) : "",
         request.asset ? request.asset->code() : kDefaultAssetLabel);
  return r;
}

absl::StatusOr<HoldResult> Ledger::post(Connection& conn, const PostRequest& request) const {
  const absl::Time start = options_.metrics != nullptr ? absl::Now() : absl::Time();
  if (absl::Status valid = validate_post(request); !valid.ok()) return valid;
  const Params params(request.hold_id, null_if_empty(request.event_id), request.user_id,
                      request.amount, request.fee, options_.write_notifications);
  absl::StatusOr<HoldResult> r = run_hold_step(conn, post_sql_, params, "post", request.hold_id);
  record(start, r.status(), r.ok() ? to_string(r->outcome) : "",
         std::nullopt);  // asset unknown here
  return r;
}

absl::StatusOr<HoldResult> Ledger::void_hold(Connection& conn, const VoidRequest& request) const {
  const absl::Time start = options_.metrics != nullptr ? absl::Now() : absl::Time();
  if (absl::Status valid = validate_void(request); !valid.ok()) return valid;
  const Params params(request.hold_id, null_if_empty(request.event_id), request.user_id,
                      options_.write_notifications);
  absl::StatusOr<HoldResult> r = run_hold_step(conn, void_sql_, params, "void", request.hold_id);
  record(start, r.status(), r.ok() ? to_string(r->outcome) : "",
         std::nullopt);  // asset unknown here
  return r;
}

absl::StatusOr<int> Ledger::expire_holds(Connection& conn, int limit) const {
  absl::StatusOr<Result> r = conn.execute(
      options_.schema.qualify("SELECT * FROM {schema}.expire_holds($1::int, $2::boolean)"),
      Params(limit, options_.write_notifications));
  if (!r.ok()) return mark_idempotent(r.status());  // a state compare-and-set: safe to rerun
  if (options_.metrics != nullptr) {
    options_.metrics->holds_expired.Increment(static_cast<double>(r->rows.size()));
  }
  return static_cast<int>(r->rows.size());
}

absl::StatusOr<Hold> Ledger::find_hold(Connection& conn, std::string_view hold_id) const {
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      options_.schema.qualify("SELECT event_id, user_id, asset, amount, fee, state, expires_at, "
                              "posted_amount, posted_fee FROM {schema}.holds WHERE event_id = $1"),
      Params(hold_id));
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return absl::NotFoundError(fmt::format("no hold {}", hold_id));
  auto read = r->row(0)
                  .read<std::string, std::int64_t, std::string, Amount, Amount, HoldState,
                        absl::Time, std::optional<Amount>, std::optional<Amount>>();
  if (!read.ok()) return read.status();
  auto& [id, user, asset, amount, fee, state, expires, posted_amount, posted_fee] = *read;
  absl::StatusOr<AssetCode> code = AssetCode::create(asset);
  if (!code.ok())
    return absl::InternalError(fmt::format("hold {}: {}", id, code.status().message()));
  return Hold{.event_id = std::move(id),
              .user_id = user,
              .asset = *code,
              .amount = amount,
              .fee = fee,
              .state = state,
              .expires_at = expires,
              .posted_amount = posted_amount,
              .posted_fee = posted_fee};
}

Amount Account::available() const {
  absl::StatusOr<Amount> a = balance.checked_sub(held);
  return a.ok() ? *a : Amount();  // held <= balance is a CHECK; both are NUMERIC(38,18)
}

absl::Status Ledger::open_account(Connection& conn, std::int64_t user_id,
                                  const Amount& initial_balance,
                                  std::optional<AssetCode> asset) const {
  if (user_id <= 0) {
    return absl::InvalidArgumentError(fmt::format("user_id must be positive, got {}", user_id));
  }
  if (initial_balance.is_negative()) {
    return absl::InvalidArgumentError("initial_balance must not be negative");
  }
  absl::StatusOr<Result> r = conn.execute(
      options_.schema.qualify("SELECT * FROM {schema}.open_account($1::bigint, $2, $3::numeric)"),
      Params(user_id, asset ? Param(asset->code()) : Param(), initial_balance));
  // Keyed by its content: opening the same account again is the same answer.
  if (!r.ok()) return mark_idempotent(internal::interpret_ledger_error(r.status()));
  absl::StatusOr<Row> row = r->single_row("open_account");
  if (!row.ok()) return row.status();
  auto read = row->read<bool, Amount, std::string>();
  if (!read.ok()) return read.status();
  const auto& [opened, existing, code] = *read;
  if (opened || existing == initial_balance) return absl::OkStatus();
  return absl::AlreadyExistsError(
      fmt::format("account of user {} in {} exists with initial balance {}, not {}", user_id, code,
                  existing.to_string(), initial_balance.to_string()));
}

absl::StatusOr<Account> Ledger::account(Connection& conn, std::int64_t user_id,
                                        std::optional<AssetCode> asset) const {
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      options_.schema.qualify(
          "SELECT a.asset, a.balance, a.held, a.initial_balance FROM {schema}.accounts a "
          "WHERE a.user_id = $1::bigint AND a.asset = ({schema}.asset_for($2)).code"),
      Params(user_id, asset ? Param(asset->code()) : Param()));
  if (!r.ok()) return internal::interpret_ledger_error(r.status());
  if (r->rows.empty()) {
    return absl::NotFoundError(fmt::format("no account of user {} in {}", user_id,
                                           asset ? asset->code() : "the default asset"));
  }
  auto read = r->row(0).read<std::string, Amount, Amount, Amount>();
  if (!read.ok()) return read.status();
  const auto& [code, balance, held, initial] = *read;
  absl::StatusOr<AssetCode> checked = AssetCode::create(code);
  if (!checked.ok()) return absl::InternalError(std::string(checked.status().message()));
  return Account{.user_id = user_id,
                 .asset = *checked,
                 .balance = balance,
                 .held = held,
                 .initial_balance = initial};
}

absl::StatusOr<Amount> Ledger::balance(Connection& conn, std::int64_t user_id,
                                       std::optional<AssetCode> asset) const {
  absl::StatusOr<Account> a = account(conn, user_id, asset);
  if (!a.ok()) {
    if (a.status().code() == absl::StatusCode::kNotFound && !asset) {
      return absl::NotFoundError(fmt::format("user {} not found", user_id));
    }
    return a.status();
  }
  return a->balance;
}

absl::StatusOr<std::vector<BalanceMismatch>> Ledger::find_balance_mismatches(
    Connection& conn) const {
  absl::StatusOr<Transaction> tx = Transaction::begin(conn, kBoundedSnapshot);
  if (!tx.ok()) return tx.status();
  internal::BalanceCheck check;
  if (absl::Status s = internal::check_user_balances(
          conn, options_.schema, options_.schema.qualify("SELECT id FROM {schema}.users"), {},
          check);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  return std::move(check.mismatches);
}

}  // namespace idemledger
