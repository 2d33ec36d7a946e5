// provider_simulator — a payment provider that delivers at least once.
//
//   provider_simulator setup    migrate; users 1..U with 100 each; addresses addr_<u>
//   provider_simulator run      send, wait until every event is terminal, check
//   provider_simulator relay-check   wait until notification_relay settled the
//                               outbox; compare with what mock_downstream got
//
// `run` signs and POSTs N events to webhook_intake, each delivered 1-3 times
// (copies adjacent in the stream race each other; some arrive late), plus bad
// deliveries: tampered signatures, numeric amounts, unknown event types,
// unknown addresses, and late replays of known ids with other amounts. It
// retries 429/503/connection errors like a real provider. Then it waits for
// the workers, prints a summary and checks the invariants; exit 1 if any fails.
//
// Environment: IDEMLEDGER_DSN, IDEMLEDGER_SCHEMA (idemledger),
// IDEMLEDGER_WEBHOOK_SECRET, IDEMLEDGER_INTAKE_PORT, IDEMLEDGER_TIMESTAMP_TOLERANCE_S
// (0), SIM_EVENTS (20000), SIM_USERS (200), SIM_CONCURRENCY (16), SIM_WAIT_S (90),
// SIM_DELIVERIES_PER_S (0 = as fast as intake answers; a pace spreads the
// stream over time, as the chaos soak needs), SIM_CHAOS (0; 1 while tests/chaos/run.sh breaks
// things: a delivery whose "accepted" answer was lost with its connection comes back as
// "duplicate", so "accepted exactly once" relaxes to "at most once" — the payment_events count
// still proves every event was recorded once). relay-check also reads MOCK_PORT (mock_downstream's
// port) and RELAY_BOUND (replicas × RELAY_MAX_IN_FLIGHT: the most requests the API may see at
// once).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "../common/service.hpp"
#include "idemledger.hpp"
#include "idemledger/pg/connection.hpp"

