// Three notification_relay processes against mock_downstream over HTTP, with
// the downstream timing out and then failing for a while in the middle:
// nothing lost, nothing delivered twice (but a 2xx the mock gave after the
// relay had given up on the call), the concurrency bound held across
// replicas, every replica paused while the marker lives, the DLQ drained
// before new work, and a poisoned message quarantined without a call.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "idemledger/ledger/ledger.hpp"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

constexpr int kReplicas = 3;
constexpr int kInFlightPerReplica = 4;

class RelayOutage : public LedgerTest {
 protected:
  void deposit(int user, int n) {
    for (int i = 0; i < n; ++i) {
      const PaymentEvent e = event("dep-" + std::to_string(user) + "-" + std::to_string(i),
                                   EventType::kDeposit, user, "1.5");
      ASSERT_TRUE(notifying_ledger_->process_deposit(*conn_, e).ok());
    }
  }
  nlohmann::json mock_get(httplib::Client& mock, const char* path) {
    const httplib::Result r = mock.Get(path);
    EXPECT_TRUE(r && r->status == 200);
    return r ? nlohmann::json::parse(r->body) : nlohmann::json{};
  }
  void mock_mode(httplib::Client& mock, const char* mode) {
    const httplib::Result r = mock.Post(std::string("/control?mode=") + mode);
    ASSERT_TRUE(r && r->status == 200);
  }
  long published() {
    return count("SELECT count(*) FROM {schema}.outbox WHERE published_at IS NOT NULL");
  }
  // Waits until `done()` or `limit` passes; true if done.
  static bool wait_until(const std::function<bool()>& done, absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    while (!done()) {
      if (absl::Now() > end) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  }

  std::unique_ptr<Ledger> notifying_ledger_;
};

TEST_F(RelayOutage, ThreeReplicasRideOutADownstreamOutage) {
  notifying_ledger_ = std::make_unique<Ledger>(options({.write_notifications = true}));
  for (int user = 1; user <= 3; ++user) open_account(user, "0");
  deposit(1, 100);
  exec("INSERT INTO {schema}.outbox (topic, payload) VALUES ('credited', '{\"amount\": \"1\"}')");
  const std::string poison_key =
      "outbox-" + scalar(
                      "SELECT max(id) FROM {schema}.outbox WHERE payload ? 'amount' "
                      "AND NOT payload ? 'event_id'");

  ServiceProcess mock_process(IDEMLEDGER_MOCK_DOWNSTREAM_BINARY, schema_,
                              {{"MOCK_DELAY_MS", "10"}, {"MOCK_TIMEOUT_HOLD_MS", "1500"}},
                              "listening");
  httplib::Client mock("127.0.0.1", mock_process.port());
  const std::string url = "http://127.0.0.1:" + std::to_string(mock_process.port()) + "/notify";
  std::vector<std::unique_ptr<ServiceProcess>> relays;
  relays.reserve(kReplicas);
  for (int i = 0; i < kReplicas; ++i) {
    relays.push_back(std::make_unique<ServiceProcess>(
        IDEMLEDGER_NOTIFICATION_RELAY_BINARY, schema_,
        std::vector<std::pair<std::string, std::string>>{
            {"RELAY_URL", url},
            {"RELAY_MAX_IN_FLIGHT", std::to_string(kInFlightPerReplica)},
            {"RELAY_DRAIN_CONCURRENCY", "2"},
            {"RELAY_TIMEOUT_MS", "300"},
            {"RELAY_ATTEMPTS", "2"},
            {"RELAY_MARKER_TTL_MS", "1000"},
            {"RELAY_FAILURE_THRESHOLD", "1"},
            {"RELAY_DLQ_BACKOFF_MS", "100"},
            {"RELAY_POLL_MS", "20"}},
        "relay started"));
  }
  ASSERT_TRUE(wait_until([&] { return published() >= 100; }, absl::Seconds(30)));

  // The downstream hangs, then fails outright; meanwhile 200 more notifications.
  mock_mode(mock, "timeout");
  deposit(2, 100);
  ASSERT_TRUE(wait_until(
      [&] {
        return scalar(
                   "SELECT state FROM {schema}.circuit_breakers "
                   "WHERE name = 'relay:notify_api'") == "open";
      },
      absl::Seconds(10)))
      << "a failed delivery sets the marker";
  absl::SleepFor(absl::Seconds(1));  // deliveries already in flight give up (2 × 300 ms + backoff)
  mock_mode(mock, "fail");
  deposit(3, 100);
  const long requests_paused = mock_get(mock, "/stats")["requests"];
  absl::SleepFor(absl::Milliseconds(2500));
  const long during_pause = long{mock_get(mock, "/stats")["requests"]} - requests_paused;
  // Unpaused, 12 deliveries at a time would have made hundreds of calls; paused,
  // only the one probe per marker period (1 s, 2 attempts each) goes out, and
  // a slow machine may let one straggler's last attempt land in the window.
  EXPECT_LE(during_pause, 3 * 2 + 1) << "every replica paused while the marker lives";
  EXPECT_GT(count("SELECT count(*) FROM {schema}.relay_dead_letters"), 0);

  mock_mode(mock, "ok");
  ASSERT_TRUE(wait_until([&] { return published() == 300; }, absl::Seconds(60)))
      << published() << " of 300 published";
  for (auto& relay : relays) EXPECT_EQ(relay->stop(), 0) << "drained and stopped cleanly";

  const nlohmann::json stats = mock_get(mock, "/stats");
  EXPECT_EQ(stats["unique"], 300) << "no notification lost";
  EXPECT_EQ(stats["duplicates_unexplained"], 0)
      << "none delivered twice by the relay, but after a 2xx it never saw (" << stats["duplicates"]
      << " twice, " << stats["late"] << " acted on past the deadline)";
  EXPECT_LE(stats["max_concurrency"], kReplicas * kInFlightPerReplica)
      << "before, during and after";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.relay_dead_letters "
                  "WHERE resolution IS DISTINCT FROM 'delivered'"),
            0)
      << "every dead letter delivered once the API was back (none dropped, none open)";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.relay_quarantine"), 1);

  // Every dead letter was delivered by one resend the relay saw answered (a
  // slow machine may dead-letter a call before the outage, and a resend may
  // be acted on late, after the relay gave up on it). After the outage began,
  // every resend from the DLQ arrived before any message that was still
  // waiting on the outbox.
  const long outage_start = stats["outage_marks"][0];
  bool new_work_seen = false;
  int resent = 0;
  for (const nlohmann::json& d : mock_get(mock, "/deliveries")) {
    EXPECT_NE(d[0], poison_key) << "a quarantined message is never sent";
    const bool from_dlq = long{d[1]} > 0;
    if (from_dlq && !bool{d[3]}) ++resent;
    if (long{d[2]} <= outage_start) continue;
    if (from_dlq) {
      EXPECT_FALSE(new_work_seen) << "DLQ resend " << d[0] << " after new work";
    } else {
      new_work_seen = true;
    }
  }
  EXPECT_GT(resent, 0);
  EXPECT_EQ(resent, count("SELECT count(*) FROM {schema}.relay_dead_letters"));
  expect_reconciled();
}

