#include "idemledger/queue/intake.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>
#include <vector>

#include "absl/strings/ascii.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/params.hpp"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/batch_reply.hpp"
#include "src/core/internal/text.hpp"
#include "src/ledger/internal/contract.hpp"
#include "src/ledger/internal/sqlstates.hpp"
#include "src/queue/internal/hmac.hpp"

namespace idemledger {
namespace {

absl::Status unauthenticated(std::string_view rule) {
  return absl::UnauthenticatedError(fmt::format("webhook signature: {}", rule));
}

absl::Status bad_payload(std::string_view rule) {
  return absl::InvalidArgumentError(fmt::format("webhook payload: {}", rule));
}

// Rejects duplicate keys while parsing: with duplicates, what the signer
// meant and what we read could differ.
class DuplicateKeyGuard {
 public:
  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) keys_.emplace_back();
    if (event == E::object_end && !keys_.empty()) keys_.pop_back();
    if (event == E::key && !keys_.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!keys_.back().insert(key).second) duplicate_ = key;
    }
    return true;
  }
  const std::optional<std::string>& duplicate() const { return duplicate_; }

 private:
  std::vector<std::unordered_set<std::string>> keys_;  // per open object: linear, not quadratic
  std::optional<std::string> duplicate_;
};

absl::StatusOr<std::string> bounded_string(const nlohmann::json& body, const char* field,
                                           std::size_t max) {
  const auto it = body.find(field);
  if (it == body.end()) return bad_payload(fmt::format("\"{}\" is required", field));
  if (!it->is_string()) return bad_payload(fmt::format("\"{}\" must be a JSON string", field));
  const std::string& value = it->get_ref<const std::string&>();
  if (value.empty() || value.size() > max || value.find('\0') != std::string::npos) {
    return bad_payload(fmt::format("\"{}\" must be 1..{} bytes without NUL", field, max));
  }
  return value;
}

// An amount field: a JSON string Amount::parse accepts (or zero, for a fee).
absl::StatusOr<std::optional<Amount>> amount_field(const nlohmann::json& body, const char* field,
                                                   bool required, bool zero_ok = false) {
  const auto it = body.find(field);
  if (it == body.end()) {
    if (required) return bad_payload(fmt::format("\"{}\" is required", field));
    return std::optional<Amount>();
  }
  if (it->is_number()) {
    return bad_payload(fmt::format(
        "\"{}\" must be a JSON string, not a number (a number may already be rounded)", field));
  }
  if (!it->is_string()) return bad_payload(fmt::format("\"{}\" must be a JSON string", field));
  const std::string& text = it->get_ref<const std::string&>();
  absl::StatusOr<Amount> a = zero_ok ? Amount::parse_balance(text) : Amount::parse(text);
  if (!a.ok()) return bad_payload(fmt::format("\"{}\": {}", field, a.status().message()));
  return std::optional<Amount>(*a);
}

}  // namespace

absl::StatusOr<WebhookVerifier> WebhookVerifier::create(std::string secret,
                                                        absl::Duration timestamp_tolerance) {
  if (secret.size() < kMinWebhookSecretLength) {
    return absl::InvalidArgumentError(
        fmt::format("webhook secret must be at least {} bytes, got {}", kMinWebhookSecretLength,
                    secret.size()));
  }
  return WebhookVerifier(std::move(secret), timestamp_tolerance);
}

std::string WebhookVerifier::sign(std::string_view raw_body, std::string_view timestamp) const {
  const internal::Digest d = timestamp.empty()
                                 ? internal::hmac_sha256(secret_, {raw_body})
                                 : internal::hmac_sha256(secret_, {timestamp, ".", raw_body});
  return internal::to_hex(d);
}

absl::Status WebhookVerifier::verify(std::string_view raw_body, std::string_view signature,
                                     std::string_view timestamp, absl::Time now) const {
  if (signature.starts_with("sha256=")) signature.remove_prefix(7);
  if (signature.empty()) return unauthenticated("missing");
  const std::optional<internal::Digest> claimed = internal::parse_hex_digest(signature);
  if (!claimed) return unauthenticated("must be 64 hex digits of HMAC-SHA256");
  internal::Digest expected{};
  if (tolerance_ > absl::ZeroDuration()) {
    std::int64_t seconds = 0;
    const auto [end, ec] =
        std::from_chars(timestamp.data(), timestamp.data() + timestamp.size(), seconds);
    if (timestamp.empty() || ec != std::errc() || end != timestamp.data() + timestamp.size()) {
      return unauthenticated("timestamp missing or not unix seconds");
    }
    if (absl::AbsDuration(now - absl::FromUnixSeconds(seconds)) > tolerance_) {
      return unauthenticated(
          fmt::format("timestamp outside the {} tolerance window (replayed capture?)",
                      absl::FormatDuration(tolerance_)));
    }
    expected = internal::hmac_sha256(secret_, {timestamp, ".", raw_body});
  } else {
    expected = internal::hmac_sha256(secret_, {raw_body});
  }
  if (!internal::digests_equal(expected, *claimed)) return unauthenticated("mismatch");
  return absl::OkStatus();
}

