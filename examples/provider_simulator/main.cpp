// provider_simulator — a payment provider that delivers at least once.
//
//   provider_simulator setup    migrate; assets ETH (18, the default), USDC (6) and WBTC (8) on
//                               "ethereum", OLD (2, disabled); users 1..U with 100 ETH,
//                               1000 USDC and 0.5 WBTC each; addresses addr_<u>
//   provider_simulator run      send, wait until every event is terminal, check
//   provider_simulator relay-check   wait until notification_relay settled the
//                               outbox; compare with what mock_downstream got
//
// `run` works in two rounds, as a withdrawal does. Round one: deposits and
// airdrops in all three assets (named by code, by chain + contract, or not at
// all — the default asset), single-phase withdrawals, and withdrawal requests
// (holds, with a fee; some expire after 1 s). Round two, once round one is
// terminal and the expired holds are swept: each held request is confirmed
// (captured whole, or in part with the fee waived) or failed (released), and
// one in ten expired ones is confirmed late (refused: a dead letter). Every event is
// delivered 1-3 times (copies adjacent in the stream race each other; some
// arrive late), plus bad deliveries: tampered signatures, numeric amounts,
// unknown event types, unknown addresses, unknown, disabled and too-precise
// assets, and late replays of known ids with another amount, asset, fee or
// capture. It retries 429/503/connection errors like a real provider. Then it
// prints what happened per asset and checks the invariants; exit 1 if any
// fails.
//
// Environment: IDEMLEDGER_DSN, IDEMLEDGER_SCHEMA (idemledger),
// IDEMLEDGER_WEBHOOK_SECRET, IDEMLEDGER_INTAKE_PORT, IDEMLEDGER_TIMESTAMP_TOLERANCE_S
// (0), SIM_EVENTS (20000, round one; round two adds one per held request),
// SIM_USERS (200), SIM_CONCURRENCY (16), SIM_WAIT_S (90, per round),
// SIM_DELIVERIES_PER_S (0 = as fast as intake answers; a pace spreads the
// stream over time, as the chaos soak needs), SIM_DEPOSITS_ONLY (0; 1: every
// event a deposit, the mix the bare process_deposit loop measures), SIM_ACK_LOG (none; a file each
// event id answered 200 is appended to, as the answer arrives), SIM_CHAOS (0; 1 while
// tests/chaos/run.sh breaks things: a delivery whose "accepted" answer was lost with its connection
// comes back as "duplicate", so "accepted exactly once" relaxes to "at most once" — the
// payment_events count still proves every event was recorded once — and a worker's retries may run
// out, so a failed event may be dead-lettered for another reason). relay-check also reads MOCK_PORT
// (mock_downstream's port) and RELAY_BOUND (replicas × RELAY_MAX_IN_FLIGHT: the most requests the
// API may see at once).
#include <fcntl.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "../common/http_client.hpp"
#include "../common/service.hpp"
#include "idemledger.hpp"
#include "idemledger/pg/connection.hpp"

