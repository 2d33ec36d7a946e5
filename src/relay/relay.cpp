#include "idemledger/relay/relay.hpp"

#include <fmt/format.h>

#include <chrono>

#include "idemledger/core/status.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/relay/internal/delivery_pool.hpp"
#include "src/relay/internal/store.hpp"

namespace idemledger {

absl::Status Relay::validate(const RelayOptions& options) {
  if (!options.transport) return absl::InvalidArgumentError("relay: transport is required");
  if (options.max_in_flight < 1 || options.drain_concurrency < 1 ||
      options.drain_concurrency > options.max_in_flight) {
    return absl::InvalidArgumentError("relay: need 1 <= drain_concurrency <= max_in_flight");
  }
  if (options.retry.max_attempts < 0) {
    return absl::InvalidArgumentError("relay: retry.max_attempts must not be negative");
  }
  for (const auto& [topic, policy] : options.policies) {
    if (absl::Status s = policy.check(topic); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Relay>> Relay::create(RelayOptions options) {
  if (absl::Status s = validate(options); !s.ok()) return s;
  return std::unique_ptr<Relay>(new Relay(std::move(options)));
}

Relay::Relay(RelayOptions options)
    : options_(std::move(options)),
      store_(std::make_unique<const internal::RelayStore>(options_.schema)),
      marker_name_("relay:" + options_.name),
      breaker_({.name = marker_name_,
                .schema = options_.schema,
                .owner = options_.owner,
                .failure_threshold = options_.failure_threshold,
                .open_for = options_.marker_ttl,
                .probe_lease = options_.probe_lease,
                .metrics = options_.metrics}),
      metrics_(options_.metrics) {
  if (metrics_ == nullptr) return;
  constexpr std::string_view kHelp =
      "Messages the delivery relay finished, by what became of them.";
  for (const auto& [d, name] : kRelayDispositionNames.entries) {
    results_[static_cast<int>(d)] = &counter(*metrics_, "idemledger_relay_messages_total", kHelp,
                                             {{"result", std::string(name)}});
  }
  mode_gauge_ = &gauge(*metrics_, "idemledger_relay_mode",
                       "Relay mode this process is in: 0 normal, 1 paused, 2 draining.");
  in_flight_gauge_ =
      &gauge(*metrics_, "idemledger_relay_in_flight", "Deliveries this process holds right now.");
}

Relay::~Relay() = default;

const RelayPolicy* Relay::policy_for(std::string_view topic) const {
  const auto it = options_.policies.find(internal::to_absl(topic));
  return it == options_.policies.end() ? nullptr : &it->second;
}

absl::StatusOr<Relay::Decision> Relay::decide(Connection& conn) {
  absl::StatusOr<internal::RelayStore::Snapshot> seen = store_->snapshot(conn, marker_name_);
  if (!seen.ok()) return seen.status();
  const bool marker_set =
      seen->marker == BreakerState::kOpen || seen->marker == BreakerState::kHalfOpen;
  Decision decision;
  if (!marker_set || (!seen->due_dead_letters && !seen->outbox_waiting)) {
    // Closed: every call may go, no need to take the marker row's lock (a
    // write) on every cycle. Nothing to send: no need to ask for a probe.
    decision.mode = marker_set               ? RelayMode::kPaused
                    : seen->due_dead_letters ? RelayMode::kDraining
                                             : RelayMode::kNormal;
  } else {
    const BreakerDecision admission = breaker_.acquire(conn);
    decision.probe = admission.admission == Admission::kProbe;
    decision.mode = admission.admission == Admission::kReject ? RelayMode::kPaused
                    : seen->due_dead_letters                  ? RelayMode::kDraining
                                                              : RelayMode::kNormal;
  }
  set_mode(decision.mode);
  return decision;
}

absl::StatusOr<std::vector<RelayMessage>> Relay::claim_outbox(Connection& conn, int limit) {
  return store_->claim_outbox(conn, owner(), options_.lease, limit);
}

absl::StatusOr<std::vector<RelayMessage>> Relay::claim_dead_letters(Connection& conn, int limit) {
  return store_->claim_dead_letters(conn, owner(), options_.lease, limit);
}

Relay::Sent Relay::send_with_retries(const RelayMessage& message) const {
  Sent sent;
  sent.status = with_retries(options_.retry, [&]() -> absl::Status {
    if (std::chrono::steady_clock::now() >= message.claim_ends ||
        absl::Now() >= message.claimed_until) {
      sent.lease_ended = true;
      return absl::FailedPreconditionError("the claim ended before the call");  // stops retrying
    }
    ++sent.calls;
    sent.last_answer = options_.transport(message);
    return sent.last_answer;
  });
  return sent;
}

absl::StatusOr<Relay::Delivery> Relay::deliver(Connection& conn, const RelayMessage& message,
                                               bool probe) {
  return finish(conn, attempt(conn, message, probe));
}

absl::StatusOr<Relay::Delivery> Relay::finish(Connection& conn, const Attempt& attempt) {
  absl::StatusOr<RelayDisposition> recorded = attempt.record(conn);
  if (!recorded.ok()) return recorded.status();
  count(*recorded);
  return Delivery{.disposition = *recorded, .called_downstream = attempt.called_downstream};
}

Relay::Attempt Relay::attempt(Connection& conn, const RelayMessage& message, bool probe) {
  const RelayPolicy* policy = policy_for(message.topic);
  if (absl::Status decoded = decode(message, policy); !decoded.ok()) {
    // A letter that decoded once but no longer does (its policy was
    // removed) is already off the outbox: it ends dropped, with the reason.
    std::string reason = fmt::format("undecodable: {}", decoded.message());
    return {.record = [this, message, reason = std::move(reason)](Connection& c) {
      return message.from_dead_letters() ? record_dropped(c, message, reason)
                                         : record_quarantined(c, message, reason);
    }};
  }
  const Verdict verdict = message.from_dead_letters() ? judge(conn, message, *policy) : Verdict{};
  if (verdict.drop_reason) {
    return {.record = [this, message, reason = *verdict.drop_reason](Connection& c) {
      return record_dropped(c, message, reason);
    }};
  }
  if (verdict.requeue) {
    return {.record = [this, message, policy](Connection& c) {
      return record_dead_letter(c, message, *policy, kRequeueQueryFailed);
    }};
  }
  const Sent tried = send_with_retries(message);
  // What the downstream last answered goes to the breaker whatever becomes
  // of the row, even when the claim ended between two tries. A refusal is an
  // answer: the downstream is up, the message is wrong.
  if (tried.calls > 0) {
    report_downstream(conn, probe, tried.last_answer.ok() || !is_retryable(tried.last_answer));
  }
  if (tried.lease_ended) {
    // This process was paused past its claim (nothing else takes that long:
    // the lease outlasts a whole delivery). Another replica may hold the row
    // now and be delivering it: whoever holds it decides, and nothing more
    // is sent or written from here.
    log_message(LogLevel::kWarning, "not sent: the claim ended first (was this process paused?)",
                message, "");
    return {.record = [](Connection&) -> absl::StatusOr<RelayDisposition> {
              return RelayDisposition::kNotClaimed;
            },
            .called_downstream = tried.calls > 0};
  }
  const absl::Status& sent = tried.status;
  Attempt sent_attempt{.called_downstream = true};
  if (sent.ok()) {
    sent_attempt.record = [this, message](Connection& c) { return record_delivered(c, message); };
  } else if (is_retryable(sent)) {
    sent_attempt.record = [this, message, policy,
                           reason = std::string(sent.ToString())](Connection& c) {
      return record_dead_letter(c, message, *policy, reason);
    };
  } else {
    sent_attempt.record = [this, message,
                           reason = fmt::format("rejected: {}", internal::to_std(sent.message()))](
                              Connection& c) { return record_dropped(c, message, reason); };
  }
  return sent_attempt;
}

absl::StatusOr<RelayDisposition> Relay::record_delivered(Connection& conn,
                                                         const RelayMessage& message) {
  absl::StatusOr<bool> marked = store_->mark_delivered(conn, message, owner());
  if (!marked.ok()) return mark_idempotent(marked.status());  // conditional on our claim
  if (!*marked) {
    log_message(LogLevel::kWarning, "delivered, but the claim was lost meanwhile", message, "");
    return RelayDisposition::kNotClaimed;
  }
  return RelayDisposition::kDelivered;
}

absl::StatusOr<RelayDisposition> Relay::record_dead_letter(Connection& conn,
                                                           const RelayMessage& message,
                                                           const RelayPolicy& policy,
                                                           std::string_view reason) {
  absl::StatusOr<std::optional<bool>> dropped =
      store_->dead_letter(conn, message, owner(), reason, options_.dlq_backoff, policy.max_retries);
  if (!dropped.ok()) return mark_idempotent(dropped.status());
  if (!*dropped) return RelayDisposition::kNotClaimed;
  log_message(LogLevel::kWarning, **dropped ? "dropped: retry budget spent" : "dead-lettered",
              message, reason);
  return **dropped ? RelayDisposition::kDropped : RelayDisposition::kDeadLettered;
}

absl::StatusOr<RelayDisposition> Relay::record_dropped(Connection& conn,
                                                       const RelayMessage& message,
                                                       std::string_view reason) {
  absl::StatusOr<bool> dropped = store_->drop(conn, message, owner(), reason);
  if (!dropped.ok()) return mark_idempotent(dropped.status());
  if (!*dropped) return RelayDisposition::kNotClaimed;
  log_message(LogLevel::kWarning, "dropped", message, reason);
  return RelayDisposition::kDropped;
}

absl::StatusOr<RelayDisposition> Relay::record_quarantined(Connection& conn,
                                                           const RelayMessage& message,
                                                           std::string_view reason) {
  absl::StatusOr<bool> moved = store_->quarantine(conn, message, owner(), reason);
  if (!moved.ok()) return mark_idempotent(moved.status());
  if (!*moved) return RelayDisposition::kNotClaimed;
  log_message(LogLevel::kError, "quarantined", message, reason);
  return RelayDisposition::kQuarantined;
}

absl::Status Relay::release(Connection& conn, const std::vector<RelayMessage>& messages) {
  return store_->release(conn, messages, owner());
}

void Relay::report_downstream(Connection& conn, bool probe, bool healthy) {
  if (probe) {
    breaker_.record(conn, {.admission = Admission::kProbe}, healthy);
    failures_recorded_.store(false, std::memory_order_relaxed);
    return;
  }
  if (!healthy) {
    failures_recorded_.store(true, std::memory_order_relaxed);
    breaker_.record(conn, {.admission = Admission::kAllow}, false);
  } else if (failures_recorded_.exchange(false, std::memory_order_relaxed)) {
    breaker_.record(conn, {.admission = Admission::kAllow}, true);
  }
}

void Relay::count(RelayDisposition disposition) {
  if (prometheus::Counter* c = results_[static_cast<int>(disposition)]; c != nullptr) {
    c->Increment();
  }
}

void Relay::error(std::string_view step, const absl::Status& status) {
  if (metrics_ != nullptr) {
    counter(*metrics_, "idemledger_relay_errors_total",
            "Errors the relay's loop met, by step; it retries after poll_interval.",
            {{"step", std::string(step)}})
        .Increment();
  }
  const std::string text = status.ToString();
  const LogField fields[] = {{"step", step}, {"error", text}};
  emit_log(options_.log, LogLevel::kError, "relay step failed; retrying", "", "", fields);
}

void Relay::set_mode(RelayMode mode) {
  const RelayMode before = mode_.exchange(mode, std::memory_order_relaxed);
  if (mode_gauge_ != nullptr) mode_gauge_->Set(static_cast<double>(mode));
  if (before != mode) {
    const LogField fields[] = {{"from", to_string(before)}, {"to", to_string(mode)}};
    emit_log(options_.log, mode == RelayMode::kPaused ? LogLevel::kWarning : LogLevel::kInfo,
             "relay mode changed", "", "", fields);
  }
}

void Relay::log_message(LogLevel level, std::string_view what, const RelayMessage& message,
                        std::string_view reason) const {
  const LogField fields[] = {{"outbox_id", message.outbox_id},
                             {"topic", message.topic},
                             {"dlq_retries", static_cast<std::int64_t>(message.dlq_retries)},
                             {"reason", reason}};
  emit_log(options_.log, level, what, "", "", fields);
}

// --- run(): the loop that feeds the delivery threads ------------------------

void Relay::deliver_on_pool(const SessionLender& sessions, const RelayMessage& message) {
  std::optional<Attempt> tried;
  absl::Status unrecorded;
  const absl::Status lent = sessions([&](Connection& conn) {
    tried = attempt(conn, message, /*probe=*/false);
    unrecorded = finish(conn, *tried).status();
  });
  // The downstream answered, but the session died before the answer was
  // written: write it on a fresh session, rather than leave the row to its
  // lease and send it a second time.
  for (int retry = 0; lent.ok() && tried && tried->called_downstream && !unrecorded.ok() &&
                      is_retryable(unrecorded) && retry < 5;
       ++retry) {
    absl::SleepFor(full_jitter_backoff(options_.retry, retry));
    const absl::Status again =
        sessions([&](Connection& conn) { unrecorded = finish(conn, *tried).status(); });
    if (!again.ok()) unrecorded = again;
  }
  if (!lent.ok() || !unrecorded.ok()) {
    error("record", lent.ok() ? unrecorded : lent);
    log_message(LogLevel::kError, "outcome not recorded; the lease brings it back", message,
                internal::to_std((lent.ok() ? unrecorded : lent).ToString()));
  }
}

bool Relay::cycle(Connection& conn, internal::DeliveryPool& pool) {
  absl::StatusOr<Decision> decision = decide(conn);
  if (!decision.ok()) {
    error("decide", decision.status());
    return false;
  }
  if (decision->mode == RelayMode::kPaused) return false;
  const bool draining = decision->mode == RelayMode::kDraining;
  const auto claim = [&](int limit) {
    return draining ? claim_dead_letters(conn, limit) : claim_outbox(conn, limit);
  };
  if (decision->probe) {
    // Exactly one call decides for every replica; messages settled without
    // a call (policy, quarantine) do not count as the probe.
    for (;;) {
      absl::StatusOr<std::vector<RelayMessage>> one = claim(1);
      if (!one.ok()) {
        error("claim", one.status());
        return false;
      }
      if (one->empty()) return false;
      absl::StatusOr<Delivery> delivery = deliver(conn, one->front(), /*probe=*/true);
      if (!delivery.ok()) {
        error("probe", delivery.status());
        return true;
      }
      if (delivery->called_downstream) return true;
    }
  }
  const int free_slots = pool.free_slots(draining, options_.drain_concurrency);
  if (free_slots <= 0) return false;
  absl::StatusOr<std::vector<RelayMessage>> claimed = claim(free_slots);
  if (!claimed.ok()) {
    error("claim", claimed.status());
    return false;
  }
  if (claimed->empty()) return false;
  pool.submit(*std::move(claimed));
  return true;
}

void Relay::run(const SessionLender& sessions, const std::function<bool()>& stop_requested) {
  internal::DeliveryPool pool(
      options_.max_in_flight,
      [&](const RelayMessage& message) { deliver_on_pool(sessions, message); },
      [this](int in_flight) {
        if (in_flight_gauge_ != nullptr) in_flight_gauge_->Set(static_cast<double>(in_flight));
      });
  while (!stop_requested()) {
    bool busy = false;
    const absl::Status lent = sessions([&](Connection& conn) { busy = cycle(conn, pool); });
    if (!lent.ok()) error("session", lent);
    if (!busy) pool.wait_for_slot(options_.poll_interval);
  }
  pool.stop();  // claims nothing more; finishes everything handed over
}

}  // namespace idemledger