absl::StatusOr<WebhookEvent> parse_webhook(std::string_view raw_body) {
  if (raw_body.size() > kMaxWebhookBodyLength) {
    return bad_payload(fmt::format("body must be at most {} bytes", kMaxWebhookBodyLength));
  }
  if (!internal::is_valid_utf8(raw_body)) return bad_payload("body must be valid UTF-8");
  // The JSON parser reads a NUL as the end of its input: what follows it
  // would be signed but never read.
  if (raw_body.find('\0') != std::string_view::npos) {
    return bad_payload("body must not contain a NUL byte");
  }
  DuplicateKeyGuard guard;
  nlohmann::json body;
  try {
    body = nlohmann::json::parse(raw_body, std::ref(guard), /*allow_exceptions=*/false);
  } catch (
      const std::exception&) {  // nlohmann may still throw from deep inside; never across our API
    return bad_payload("body must be one JSON object");
  }
  if (body.is_discarded()) return bad_payload("body must be one well-formed JSON object");
  if (guard.duplicate())
    return bad_payload(fmt::format("duplicate key \"{}\"", *guard.duplicate()));
  if (!body.is_object()) return bad_payload("body must be a JSON object");

  WebhookEvent event;
  absl::StatusOr<std::string> id = bounded_string(body, "event_id", kMaxEventIdLength);
  if (!id.ok()) return id.status();
  event.event_id = *std::move(id);
  if (event.event_id.starts_with(kReorgEventIdPrefix)) {
    return bad_payload(
        fmt::format("\"event_id\" must not start with \"{}\" (reserved for reorg compensations)",
                    kReorgEventIdPrefix));
  }

  absl::StatusOr<std::string> type = bounded_string(body, "event_type", 32);
  if (!type.ok()) return type.status();
  const std::optional<EventType> parsed_type = parse_event_type(*type);
  if (!parsed_type || *parsed_type == EventType::kReorgCompensation) {
    return bad_payload(
        "\"event_type\" must be one of deposit, airdrop, withdrawal, withdrawal_fee, "
        "withdrawal_requested, withdrawal_confirmed, withdrawal_failed");
  }
  event.type = *parsed_type;
  const bool settles =
      event.type == EventType::kWithdrawalConfirmed || event.type == EventType::kWithdrawalFailed;

  // Amounts are strings; a failure carries none, a confirmation may.
  const bool needs_amount = !settles;
  const bool may_have_amount = event.type != EventType::kWithdrawalFailed;
  absl::StatusOr<std::optional<Amount>> amount = amount_field(body, "amount", needs_amount);
  if (!amount.ok()) return amount.status();
  if (*amount && !may_have_amount)
    return bad_payload("\"amount\" is not taken by withdrawal_failed");
  event.amount = *amount;
  if (event.type == EventType::kWithdrawalRequested ||
      event.type == EventType::kWithdrawalConfirmed) {
    absl::StatusOr<std::optional<Amount>> fee = amount_field(body, "fee", false, /*zero_ok=*/true);
    if (!fee.ok()) return fee.status();
    event.fee = *fee;
  }

  // The asset: a code, or where it lives.
  const bool by_code = body.contains("asset");
  const bool by_chain = body.contains("chain");
  if (by_code && by_chain)
    return bad_payload("name the asset by \"asset\" or by \"chain\", not both");
  if (by_code) {
    absl::StatusOr<std::string> code = bounded_string(body, "asset", AssetCode::kMaxLength);
    if (!code.ok()) return code.status();
    if (!AssetCode::create(*code).ok()) {
      return bad_payload("\"asset\" must match [A-Z0-9][A-Z0-9._-]{0,15}");
    }
    event.asset = *std::move(code);
  } else if (by_chain) {
    absl::StatusOr<std::string> chain = bounded_string(body, "chain", 32);
    if (!chain.ok()) return chain.status();
    event.chain = *std::move(chain);
    if (body.contains("contract")) {
      absl::StatusOr<std::string> contract = bounded_string(body, "contract", 128);
      if (!contract.ok()) return contract.status();
      absl::StatusOr<std::string> normalized = internal::normalize_contract(*contract);
      if (!normalized.ok())
        return bad_payload(fmt::format("\"contract\": {}", normalized.status().message()));
      event.contract = *std::move(normalized);
    }
  } else if (body.contains("contract")) {
    return bad_payload("\"contract\" needs its \"chain\"");
  }

  if (is_credit(event.type)) {
    absl::StatusOr<std::string> address = bounded_string(body, "to_address", kMaxAddressLength);
    if (!address.ok()) return address.status();
    event.to_address = *std::move(address);
    if (const auto hash = body.find("tx_hash"); hash != body.end()) {
      if (!hash->is_string() || !internal::is_tx_hash(hash->get_ref<const std::string&>())) {
        return bad_payload("\"tx_hash\" must be a string of 0x and 64 hex digits");
      }
      // One spelling per transaction: the finality cache, the compensation
      // key ("reorg:<tx_hash>") and the relay's join all compare text.
      event.tx_hash = absl::AsciiStrToLower(hash->get_ref<const std::string&>());
    }
    return event;
  }
  const auto user = body.find("user_id");
  if (user == body.end() || !user->is_number_integer() || user->get<std::int64_t>() <= 0) {
    return bad_payload("\"user_id\" must be a positive integer for withdrawals");
  }
  event.user_id = user->get<std::int64_t>();
  if (settles) {
    absl::StatusOr<std::string> hold = bounded_string(body, "withdrawal_id", kMaxEventIdLength);
    if (!hold.ok()) return hold.status();
    event.hold_id = *std::move(hold);
  }
  if (event.type == EventType::kWithdrawalRequested) {
    if (const auto expires = body.find("expires_in_s"); expires != body.end()) {
      const std::int64_t max_s = absl::ToInt64Seconds(kMaxHoldExpiry);
      if (!expires->is_number_integer() || expires->get<std::int64_t>() < 1 ||
          expires->get<std::int64_t>() > max_s) {
        return bad_payload(
            fmt::format("\"expires_in_s\" must be an integer number of seconds, 1..{}", max_s));
      }
      event.expires_in = absl::Seconds(expires->get<std::int64_t>());
    }
  }
  return event;
}