namespace {

// What pg_stat_activity calls the provider's own sessions (its checks).
constexpr char kSessionName[] = "provider_simulator";
// The longest one delivery may take, from connecting to the answer's last
// byte (httplib's read timeout, which the provider used before, was 5 s).
constexpr std::chrono::milliseconds kDeliveryTimeout{5000};

struct SimAsset {
  idemledger::AssetCode code;
  int decimals;
  const char* contract;  // "" for the chain's native coin
  const char* initial;   // each user's opening balance
  const char* fee;       // a withdrawal's fee
  const char* unit;      // what a partial capture leaves behind
};
constexpr const char* kChain = "ethereum";
const SimAsset kAssets[] = {
    {"ETH", 18, "", "100", "0.001", "0.001"},
    {"USDC", 6, "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", "1000", "1", "0.01"},
    {"WBTC", 8, "0x2260fac5e5542a773aa44fbcfedf7c193bc2c599", "0.5", "0.0001", "0.0001"},
};
constexpr int kAssetCount = 3;

enum class Kind {
  kGood,
  kLateCopy,
  kTampered,
  kNumericAmount,
  kUnknownType,
  kUnknownAddress,
  kUnknownAsset,
  kTooPrecise,
  kDisabledAsset,
  kConflictAmount,
  kConflictAsset,
  kConflictFee,
  kConflictCapture,
};

struct Delivery {
  int event;  // index into events: the event delivered, or the one a bad delivery imitates
  Kind kind;
  int serial = 0;  // distinguishes bad deliveries of one kind
};

struct SimEvent {
  std::string id;
  std::string type;
  std::string amount;  // "" = none (a failure, or a confirmation capturing all)
  std::string fee;     // "" = none
  int user = 0;
  int asset = 0;
  enum class Naming { kCode, kChain, kDefault } naming = Naming::kCode;
  int expires_s = 0;    // withdrawal_requested
  std::string hold_id;  // withdrawal_confirmed / _failed
};

bool is_credit(const std::string& type) { return type == "deposit" || type == "airdrop"; }

std::string body_of(const SimEvent& e, const Delivery& d) {
  nlohmann::json j = {{"event_id", e.id}, {"event_type", e.type}};
  if (!e.amount.empty()) j["amount"] = e.amount;
  if (!e.fee.empty()) j["fee"] = e.fee;
  if (is_credit(e.type)) {
    j["to_address"] = "addr_" + std::to_string(e.user);
  } else {
    j["user_id"] = e.user;
  }
  if (e.hold_id.empty()) {  // a confirmation or failure takes its hold's asset
    const SimAsset& a = kAssets[e.asset];
    if (e.naming == SimEvent::Naming::kCode) {
      j["asset"] = a.code.code();
    } else if (e.naming == SimEvent::Naming::kChain) {
      j["chain"] = kChain;
      std::string contract = a.contract;
      // Checksummed (mixed case) or not, it is the same token.
      if (d.serial % 2 == 1)
        std::transform(contract.begin() + 2, contract.end(), contract.begin() + 2, ::toupper);
      j["contract"] = contract;
    }
  } else {
    j["withdrawal_id"] = e.hold_id;
  }
  if (e.expires_s > 0) j["expires_in_s"] = e.expires_s;
  const auto own_deposit = [&](const std::string& id, const std::string& asset,
                               const std::string& amount, const std::string& address) {
    j = {{"event_id", id},
         {"event_type", "deposit"},
         {"amount", amount},
         {"to_address", address},
         {"asset", asset}};
  };
  const std::string serial = std::to_string(d.serial);
  switch (d.kind) {
    case Kind::kNumericAmount:
      j["amount"] = 12.5;
      break;
    case Kind::kUnknownType:
      j["event_type"] = "chargeback";
      break;
    case Kind::kUnknownAddress:  // a deposit of its own, to an address no user owns
      own_deposit("unmatched_" + serial, "USDC", "5", "addr_nobody_" + serial);
      break;
    case Kind::kUnknownAsset:
      own_deposit("unknown_asset_" + serial, "DOGE", "5", "addr_1");
      break;
    case Kind::kTooPrecise:  // 7 decimal places of a 6-decimal token
      own_deposit("too_precise_" + serial, "USDC", "1.0000001", "addr_1");
      break;
    case Kind::kDisabledAsset:
      own_deposit("delisted_" + serial, "OLD", "5", "addr_1");
      break;
    case Kind::kConflictAmount:
      j["amount"] = e.amount + "1";
      break;
    case Kind::kConflictAsset:  // the same deposit, said to be of another asset
      j.erase("chain");
      j.erase("contract");
      j["asset"] = kAssets[(e.asset + 1) % kAssetCount].code.code();
      break;
    case Kind::kConflictFee:
      j["fee"] = "7";
      break;
    case Kind::kConflictCapture: {  // the same confirmation, capturing another amount
      // One unit, or, when the confirmation itself captured in part (the hold
      // less one unit), one unit more than it did: never what it captured,
      // even for a hold of exactly two units.
      const idemledger::Amount unit = *idemledger::Amount::parse(kAssets[e.asset].unit);
      j["amount"] = e.amount.empty()
                        ? unit.to_string()
                        : idemledger::Amount::parse(e.amount)->checked_add(unit)->to_string();
      j["fee"] = "0";
      break;
    }
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
    case Kind::kUnknownAsset:
    case Kind::kTooPrecise:
    case Kind::kDisabledAsset:
      return 400;
    case Kind::kConflictAmount:
    case Kind::kConflictAsset:
    case Kind::kConflictFee:
    case Kind::kConflictCapture:
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
      idemledger::pg::Connection::open(dsn, {.application_name = kSessionName});
  if (!c.ok()) example::config_error("cannot connect: " + c.status().ToString());
  return std::move(*c);
}

template <typename T>
T must(absl::StatusOr<T> r, const char* what) {
  if (!r.ok()) example::config_error(std::string(what) + ": " + r.status().ToString());
  return *std::move(r);
}
void must(const absl::Status& s, const char* what) {
  if (!s.ok()) example::config_error(std::string(what) + ": " + s.ToString());
}

int setup(const std::string& dsn, const idemledger::Schema& schema, long users) {
  const std::string schema_text(schema.name());
  std::unique_ptr<idemledger::pg::Connection> c = connect(dsn);
  // ETH is the default asset: events that name none are ETH, as a
  // single-balance host's always were.
  must(idemledger::migrate(*c, {.schema = schema, .default_asset = "ETH"}), "migrate");
  for (const SimAsset& a : kAssets) {
    if (*a.contract == '\0') continue;  // ETH: the default, created by migrate()
    must(idemledger::add_asset(
             *c, schema,
             {.code = a.code, .decimals = a.decimals, .chain = kChain, .contract = a.contract}),
         "add asset");
  }
  must(idemledger::add_asset(*c, schema, {.code = "OLD", .decimals = 2, .enabled = false}),
       "add asset");
  const idemledger::Ledger ledger({.schema = schema});
  for (long u = 1; u <= users; ++u) {
    for (const SimAsset& a : kAssets) {
      must(ledger.open_account(*c, u, *idemledger::Amount::parse(a.initial), a.code),
           "open account");
    }
    const std::string address = "addr_" + std::to_string(u), user = std::to_string(u);
    must(c->execute("INSERT INTO " + schema_text +
                        ".deposit_addresses (address, user_id) VALUES ($1, $2::bigint) "
                        "ON CONFLICT DO NOTHING",
                    {idemledger::Param(address), idemledger::Param(user)}),
         "deposit addresses");
  }
  std::printf(
      "setup: schema %s, assets ETH (18 decimals, the default), USDC (6) and WBTC (8) on %s, "
      "OLD (disabled);\n       %ld users with 100 ETH, 1000 USDC and 0.5 WBTC each, addresses "
      "addr_1..addr_%ld\n",
      schema_text.c_str(), kChain, users, users);
  return 0;
}

// Every notification ends delivered, or dropped or quarantined with its
// reason; the downstream's own counts must say the same, and it received none
// twice but where it had acted on a request the relay had given up on.
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
  // One per applied or refused event; a hold has one when it is taken (or
  // refused) and one when it ends (posted, voided or expired).
  const long outcomes =
      number("SELECT (SELECT count(*) FROM " + schema_text +
             ".processed_events WHERE outcome IN ('success', 'insufficient_funds')) + (SELECT "
             "count(*) FROM " +
             schema_text + ".holds) + (SELECT count(*) FROM " + schema_text +
             ".holds WHERE state IN ('posted', 'voided', 'expired'))");
  std::printf("\nnotification relay (outbox -> mock_downstream, outage in the middle)\n");
  std::printf("  notifications written         %6ld   (one per outcome, two per settled hold)\n",
              total);
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
  std::printf(
      "  acted on after the relay gave up (a queued request past its deadline): %ld; "
      "repeats those do not explain: %ld\n",
      stats["late"].get<long>(), stats["duplicates_unexplained"].get<long>());

  std::printf("relay invariants:\n");
  bool ok =
      check(total == outcomes, "one notification per outcome, none for a replayed event or step");
  ok &= check(number(unsettled) == 0, "nothing left undelivered or waiting in the DLQ");
  ok &= check(published + dropped + quarantined == total,
              "every notification delivered, or dropped / quarantined with its reason");
  ok &= check(stats["unique"].get<long>() == published,
              "the downstream received exactly the delivered ones");
  // A 2xx the relay never saw (the API acted on the request after the
  // relay's deadline) is sent again: at least once, and the Idempotency-Key
  // tells. Any other repeat would be the relay's own.
  ok &= check(stats["duplicates_unexplained"].get<long>() == 0,
              "none delivered twice, but those the API acted on after the relay gave up");
  ok &= check(stats["max_concurrency"].get<long>() <= bound,
              "the downstream never saw more than the concurrency bound");
  ok &= check(stats["outage_marks"].size() >= 1 && via_dlq > 0,
              "the outage happened and its dead letters were resent");
  std::printf("\n%s\n", ok ? "relay invariants hold" : "RELAY INVARIANT VIOLATED");
  return ok ? 0 : 1;
}

// Sends deliveries, tallies the answers, and asks the database what became of them.
class Provider {
 public:
  Provider(std::string dsn, const idemledger::Schema& schema)
      : dsn_(std::move(dsn)), schema_(schema.name()) {
    const long tolerance = example::env_long("IDEMLEDGER_TIMESTAMP_TOLERANCE_S", 0, 0, 86400);
    tolerance_s_ = tolerance;
    signer_.emplace(
        must(idemledger::WebhookVerifier::create(example::env_string("IDEMLEDGER_WEBHOOK_SECRET"),
                                                 absl::Seconds(tolerance)),
             "IDEMLEDGER_WEBHOOK_SECRET"));
    for (const char* k : {"accepted", "duplicate", "unmatched_address", "401", "400", "409",
                          "unexpected", "retried"}) {
      tally_[k] = 0;
    }
  }
  ~Provider() {
    if (ack_log_ >= 0) ::close(ack_log_);
  }
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  std::vector<SimEvent> events;
  std::vector<std::atomic<int>> accepted_per_event = std::vector<std::atomic<int>>(0);
  long tally(const std::string& k) const { return tally_.at(k).load(); }