// An API too slow for the relay's deadline whose threads are all busy queues
// new requests and acts on them after their callers left. The relay never
// sees those 2xx, so it sends the messages again: the only repeats there may
// be, each one marked late by the mock thanks to X-Relay-Deadline (without
// the header every repeat would count as the relay's own).
TEST_F(RelayOutage, AnApiActingAfterTheDeadlineIsTheOnlyCauseOfARepeat) {
  notifying_ledger_ = std::make_unique<Ledger>(options({.write_notifications = true}));
  open_account(1, "0");
  deposit(1, 20);
  ServiceProcess mock_process(IDEMLEDGER_MOCK_DOWNSTREAM_BINARY, schema_,
                              {{"MOCK_THREADS", "2"}, {"MOCK_DELAY_MS", "300"}}, "listening");
  httplib::Client mock("127.0.0.1", mock_process.port());
  mock.set_read_timeout(30, 0);  // /control waits in line behind the slow requests
  ServiceProcess relay(
      IDEMLEDGER_NOTIFICATION_RELAY_BINARY, schema_,
      {{"RELAY_URL", "http://127.0.0.1:" + std::to_string(mock_process.port()) + "/notify"},
       {"RELAY_MAX_IN_FLIGHT", "4"},
       {"RELAY_TIMEOUT_MS", "150"},
       {"RELAY_ATTEMPTS", "2"},
       {"RELAY_MARKER_TTL_MS", "300"},
       {"RELAY_DLQ_BACKOFF_MS", "50"},
       {"RELAY_POLL_MS", "20"}},
      "relay started");
  ASSERT_TRUE(
      wait_until([&] { return mock_get(mock, "/stats")["duplicates"] > 0; }, absl::Seconds(30)))
      << "the slow API acted on a request its caller then sent again";
  const httplib::Result fast = mock.Post("/control?delay_ms=0");
  ASSERT_TRUE(fast && fast->status == 200);
  ASSERT_TRUE(wait_until([&] { return published() == 20; }, absl::Seconds(60)))
      << published() << " of 20 published";
  EXPECT_EQ(relay.stop(), 0);

  const nlohmann::json stats = mock_get(mock, "/stats");
  EXPECT_EQ(stats["unique"], 20) << "no notification lost";
  EXPECT_GT(stats["late"], 0) << "a 2xx given after the caller's deadline";
  EXPECT_EQ(stats["duplicates_unexplained"], 0)
      << stats["duplicates"] << " twice, " << stats["late"] << " acted on past the deadline";
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