namespace {

// record_event() spells its answers as the database does.
absl::StatusOr<RecordResult> read_record_answer(std::string_view answer) {
  static constexpr EnumNames<RecordResult, 3> kAnswers{{{
      {RecordResult::kAccepted, "accepted"},
      {RecordResult::kDuplicate, "duplicate"},
      {RecordResult::kUnmatchedAddress, "unmatched"},
  }}};
  if (std::optional<RecordResult> result = kAnswers.parse(answer)) return *result;
  return absl::InternalError(
      fmt::format("record_event answered {}", internal::quoted_for_humans(answer)));
}

// A refused record, keyed by the event id (ON CONFLICT DO NOTHING): running
// it again after an in-doubt commit answers "duplicate", never a second row.
absl::Status refused_record(const absl::Status& error) {
  return mark_idempotent(internal::interpret_ledger_error(error));
}

}  // namespace

absl::StatusOr<RecordResult> record_webhook_event(Connection& conn, const Schema& schema,
                                                  const WebhookEvent& event,
                                                  std::string_view trace_id,
                                                  std::string_view raw_body) {
  absl::StatusOr<Result> r = conn.execute(
      schema.qualify("SELECT {schema}.record_event($1, $2, $3::numeric, $4, $5, $6, $7, "
                     "$8::bigint, $9::numeric, $10, $11::bigint, $12, $13, $14)"),
      Params(event.event_id, to_string(event.type), event.amount, null_if_empty(event.asset),
             null_if_empty(event.chain), null_if_empty(event.contract),
             null_if_empty(event.to_address), event.user_id, event.fee,
             null_if_empty(event.hold_id), event.expires_in, null_if_empty(trace_id), raw_body,
             null_if_empty(event.tx_hash)));
  if (!r.ok()) return refused_record(r.status());
  absl::StatusOr<std::string> answer = read_single<std::string>(*r, "record_event");
  if (!answer.ok()) return answer.status();
  return read_record_answer(*answer);
}

RecordBatcher::RecordBatcher(RecordBatcherOptions options) : options_(options) {
  options_.max_batch = std::clamp<std::size_t>(options_.max_batch, 1, kMaxRecordBatch);
  options_.max_in_flight = std::max(options_.max_in_flight, 0);
  if (options_.max_wait < absl::ZeroDuration()) options_.max_wait = absl::ZeroDuration();
}