  // Sends every delivery, concurrency_ at a time, each sender closed-loop
  // (its next delivery once its last was answered), all on this thread.
  void send_all(const std::vector<Delivery>& deliveries) {
    const absl::Time paced_from = absl::Now();
    std::size_t next = 0;
    struct Sender {
      std::size_t delivery = 0;
      int attempt = 0;  // of this delivery, from 0
    };
    std::vector<Sender> senders(static_cast<std::size_t>(concurrency_));
    example::run_senders(
        example::Url("http://127.0.0.1:" + std::to_string(port_) + "/webhooks/payments"),
        static_cast<int>(concurrency_), kDeliveryTimeout,
        [&](int id, const absl::StatusOr<example::HttpAnswer>* last, example::Request& request) {
          Sender& s = senders[static_cast<std::size_t>(id)];
          if (last != nullptr && !settle(deliveries[s.delivery], request.body, *last, s.attempt)) {
            // A provider redelivers on 429/503/network errors, a little later each time.
            request.delay = absl::Milliseconds(10 * (s.attempt + 1));
            ++s.attempt;
            return true;
          }
          if (next >= deliveries.size()) return false;
          s = Sender{.delivery = next++};
          request = request_for(deliveries[s.delivery]);
          if (pace_ > 0) {
            request.delay =
                paced_from +
                absl::Milliseconds(static_cast<std::int64_t>(s.delivery) * 1000 / pace_) -
                absl::Now();
          }
          return true;
        });
  }