namespace {

enum class Kind {
  kGood,
  kLateCopy,
  kTampered,
  kNumericAmount,
  kUnknownType,
  kUnknownAddress,
  kConflict
};

struct Delivery {
  int event;  // index into events: the event delivered, or the one a bad delivery imitates
  Kind kind;
  int serial = 0;  // distinguishes bad deliveries of one kind
};

struct SimEvent {
  std::string id;
  std::string type;
  std::string amount;
  int user;
};

std::string body_of(const SimEvent& e, const Delivery& d) {
  const Kind kind = d.kind;
  nlohmann::json j = {{"event_id", e.id}, {"event_type", e.type}, {"amount", e.amount}};
  if (e.type == "withdrawal") {
    j["user_id"] = e.user;
  } else {
    j["to_address"] = "addr_" + std::to_string(e.user);
  }
  switch (kind) {
    case Kind::kNumericAmount:
      j["amount"] = 12.5;
      break;
    case Kind::kUnknownType:
      j["event_type"] = "chargeback";
      break;
    case Kind::kUnknownAddress:  // a deposit of its own, to an address no user owns
      j["event_id"] = "unmatched_" + std::to_string(d.serial);
      j["event_type"] = "deposit";
      j.erase("user_id");
      j["to_address"] = "addr_nobody_" + std::to_string(d.serial);
      break;
    case Kind::kConflict:
      j["amount"] = e.amount + "1";
      break;
    default:
      break;
  }
  return j.dump();
}

int expected_status(Kind kind) {
  switch (kind) {
    case Kind::kTampered:
      return 401;
    case Kind::kNumericAmount:
    case Kind::kUnknownType:
      return 400;
    case Kind::kConflict:
      return 409;
    default:
      return 200;
  }
}

bool check(bool ok, const std::string& what) {
  std::printf("  [%s] %s\n", ok ? " ok " : "FAIL", what.c_str());
  return ok;
}

std::unique_ptr<idemledger::pg::Connection> connect(const std::string& dsn) {
  absl::StatusOr<std::unique_ptr<idemledger::pg::Connection>> c =
      idemledger::pg::Connection::open(dsn);
  if (!c.ok()) example::config_error("cannot connect: " + c.status().ToString());
  return std::move(*c);
}

int setup(const std::string& dsn, const idemledger::Schema& schema, long users) {
  const std::string schema_text(schema.name());
  std::unique_ptr<idemledger::pg::Connection> c = connect(dsn);
  if (absl::Status s = idemledger::migrate(*c, schema); !s.ok())
    example::config_error(s.ToString());
  const idemledger::Ledger ledger({.schema = schema});
  for (long u = 1; u <= users; ++u) {
    if (absl::Status s = ledger.open_account(*c, u, *idemledger::Amount::parse("100")); !s.ok()) {
      example::config_error(s.ToString());
    }
    const std::string address = "addr_" + std::to_string(u), user = std::to_string(u);
    if (!c->execute("INSERT INTO " + schema_text +
                        ".deposit_addresses (address, user_id) VALUES ($1, $2::bigint)",
                    {idemledger::Param(address), idemledger::Param(user)})
             .ok()) {
      example::config_error("cannot create deposit addresses");
    }
  }
  std::printf("setup: schema %s, %ld users with 100 each, addresses addr_1..addr_%ld\n",
              schema_text.c_str(), users, users);
  return 0;
}

// Every notification ends delivered exactly once, or dropped or quarantined
// with its reason; the downstream's own counts must say the same.
int relay_check(const std::string& dsn, const idemledger::Schema& schema) {
  const std::string schema_text(schema.name());
  const long port = example::env_long("MOCK_PORT", 0, 1, 65535);
  const long bound = example::env_long("RELAY_BOUND", 16, 1, 1'000'000);
  const long wait_s = example::env_long("SIM_WAIT_S", 90, 1, 3600);
  std::unique_ptr<idemledger::pg::Connection> db = connect(dsn);
  const auto number = [&](const std::string& sql) {
    absl::StatusOr<idemledger::Result> r = db->execute(sql);
    if (!r.ok()) example::config_error(r.status().ToString());
    return std::stol(r->at(0, 0).value_or("-1"));
  };
  const std::string outbox = schema_text + ".outbox", letters = schema_text + ".relay_dead_letters";
  const std::string unsettled =
      "SELECT (SELECT count(*) FROM " + outbox +
      " WHERE published_at IS NULL AND diverted_at IS NULL) + (SELECT count(*) FROM " + letters +
      " WHERE resolution IS NULL)";
  const absl::Time start = absl::Now();
  while (number(unsettled) > 0 && absl::Now() < start + absl::Seconds(wait_s)) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  httplib::Client mock("127.0.0.1", static_cast<int>(port));
  const httplib::Result got = mock.Get("/stats");
  if (!got || got->status != 200) example::config_error("mock_downstream does not answer");
  const nlohmann::json stats = nlohmann::json::parse(got->body);

  const long total = number("SELECT count(*) FROM " + outbox);
  const long published =
      number("SELECT count(*) FROM " + outbox + " WHERE published_at IS NOT NULL");
  const long via_dlq =
      number("SELECT count(*) FROM " + letters + " WHERE resolution = 'delivered'");
  const long dropped = number("SELECT count(*) FROM " + letters + " WHERE resolution = 'dropped'");
  const long quarantined = number("SELECT count(*) FROM " + schema_text + ".relay_quarantine");
  const long outcomes =
      number("SELECT count(*) FROM " + schema_text +
             ".processed_events WHERE outcome IN ('success', 'insufficient_funds')");
  std::printf("\nnotification relay (outbox -> mock_downstream, outage in the middle)\n");
  std::printf("  notifications written         %6ld   (one per applied or refused event)\n", total);
  std::printf("  delivered                     %6ld   (%ld of them after a stay in the DLQ)\n",
              published, via_dlq);
  std::printf("  dropped, kept with reason     %6ld\n", dropped);
  absl::StatusOr<idemledger::Result> reasons =
      db->execute("SELECT drop_reason, count(*) FROM " + letters +
                  " WHERE resolution = 'dropped' GROUP BY 1 ORDER BY 2 DESC");
  for (const auto& row : reasons.ok() ? reasons->rows : decltype(reasons->rows){}) {
    std::printf("    %-28s %6s\n", row[0].value_or("").c_str(), row[1].value_or("").c_str());
  }
  std::printf("  quarantined (undecodable)     %6ld\n", quarantined);
  std::printf("  max DLQ retries of a message  %6ld\n",
              number("SELECT coalesce(max(dlq_retries), 0) FROM " + letters));
  std::printf(
      "  downstream: %ld requests, %ld failed answers, %ld distinct messages received, "
      "%ld twice, at most %ld at once (bound %ld)\n",
      stats["requests"].get<long>(), stats["failed"].get<long>(), stats["unique"].get<long>(),
      stats["duplicates"].get<long>(), stats["max_concurrency"].get<long>(), bound);

  std::printf("relay invariants:\n");
  bool ok = check(total == outcomes, "one notification per outcome, none for a replayed event");
  ok &= check(number(unsettled) == 0, "nothing left undelivered or waiting in the DLQ");
  ok &= check(published + dropped + quarantined == total,
              "every notification delivered, or dropped / quarantined with its reason");
  ok &= check(stats["unique"].get<long>() == published,
              "the downstream received exactly the delivered ones");
  ok &= check(stats["duplicates"].get<long>() == 0, "none delivered twice");
  ok &= check(stats["max_concurrency"].get<long>() <= bound,
              "the downstream never saw more than the concurrency bound");
  ok &= check(stats["outage_marks"].size() >= 1 && via_dlq > 0,
              "the outage happened and its dead letters were resent");
  std::printf("\n%s\n", ok ? "relay invariants hold" : "RELAY INVARIANT VIOLATED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string dsn = example::env_string("IDEMLEDGER_DSN");
  const idemledger::Schema schema = example::env_schema();
  const std::string schema_text(schema.name());
  const long users = example::env_long("SIM_USERS", 200, 1, 1'000'000);
  if (mode == "setup") return setup(dsn, schema, users);
  if (mode == "relay-check") return relay_check(dsn, schema);
  if (mode != "run") example::config_error("usage: provider_simulator setup|run|relay-check");

  const long n_events = example::env_long("SIM_EVENTS", 20'000, 1, 10'000'000);
  const long concurrency = example::env_long("SIM_CONCURRENCY", 16, 1, 512);
  const long wait_s = example::env_long("SIM_WAIT_S", 90, 1, 3600);
  const bool chaos = example::env_long("SIM_CHAOS", 0, 0, 1) == 1;
  const long pace = example::env_long("SIM_DELIVERIES_PER_S", 0, 0, 1'000'000);
  const long port = example::env_long("IDEMLEDGER_INTAKE_PORT", 8080, 1, 65535);
  const long tolerance_s = example::env_long("IDEMLEDGER_TIMESTAMP_TOLERANCE_S", 0, 0, 86400);
  absl::StatusOr<idemledger::WebhookVerifier> signer = idemledger::WebhookVerifier::create(
      example::env_string("IDEMLEDGER_WEBHOOK_SECRET"), absl::Seconds(tolerance_s));
  if (!signer.ok()) example::config_error(std::string(signer.status().message()));

  // The events, and the order their deliveries arrive in.
  std::mt19937_64 rng(2026);
  std::vector<SimEvent> events;
  std::vector<Delivery> stream, late;
  for (int i = 0; i < n_events; ++i) {
    const int roll = static_cast<int>(rng() % 100);
    const char* type = roll < 80 ? "deposit" : roll < 85 ? "airdrop" : "withdrawal";
    events.push_back({"sim_" + std::to_string(i), type,
                      std::to_string(1 + rng() % 500) + "." + std::to_string(rng() % 100),
                      1 + static_cast<int>(rng() % static_cast<std::uint64_t>(users))});
    const int copies = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < copies; ++c) {
      (c > 0 && rng() % 4 == 0 ? late : stream)
          .push_back({i, c == 0 ? Kind::kGood : Kind::kLateCopy});
    }
  }
  const int bad_each = std::max(1, static_cast<int>(n_events / 100));
  for (int b = 0; b < bad_each; ++b) {
    const int target = static_cast<int>(rng() % static_cast<std::uint64_t>(n_events));
    stream.push_back({target, Kind::kTampered});
    stream.push_back({target, Kind::kNumericAmount});
    stream.push_back({target, Kind::kUnknownType});
    stream.push_back({target, Kind::kUnknownAddress, b});
    late.push_back({target, Kind::kConflict});
  }
  std::shuffle(stream.begin(), stream.end(), rng);
  std::shuffle(late.begin(), late.end(), rng);

  std::printf(
      "provider: %ld events, %zu deliveries (%d of each bad kind), %ld concurrent senders\n",
      n_events, stream.size() + late.size(), bad_each, concurrency);

  std::vector<std::atomic<int>> accepted_per_event(static_cast<std::size_t>(n_events));
  std::map<std::string, std::atomic<long>> tally;
  for (const char* k : {"accepted", "duplicate", "unmatched_address", "401", "400", "409",
                        "unexpected", "retried"}) {
    tally[k] = 0;
  }
  const absl::Time start = absl::Now();
  const auto send_all = [&](const std::vector<Delivery>& deliveries) {
    std::atomic<std::size_t> next{0};
    const absl::Time paced_from = absl::Now();
    std::vector<std::thread> senders;
    senders.reserve(static_cast<std::size_t>(concurrency));
    for (long t = 0; t < concurrency; ++t) {
      senders.emplace_back([&] {
        httplib::Client client("127.0.0.1", static_cast<int>(port));
        client.set_keep_alive(true);
        client.set_tcp_nodelay(true);
        for (std::size_t i; (i = next++) < deliveries.size();) {
          if (pace > 0) {
            absl::SleepFor(paced_from +
                           absl::Milliseconds(static_cast<std::int64_t>(i) * 1000 / pace) -
                           absl::Now());
          }
          const Delivery& d = deliveries[i];
          const std::string body = body_of(events[static_cast<std::size_t>(d.event)], d);
          const std::string ts =
              tolerance_s > 0 ? std::to_string(absl::ToUnixSeconds(absl::Now())) : "";
          std::string signature = signer->sign(body, ts);
          if (d.kind == Kind::kTampered) signature[0] = signature[0] == 'a' ? 'b' : 'a';
          httplib::Headers headers = {{"X-Signature", signature}};
          if (!ts.empty()) headers.emplace("X-Timestamp", ts);
          for (int attempt = 0;; ++attempt) {  // a provider redelivers on 429/503/network errors
            httplib::Result r =
                client.Post("/webhooks/payments", headers, body, "application/json");
            if (r && r->status != 429 && r->status != 503) {
              if (r->status != expected_status(d.kind)) {
                ++tally["unexpected"];
                std::fprintf(stderr, "unexpected %d for %s: %s\n", r->status, body.c_str(),
                             r->body.c_str());
              } else if (r->status == 200) {
                const std::string result = nlohmann::json::parse(r->body).value("result", "");
                ++tally[result];
                if (result == "accepted") ++accepted_per_event[static_cast<std::size_t>(d.event)];
              } else {
                ++tally[std::to_string(r->status)];
              }
              break;
            }
            ++tally["retried"];
            if (attempt > 50) {
              ++tally["unexpected"];
              break;
            }
            absl::SleepFor(absl::Milliseconds(10 * (attempt + 1)));
          }
        }
      });
    }
    for (auto& s : senders) s.join();
  };
  send_all(stream);
  send_all(late);
  const absl::Duration sent_in = absl::Now() - start;

  // Wait for the workers.
  std::unique_ptr<idemledger::pg::Connection> db = connect(dsn);
  // The database may restart under us (the chaos soak): reconnect and ask again.
  const auto scalar = [&](const std::string& sql) {
    for (int attempt = 0; attempt < 300; ++attempt) {
      if (db == nullptr || db->is_broken()) {
        absl::StatusOr<std::unique_ptr<idemledger::pg::Connection>> c =
            idemledger::pg::Connection::open(dsn);
        db = c.ok() ? std::move(*c) : nullptr;
      }
      if (db != nullptr) {
        absl::StatusOr<idemledger::Result> r = db->execute(sql);
        if (r.ok()) return r->rows.empty() ? std::string("NULL") : r->at(0, 0).value_or("NULL");
        if (!idemledger::is_retryable(r.status())) return std::string("ERROR");
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return std::string("ERROR");
  };
  const std::string pe = schema_text + ".payment_events";
  const absl::Time deadline = absl::Now() + absl::Seconds(wait_s);
  while (scalar("SELECT count(*) FROM " + pe + " WHERE status NOT IN ('confirmed','failed')") !=
             "0" &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  const absl::Duration all_terminal_in = absl::Now() - start;

  const long good_deliveries =
      static_cast<long>(std::count_if(
          stream.begin(), stream.end(),
          [](const Delivery& d) { return d.kind == Kind::kGood || d.kind == Kind::kLateCopy; })) +
      static_cast<long>(std::count_if(late.begin(), late.end(),
                                      [](const Delivery& d) { return d.kind == Kind::kLateCopy; }));
  const std::string confirmed =
      scalar("SELECT count(*) FROM " + pe + " WHERE status = 'confirmed'");
  const std::string failed = scalar("SELECT count(*) FROM " + pe + " WHERE status = 'failed'");
  const std::string insufficient = scalar("SELECT count(*) FROM " + schema_text +
                                          ".processed_events WHERE outcome = 'insufficient_funds'");
  const std::string dlq = scalar("SELECT count(*) FROM " + schema_text + ".dead_letter_queue");
  std::printf("\nprovider sent %ld good deliveries in %s; all events terminal after %s\n",
              good_deliveries, absl::FormatDuration(sent_in).c_str(),
              absl::FormatDuration(all_terminal_in).c_str());
  std::printf("  accepted (first delivery)     %6ld\n", tally["accepted"].load());
  std::printf("  duplicates absorbed           %6ld\n", tally["duplicate"].load());
  std::printf("  rejected 401 bad signature    %6ld\n", tally["401"].load());
  std::printf("  rejected 400 bad payload      %6ld   (numeric amount, unknown type)\n",
              tally["400"].load());
  std::printf("  rejected 409 conflicting      %6ld\n", tally["409"].load());
  std::printf("  unknown address (for review)  %6ld\n", tally["unmatched_address"].load());
  std::printf("  redelivered after 429/503     %6ld\n", tally["retried"].load());
  std::printf("  confirmed                     %6s\n", confirmed.c_str());
  std::printf("  failed: insufficient funds    %6s\n", insufficient.c_str());
  std::printf("  failed: other (each in DLQ)   %6ld\n",
              std::stol(failed) - std::stol(insufficient));
  std::printf("  dead-letter rows              %6s\n", dlq.c_str());
  std::printf(
      "  webhook -> confirmed          %lld events/s; time to confirm p50 %s ms, p99 %s ms\n\n",
      static_cast<long long>(n_events * 1000 /
                             std::max<std::int64_t>(1, absl::ToInt64Milliseconds(all_terminal_in))),
      scalar("SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM "
             "updated_at - created_at)) * 1000) FROM " +
             pe + " WHERE status = 'confirmed'")
          .c_str(),
      scalar("SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM "
             "updated_at - created_at)) * 1000) FROM " +
             pe + " WHERE status = 'confirmed'")
          .c_str());

  long accepted_twice = 0, never_accepted = 0;
  for (const auto& a : accepted_per_event) {
    accepted_twice += a > 1;
    never_accepted += a == 0;
  }
  const idemledger::Ledger ledger({.schema = schema});
  absl::StatusOr<std::vector<idemledger::BalanceMismatch>> mismatches =
      ledger.find_balance_mismatches(*db);
  bool ok = true;
  std::printf("invariants:\n");
  ok &= check(tally["unexpected"] == 0, "every delivery got the answer its kind deserves");
  ok &= chaos ? check(accepted_twice == 0, "no event accepted twice, duplicates absorbed")
              : check(accepted_twice == 0 && never_accepted == 0,
                      "every event accepted exactly once, duplicates absorbed");
  ok &= check(tally["409"] == bad_each, "every conflicting replay refused with 409");
  ok &= check(scalar("SELECT count(*) FROM " + pe) == std::to_string(n_events),
              "one payment_events row per event");
  ok &= check(
      scalar("SELECT count(*) FROM " + pe + " WHERE status NOT IN ('confirmed','failed')") == "0",
      "every event terminal (confirmed or failed)");
  ok &= check(scalar("SELECT count(*) FROM " + schema_text + ".balance_events") == confirmed,
              "one balance_events row per confirmed event");
  ok &= check(
      scalar(
          "SELECT count(*) FROM " + pe +
          " e WHERE e.status = 'failed' AND NOT EXISTS (SELECT 1 FROM " + schema_text +
          ".dead_letter_queue d WHERE d.event_id = e.event_id) AND NOT EXISTS (SELECT 1 FROM " +
          schema_text +
          ".processed_events p WHERE p.outcome = 'insufficient_funds' AND p.idempotency_key = "
          "encode(sha256(int4send(octet_length(e.event_id)) || convert_to(e.event_id, 'UTF8') || "
          "int4send(octet_length(e.event_type)) || convert_to(e.event_type, 'UTF8')), 'hex'))") ==
          "0",
      "every failed event is insufficient funds or has a dead letter");
  ok &= check(scalar("SELECT count(*) FROM " + schema_text + ".unmatched_deposits") ==
                  std::to_string(bad_each),
              "unknown addresses recorded for review, credited to nobody");
  ok &= check(mismatches.ok() && mismatches->empty(),
              "balance = initial_balance + SUM(balance_events) for every user");
  ok &= check(scalar("SELECT count(*) FROM " + schema_text + ".users WHERE balance < 0") == "0",
              "no negative balance");
  std::printf("\n%s\n", ok ? "all invariants hold" : "INVARIANT VIOLATED");
  return ok ? 0 : 1;
}