absl::StatusOr<RecordResult> RecordBatcher::record(Connection& conn, const WebhookEvent& event,
                                                   std::string_view trace_id,
                                                   std::string_view raw_body) {
  Delivery mine{.delivery = {.event = &event, .trace_id = trace_id, .raw_body = raw_body}};
  std::shared_ptr<Batch> batch;
  {
    MutexLock lock(&mu_);
    const bool leads = open_ == nullptr;
    if (leads) open_ = std::make_shared<Batch>();
    batch = open_;
    batch->deliveries.push_back(&mine);
    if (batch->deliveries.size() >= options_.max_batch) {
      batch->closed = true;
      open_.reset();
    }
    if (!leads) {
      // The leader records it and sets `done` under this lock.
      mu_.AwaitWithDeadline([&] { return batch->done; }, absl::InfiniteFuture());
      return std::move(mine.result);
    }
    mu_.AwaitWithDeadline(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return batch->closed || in_flight_ < options_.max_in_flight;
        },
        absl::Now() + options_.max_wait);
    if (!batch->closed) {  // not full: still the open batch, closed now
      batch->closed = true;
      open_.reset();
    }
    ++in_flight_;
  }
  // Closed: nobody appends any more, and the followers only wait.
  record_all(conn, batch->deliveries);
  {
    MutexLock lock(&mu_);
    --in_flight_;  // the next batch's leader may go now
    batch->done = true;
  }
  return std::move(mine.result);
}

std::vector<absl::StatusOr<RecordResult>> record_webhook_events(
    Connection& conn, const Schema& schema, std::span<const WebhookDelivery> deliveries) {
  if (deliveries.empty() || deliveries.size() > kMaxRecordBatch) {
    return std::vector<absl::StatusOr<RecordResult>>(
        deliveries.size(), absl::InvalidArgumentError(fmt::format(
                               "record_webhook_events: a batch holds 1..{} deliveries, got {}",
                               kMaxRecordBatch, deliveries.size())));
  }
  ArrayText ids, types, amounts, assets, chains, contracts, addresses, users, fees, holds, expires,
      traces, payloads, hashes;
  for (const WebhookDelivery& d : deliveries) {
    const WebhookEvent& e = *d.event;
    ids.add(e.event_id);
    types.add(to_string(e.type));
    amounts.add(e.amount);
    assets.add(null_if_empty(e.asset));
    chains.add(null_if_empty(e.chain));
    contracts.add(null_if_empty(e.contract));
    addresses.add(null_if_empty(e.to_address));
    users.add(e.user_id);
    fees.add(e.fee);
    holds.add(null_if_empty(e.hold_id));
    expires.add(e.expires_in);
    traces.add(null_if_empty(d.trace_id));
    payloads.add(d.raw_body);
    hashes.add(null_if_empty(e.tx_hash));
  }
  const Params params(
      std::move(ids).finish(), std::move(types).finish(), std::move(amounts).finish(),
      std::move(assets).finish(), std::move(chains).finish(), std::move(contracts).finish(),
      std::move(addresses).finish(), std::move(users).finish(), std::move(fees).finish(),
      std::move(holds).finish(), std::move(expires).finish(), std::move(traces).finish(),
      std::move(payloads).finish(), std::move(hashes).finish());
  absl::StatusOr<Result> r = conn.execute(
      schema.qualify("SELECT * FROM {schema}.record_events($1::pg_catalog.text[], "
                     "$2::pg_catalog.text[], $3::numeric[], $4::pg_catalog.text[], "
                     "$5::pg_catalog.text[], $6::pg_catalog.text[], $7::pg_catalog.text[], "
                     "$8::bigint[], $9::numeric[], $10::pg_catalog.text[], $11::bigint[], "
                     "$12::pg_catalog.text[], $13::pg_catalog.text[], $14::pg_catalog.text[])"),
      params);
  if (!r.ok()) {
    // All of it or none of it, and not known which: nobody may answer 200.
    return std::vector<absl::StatusOr<RecordResult>>(deliveries.size(), refused_record(r.status()));
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> replies =
      internal::read_batch_reply<std::string>(*r, deliveries.size(), "record_events");
  if (!replies.ok()) {
    // Committed, but not readable: nobody may answer 200 from it.
    return std::vector<absl::StatusOr<RecordResult>>(deliveries.size(), replies.status());
  }
  std::vector<absl::StatusOr<RecordResult>> answers;
  answers.reserve(deliveries.size());
  for (const absl::StatusOr<std::string>& reply : *replies) {
    answers.push_back(reply.ok() ? read_record_answer(*reply)
                                 : absl::StatusOr<RecordResult>(refused_record(reply.status())));
  }
  return answers;
}

void RecordBatcher::record_all(Connection& conn, const std::vector<Delivery*>& deliveries) const {
  std::vector<WebhookDelivery> batch;
  batch.reserve(deliveries.size());
  for (const Delivery* d : deliveries) batch.push_back(d->delivery);
  std::vector<absl::StatusOr<RecordResult>> answers =
      record_webhook_events(conn, options_.schema, batch);
  for (std::size_t i = 0; i < deliveries.size(); ++i) deliveries[i]->result = std::move(answers[i]);
}

}  // namespace idemledger