  // The database may restart under us (the chaos soak): reconnect and ask again.
  std::string scalar(const std::string& sql) {
    for (int attempt = 0; attempt < 300; ++attempt) {
      if (db_ == nullptr || db_->is_broken()) {
        absl::StatusOr<std::unique_ptr<idemledger::pg::Connection>> c =
            idemledger::pg::Connection::open(dsn_, {.application_name = kSessionName});
        db_ = c.ok() ? std::move(*c) : nullptr;
      }
      if (db_ != nullptr) {
        absl::StatusOr<idemledger::Result> r = db_->execute(sql);
        if (r.ok()) return r->rows.empty() ? std::string("NULL") : r->at(0, 0).value_or("NULL");
        if (!idemledger::is_retryable(r.status())) return std::string("ERROR");
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return std::string("ERROR");
  }
  long number(const std::string& sql) {
    const std::string v = scalar(sql);
    return v == "ERROR" || v == "NULL" ? -1 : std::stol(v);
  }
  // Every row of a two-column query, as a map.
  // Like scalar(), it outlasts a restart or a failover: reconnect, ask again.
  std::map<std::string, std::string> pairs(const std::string& sql) {
    absl::Status last = absl::UnavailableError("no database");
    for (int attempt = 0; attempt < 300; ++attempt) {
      (void)scalar("SELECT 1");  // (re)connected
      absl::StatusOr<idemledger::Result> r =
          db_ != nullptr ? db_->execute(sql) : absl::UnavailableError("no database");
      if (r.ok()) {
        std::map<std::string, std::string> out;
        for (const auto& row : r->rows) out[row[0].value_or("")] = row[1].value_or("");
        return out;
      }
      last = r.status();
      if (!idemledger::is_retryable(last)) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    example::config_error(last.ToString());
  }
  // Waits until `sql` answers "0" or the deadline passes; false if it never did.
  bool wait_for_zero(const std::string& sql, absl::Duration at_most) {
    const absl::Time deadline = absl::Now() + at_most;
    while (scalar(sql) != "0") {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return true;
  }
  std::string table(const char* name) const { return schema_ + "." + name; }

  long concurrency_ = example::env_long("SIM_CONCURRENCY", 16, 1, 512);
  long pace_ = example::env_long("SIM_DELIVERIES_PER_S", 0, 0, 1'000'000);
  long port_ = example::env_long("IDEMLEDGER_INTAKE_PORT", 8080, 1, 65535);

 private:
  example::Request request_for(const Delivery& d) const {
    example::Request request{.body = body_of(events[static_cast<std::size_t>(d.event)], d)};
    const std::string ts = tolerance_s_ > 0 ? std::to_string(absl::ToUnixSeconds(absl::Now())) : "";
    std::string signature = signer_->sign(request.body, ts);
    if (d.kind == Kind::kTampered) signature[0] = signature[0] == 'a' ? 'b' : 'a';
    request.headers = {{"X-Signature", std::move(signature)}};
    if (!ts.empty()) request.headers.emplace_back("X-Timestamp", ts);
    return request;
  }

  // Tallies the answer to attempt `attempt` of `d`; false if the delivery is
  // to be sent again (429, 503, no answer), and true once it is settled.
  bool settle(const Delivery& d, const std::string& body,
              const absl::StatusOr<example::HttpAnswer>& r, int attempt) {
    if (r.ok() && r->status != 429 && r->status != 503) {
      if (r->status != expected_status(d.kind)) {
        ++tally_["unexpected"];
        std::fprintf(stderr, "unexpected %d for %s: %s\n", r->status, body.c_str(),
                     r->body.c_str());
      } else if (r->status == 200) {
        const std::string result = nlohmann::json::parse(r->body).value("result", "");
        ++tally_[result];
        if (result == "accepted") ++accepted_per_event[static_cast<std::size_t>(d.event)];
        if (result == "accepted" || result == "duplicate") log_ack(d);
      } else {
        ++tally_[std::to_string(r->status)];
      }
      return true;
    }
    ++tally_["retried"];
    if (attempt > 50) {
      ++tally_["unexpected"];
      return true;
    }
    return false;
  }

  // SIM_ACK_LOG: each event id intake answered 200 for, a line each, appended
  // as the answer arrives — so whoever kills intake can check that every id
  // acknowledged until then is in the table. One write(2) per line on an
  // O_APPEND descriptor: lines from concurrent senders never interleave.
  void log_ack(const Delivery& d) const {
    if (ack_log_ < 0) return;
    const std::string line = events[static_cast<std::size_t>(d.event)].id + "\n";
    if (::write(ack_log_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      example::config_error("SIM_ACK_LOG: write failed");
    }
  }
  static int open_ack_log() {
    const std::string path = example::env_string("SIM_ACK_LOG", "");
    if (path.empty()) return -1;
    if (path.size() > 4096) example::config_error("SIM_ACK_LOG: longer than 4096 bytes");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) example::config_error("SIM_ACK_LOG: cannot open " + path);
    return fd;
  }

  std::string dsn_;
  std::string schema_;
  int ack_log_ = open_ack_log();
  long tolerance_s_ = 0;
  std::optional<idemledger::WebhookVerifier> signer_;
  std::map<std::string, std::atomic<long>> tally_;
  std::unique_ptr<idemledger::pg::Connection> db_;
};

// An amount of asset `a` a user plausibly moves: ETH 0.001..3 (3 decimals),
// USDC 0.01..500 (2), WBTC 0.0001..0.05 (4) — within every asset's decimals.
std::string amount_of(int a, std::mt19937_64& rng) {
  char text[32];
  switch (a) {
    case 0:
      std::snprintf(text, sizeof text, "%d.%03d", static_cast<int>(rng() % 3),
                    1 + static_cast<int>(rng() % 999));
      break;
    case 1:
      std::snprintf(text, sizeof text, "%d.%02d", static_cast<int>(rng() % 500),
                    1 + static_cast<int>(rng() % 99));
      break;
    default:
      std::snprintf(text, sizeof text, "0.0%03d", 1 + static_cast<int>(rng() % 500));
      break;
  }
  return text;
}

// Copies of event `i`: 1-3, the first in the stream, a quarter of the rest late.
void deliver_copies(int i, std::mt19937_64& rng, std::vector<Delivery>& stream,
                    std::vector<Delivery>& late) {
  const int copies = 1 + static_cast<int>(rng() % 3);
  for (int c = 0; c < copies; ++c) {
    (c > 0 && rng() % 4 == 0 ? late : stream)
        .push_back({i, c == 0 ? Kind::kGood : Kind::kLateCopy, static_cast<int>(rng() % 2)});
  }
}

int run(const std::string& dsn, const idemledger::Schema& schema, long users) {
  const long n_events = example::env_long("SIM_EVENTS", 20'000, 1, 10'000'000);
  const absl::Duration wait = absl::Seconds(example::env_long("SIM_WAIT_S", 90, 1, 3600));
  const bool chaos = example::env_long("SIM_CHAOS", 0, 0, 1) == 1;
  // SIM_DEPOSITS_ONLY=1: every event a deposit, for measuring the service
  // against the bare process_deposit loop (bench/run_load.sh).
  const bool deposits_only = example::env_long("SIM_DEPOSITS_ONLY", 0, 0, 1) == 1;
  Provider p(dsn, schema);
  const std::string pe = p.table("payment_events");
  const std::string not_final =
      "SELECT count(*) FROM " + pe + " WHERE status NOT IN ('confirmed','failed')";

  // Round one: money in, single-phase withdrawals, withdrawal requests.
  std::mt19937_64 rng(2026);
  std::vector<Delivery> stream, late;
  std::vector<int> requests, deposits;
  for (int i = 0; i < n_events; ++i) {
    const int roll = static_cast<int>(rng() % 100);
    SimEvent e;
    e.id = "sim_" + std::to_string(i);
    e.type = roll < 50 || deposits_only ? "deposit"
             : roll < 55                ? "airdrop"
             : roll < 65                ? "withdrawal"
                                        : "withdrawal_requested";
    e.user = 1 + static_cast<int>(rng() % static_cast<std::uint64_t>(users));
    const int asset_roll = static_cast<int>(rng() % 100);
    e.asset = asset_roll < 40 ? 0 : asset_roll < 85 ? 1 : 2;
    e.amount = amount_of(e.asset, rng);
    e.naming = e.asset == 0 ? (rng() % 2 ? SimEvent::Naming::kCode : SimEvent::Naming::kDefault)
                            : (rng() % 2 ? SimEvent::Naming::kCode : SimEvent::Naming::kChain);
    if (e.type == "withdrawal_requested") {
      e.fee = kAssets[e.asset].fee;
      e.expires_s = rng() % 10 == 0 ? 1 : 3600;  // one in ten is never settled in time
      requests.push_back(i);
    } else if (e.type == "deposit") {
      deposits.push_back(i);
    }
    p.events.push_back(std::move(e));
    deliver_copies(i, rng, stream, late);
  }
  const int bad_each = std::max(1, static_cast<int>(n_events / 100));
  const auto any_of = [&](const std::vector<int>& from) {
    return from[static_cast<std::size_t>(rng() % from.size())];
  };
  int conflicts = 0;
  for (int b = 0; b < bad_each; ++b) {
    const int target = static_cast<int>(rng() % static_cast<std::uint64_t>(n_events));
    for (Kind k : {Kind::kTampered, Kind::kNumericAmount, Kind::kUnknownType, Kind::kUnknownAddress,
                   Kind::kUnknownAsset, Kind::kTooPrecise, Kind::kDisabledAsset}) {
      stream.push_back({target, k, b});
    }
    if (!deposits.empty()) {
      late.push_back({any_of(deposits), Kind::kConflictAmount});
      late.push_back({any_of(deposits), Kind::kConflictAsset});
      conflicts += 2;
    }
    if (!requests.empty()) {
      late.push_back({any_of(requests), Kind::kConflictFee});
      ++conflicts;
    }
  }
  std::shuffle(stream.begin(), stream.end(), rng);
  std::shuffle(late.begin(), late.end(), rng);
  p.accepted_per_event = std::vector<std::atomic<int>>(p.events.size() * 2 + 16);
  std::printf(
      "provider: round one: %ld events (%zu withdrawal requests), %zu deliveries (%d of each bad "
      "kind), %ld concurrent senders\n",
      n_events, requests.size(), stream.size() + late.size(), bad_each, p.concurrency_);
  const absl::Time start = absl::Now();
  p.send_all(stream);
  p.send_all(late);
  const bool round_one_final = p.wait_for_zero(not_final, wait);
  const absl::Duration round_one_in = absl::Now() - start;
  // The sweeper's turn: every hold past its expiry is released, by the workers.
  absl::SleepFor(absl::Seconds(1));
  const bool swept = p.wait_for_zero(
      "SELECT count(*) FROM " + p.table("holds") + " WHERE state = 'held' AND expires_at < now()",
      absl::Seconds(30));
  std::map<std::string, std::string> hold_state =
      p.pairs("SELECT event_id, state FROM " + p.table("holds"));
  const auto expired_after_round_one = std::count_if(
      hold_state.begin(), hold_state.end(), [](const auto& h) { return h.second == "expired"; });

  // Round two: the chain has spoken on every withdrawal still held.
  stream.clear();
  late.clear();
  long confirms = 0, partial = 0, fails = 0, late_confirms = 0;
  std::vector<int> confirmations;
  for (int r : requests) {
    const SimEvent& request = p.events[static_cast<std::size_t>(r)];
    const std::string& state = hold_state[request.id];
    SimEvent step{.id = "settle_" + request.id,
                  .user = request.user,
                  .asset = request.asset,
                  .hold_id = request.id};
    const int roll = static_cast<int>(rng() % 100);
    if (state == "held") {
      if (roll < 70) {
        step.type = "withdrawal_confirmed";
        ++confirms;
      } else if (roll < 85) {  // captured in part, the fee waived: the rest is released
        step.type = "withdrawal_confirmed";
        const idemledger::Amount unit = *idemledger::Amount::parse(kAssets[request.asset].unit);
        const idemledger::Amount held = *idemledger::Amount::parse(request.amount);
        if (held > unit) {
          step.amount = held.checked_sub(unit)->to_string();
          step.fee = "0";
          ++partial;
        }
        ++confirms;
      } else {
        step.type = "withdrawal_failed";
        ++fails;
      }
    } else if (state == "expired" && roll < 10) {  // final on chain, but after we gave up
      step.type = "withdrawal_confirmed";
      ++late_confirms;
    } else {
      continue;
    }
    const int i = static_cast<int>(p.events.size());
    if (step.type == "withdrawal_confirmed") confirmations.push_back(i);
    p.events.push_back(std::move(step));
    deliver_copies(i, rng, stream, late);
  }
  for (int b = 0; b < bad_each && !confirmations.empty(); ++b) {
    late.push_back({any_of(confirmations), Kind::kConflictCapture});
    ++conflicts;
  }
  std::shuffle(stream.begin(), stream.end(), rng);
  std::shuffle(late.begin(), late.end(), rng);
  std::printf(
      "provider: round two: %ld confirmations (%ld in part), %ld failures, %ld confirmations of "
      "expired holds; %zu deliveries\n",
      confirms, partial, fails, late_confirms, stream.size() + late.size());
  const absl::Time round_two_start = absl::Now();
  p.send_all(stream);
  p.send_all(late);
  const bool round_two_final = p.wait_for_zero(not_final, wait);
  const absl::Duration all_terminal_in = absl::Now() - start;
  // Throughput counts the rounds, not the pause for the sweeper between them.
  const absl::Duration busy = round_one_in + (absl::Now() - round_two_start);

  // What happened.
  const long n_total = static_cast<long>(p.events.size());
  const long confirmed = p.number("SELECT count(*) FROM " + pe + " WHERE status = 'confirmed'");
  const long failed = p.number("SELECT count(*) FROM " + pe + " WHERE status = 'failed'");
  const long insufficient = p.number("SELECT count(*) FROM " + p.table("processed_events") +
                                     " WHERE outcome = 'insufficient_funds'");
  const long rejected =
      p.number("SELECT count(*) FROM " + p.table("holds") + " WHERE state = 'rejected'");
  hold_state = p.pairs("SELECT event_id, state FROM " + p.table("holds"));
  std::map<std::string, long> holds;
  for (const auto& [id, state] : hold_state) ++holds[state];
  std::printf(
      "\nprovider: all events terminal after %s (%s in the rounds, the rest waiting "
      "for the sweeper)\n",
      absl::FormatDuration(all_terminal_in).c_str(),
      absl::FormatDuration(absl::Trunc(busy, absl::Milliseconds(1))).c_str());
  std::printf("  accepted (first delivery)     %6ld\n", p.tally("accepted"));
  std::printf("  duplicates absorbed           %6ld\n", p.tally("duplicate"));
  std::printf("  rejected 401 bad signature    %6ld\n", p.tally("401"));
  std::printf(
      "  rejected 400 bad payload      %6ld   (numeric amount, unknown type, unknown / disabled / "
      "too precise asset)\n",
      p.tally("400"));
  std::printf("  rejected 409 conflicting      %6ld   (amount, asset, fee, capture)\n",
              p.tally("409"));
  std::printf("  unknown address (for review)  %6ld\n", p.tally("unmatched_address"));
  std::printf("  redelivered after 429/503     %6ld\n", p.tally("retried"));
  std::printf("  confirmed                     %6ld\n", confirmed);
  std::printf("  failed: insufficient funds    %6ld   (%ld withdrawals, %ld holds refused)\n",
              insufficient + rejected, insufficient, rejected);
  std::printf("  failed: other (each in DLQ)   %6ld\n", failed - insufficient - rejected);
  std::printf(
      "  holds                         %6zu   (%ld posted, %ld voided, %ld expired, %ld "
      "rejected, %ld still held)\n",
      hold_state.size(), holds["posted"], holds["voided"], holds["expired"], holds["rejected"],
      holds["held"]);
  std::printf(
      "  webhook -> confirmed          %lld events/s; time to confirm p50 %s ms, p99 %s ms\n\n",
      static_cast<long long>(n_total * 1000 /
                             std::max<std::int64_t>(1, absl::ToInt64Milliseconds(busy))),
      p.scalar("SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM "
               "updated_at - created_at)) * 1000) FROM " +
               pe + " WHERE status = 'confirmed'")
          .c_str(),
      p.scalar("SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM "
               "updated_at - created_at)) * 1000) FROM " +
               pe + " WHERE status = 'confirmed'")
          .c_str());

  // Per asset: what users own, what the system side says, and that they agree.
  std::unique_ptr<idemledger::pg::Connection> db = connect(dsn);
  const std::vector<idemledger::AssetLiabilities> owed =
      must(idemledger::liabilities(*db, schema), "liabilities");
  std::printf("per asset       %8s %22s %18s %22s %18s  %s\n", "accounts", "owed to users", "held",
              "external (chain)", "fees", "postings sum");
  bool zero_sum = true;
  for (const idemledger::AssetLiabilities& l : owed) {
    const std::string sum = p.scalar(
        "SELECT trim_scale(coalesce((SELECT sum(amount) FROM " + p.table("balance_events") +
        " WHERE asset = '" + l.asset + "'), 0) + coalesce((SELECT sum(amount) FROM " +
        p.table("system_entries") + " WHERE asset = '" + l.asset + "'), 0))::text");
    zero_sum &= sum == "0";
    std::printf("  %-13s %8lld %22s %18s %22s %18s  %s\n", l.asset.c_str(),
                static_cast<long long>(l.accounts), l.owed.to_string().c_str(),
                l.held.to_string().c_str(), l.external.to_string().c_str(),
                l.fees.to_string().c_str(), sum.c_str());
  }
  absl::StatusOr<idemledger::ReconcileReport> reconciled =
      idemledger::Reconciler({.schema = schema}).full(*db);

  long accepted_twice = 0, never_accepted = 0;
  for (std::size_t i = 0; i < p.events.size(); ++i) {
    accepted_twice += p.accepted_per_event[i] > 1;
    never_accepted += p.accepted_per_event[i] == 0;
  }
  const std::string key =
      "encode(sha256(int4send(octet_length(e.event_id)) || convert_to(e.event_id, 'UTF8') || "
      "int4send(octet_length(e.event_type)) || convert_to(e.event_type, 'UTF8')), 'hex')";
  const std::string business_failure =
      "EXISTS (SELECT 1 FROM " + p.table("processed_events") +
      " p WHERE p.outcome = 'insufficient_funds' AND p.idempotency_key = " + key +
      ") OR EXISTS (SELECT 1 FROM " + p.table("holds") +
      " h WHERE h.event_id = e.event_id AND h.state = 'rejected')";
  const std::string dead_lettered_failures =
      "SELECT count(*) FROM " + pe + " e WHERE e.status = 'failed' AND EXISTS (SELECT 1 FROM " +
      p.table("dead_letter_queue") + " d WHERE d.event_id = e.event_id)";
  bool ok = true;
  std::printf("\ninvariants:\n");
  ok &= check(round_one_final && round_two_final, "both rounds ended with every event terminal");
  ok &= check(swept, "every hold past its expiry was swept by the workers");
  ok &= check(p.tally("unexpected") == 0, "every delivery got the answer its kind deserves");
  ok &= chaos ? check(accepted_twice == 0, "no event accepted twice, duplicates absorbed")
              : check(accepted_twice == 0 && never_accepted == 0,
                      "every event accepted exactly once, duplicates absorbed");
  ok &= check(p.tally("409") == conflicts,
              "every conflicting replay (amount, asset, fee, capture) refused with 409");
  ok &= check(p.number("SELECT count(*) FROM " + pe) == n_total,
              "one payment_events row per event (" + std::to_string(n_total) + ")");
  ok &= check(p.number(not_final) == 0, "every event terminal (confirmed or failed)");
  ok &= check(p.number("SELECT count(*) FROM " + pe + " e WHERE e.status = 'failed' AND NOT (" +
                       business_failure + ") AND NOT EXISTS (SELECT 1 FROM " +
                       p.table("dead_letter_queue") + " d WHERE d.event_id = e.event_id)") == 0,
              "every failed event is insufficient funds or has a dead letter");
  ok &= check(p.number("SELECT count(*) FROM " + pe +
                       " e WHERE e.event_id LIKE 'settle_%' AND e.status = 'failed' AND EXISTS "
                       "(SELECT 1 FROM " +
                       p.table("holds") +
                       " h WHERE h.event_id = substr(e.event_id, 8) AND h.state = 'expired')") ==
                  late_confirms,
              "every confirmation of an expired hold refused: the hold is never posted");
  if (!chaos) {
    ok &= check(p.number(dead_lettered_failures) == late_confirms,
                "and those are the only dead letters");
  }
  ok &= check(holds["held"] == 0 && holds["expired"] == expired_after_round_one &&
                  holds["posted"] == confirms && holds["voided"] == fails,
              "every hold ended as its withdrawal did: posted, voided or expired, none twice");
  ok &= check(p.number("SELECT count(*) FROM " + p.table("balance_events")) ==
                  p.number("SELECT count(*) FROM " + pe +
                           " WHERE status = 'confirmed' AND event_type IN ('deposit', 'airdrop', "
                           "'withdrawal')") +
                      holds["posted"] +
                      p.number("SELECT count(*) FROM " + p.table("holds") +
                               " WHERE state = 'posted' AND posted_fee > 0"),
              "one ledger entry per credit, debit, captured withdrawal and fee; none twice");
  ok &= check(p.number("SELECT count(*) FROM " + p.table("unmatched_deposits")) == bad_each,
              "unknown addresses recorded for review, credited to nobody");
  ok &= check(zero_sum, "every asset's postings sum to zero (double entry)");
  ok &= check(reconciled.ok() && reconciled->clean(),
              "every account: balance = initial + its entries, held = its open holds");
  ok &= check(p.number("SELECT count(*) FROM " + p.table("accounts") +
                       " WHERE balance < 0 OR held < 0 OR held > balance") == 0,
              "no negative balance, no negative available");
  const nlohmann::json usage = example::resource_usage();
  std::printf("provider: own usage: cpu_ms %lld, max_rss_kb %lld\n",
              usage["cpu_ms"].get<long long>(), usage["max_rss_kb"].get<long long>());
  std::printf("\n%s\n", ok ? "all invariants hold" : "INVARIANT VIOLATED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string dsn = example::env_string("IDEMLEDGER_DSN");
  const idemledger::Schema schema = example::env_schema();
  const long users = example::env_long("SIM_USERS", 200, 1, 1'000'000);
  if (mode == "setup") return setup(dsn, schema, users);
  if (mode == "relay-check") return relay_check(dsn, schema);
  if (mode == "run") return run(dsn, schema, users);
  example::config_error("usage: provider_simulator setup|run|relay-check");
}
