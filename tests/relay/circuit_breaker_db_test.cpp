// The shared circuit breaker: opens after the threshold, lets exactly one
// probe through across processes, closes on its success, and still protects
// the dependency from the in-process breaker when the database is gone.
#include <unistd.h>

#include <algorithm>

#include "idemledger/relay/circuit_breaker.hpp"
#include "tests/support/prometheus_text.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

class Breaker : public LedgerTest {
 protected:
  // Every test's breaker: threshold 3, open for 200 ms, probes leased for
  // `probe_lease`.
  CircuitBreakerOptions options(absl::Duration probe_lease = absl::Seconds(5)) {
    return {.name = "rpc",
            .schema = schema_,
            .failure_threshold = 3,
            .open_for = absl::Milliseconds(200),
            .probe_lease = probe_lease};
  }
  static void fail_times(CircuitBreaker& b, Connection& conn, int n) {
    for (int i = 0; i < n; ++i) {
      const BreakerDecision d = b.acquire(conn);
      ASSERT_EQ(d.admission, Admission::kAllow);
      b.record(conn, d, /*success=*/false);
    }
  }
  std::string shared_state() { return scalar("SELECT state FROM {schema}.circuit_breakers"); }
};

TEST_F(Breaker, OpensAfterTheThresholdAndClosesOnASuccessfulProbe) {
  prometheus::Registry registry;
  CircuitBreakerOptions o = options();
  o.metrics = &registry;
  CircuitBreaker b(o);
  fail_times(b, *conn_, 2);
  EXPECT_EQ(shared_state(), "closed") << "below the threshold";
  const BreakerDecision ok = b.acquire(*conn_);
  b.record(*conn_, ok, true);  // a success resets the count
  fail_times(b, *conn_, 3);
  EXPECT_EQ(shared_state(), "open");
  EXPECT_EQ(b.acquire(*conn_).admission, Admission::kReject);
  EXPECT_EQ(parse_prometheus_text(render(registry))
                ->at("idemledger_circuit_breaker_state{breaker=\"rpc\"}"),
            "1");

  absl::SleepFor(absl::Milliseconds(250));
  const BreakerDecision probe = b.acquire(*conn_);
  EXPECT_EQ(probe.admission, Admission::kProbe);
  EXPECT_FALSE(probe.local);
  EXPECT_EQ(b.acquire(*conn_).admission, Admission::kReject) << "one probe at a time";
  b.record(*conn_, probe, true);
  EXPECT_EQ(shared_state(), "closed");
  EXPECT_EQ(b.acquire(*conn_).admission, Admission::kAllow);
}

TEST_F(Breaker, AFailedProbeOpensItAgainAndADeadProbeIsHandedOn) {
  CircuitBreaker b(options(absl::Milliseconds(200)));
  fail_times(b, *conn_, 3);
  absl::SleepFor(absl::Milliseconds(250));
  const BreakerDecision probe = b.acquire(*conn_);
  ASSERT_EQ(probe.admission, Admission::kProbe);
  b.record(*conn_, probe, false);
  EXPECT_EQ(shared_state(), "open");
  EXPECT_EQ(b.acquire(*conn_).admission, Admission::kReject) << "a new open period";

  // The next probe's owner dies without reporting: after the lease another takes over.
  absl::SleepFor(absl::Milliseconds(250));
  CircuitBreakerOptions died = options(absl::Milliseconds(200));
  died.owner = "replica-that-died";
  CircuitBreaker vanished(died);
  ASSERT_EQ(vanished.acquire(*conn_).admission, Admission::kProbe);
  EXPECT_EQ(b.acquire(*conn_).admission, Admission::kReject);
  absl::SleepFor(absl::Milliseconds(250));
  const BreakerDecision taken_over = b.acquire(*conn_);
  EXPECT_EQ(taken_over.admission, Admission::kProbe);
  b.record(*conn_, taken_over, true);
  EXPECT_EQ(shared_state(), "closed");
}

TEST_F(Breaker, ExactlyOneProbeAcrossFourProcesses) {
  {
    CircuitBreaker b(options());
    fail_times(b, *conn_, 3);
  }
  absl::SleepFor(absl::Milliseconds(250));
  for (int round = 0; round < 5; ++round) {
    // Each process asks twice, all released at once by the barrier.
    const std::vector<int> probes = run_forked(4, [&](int) {
      std::unique_ptr<pg::Connection> c = connect();
      CircuitBreaker b(options());
      int mine = 0;
      for (int i = 0; i < 2; ++i) mine += b.acquire(*c).admission == Admission::kProbe;
      return mine;
    });
    EXPECT_EQ(std::count(probes.begin(), probes.end(), 1), 1) << "round " << round;
    EXPECT_EQ(std::count(probes.begin(), probes.end(), 0), 3) << "round " << round;
    // The probe's owner exited without reporting; let its lease lapse.
    exec("UPDATE {schema}.circuit_breakers SET probe_until = now()");
  }
}

TEST_F(Breaker, DatabaseDownTheInProcessBreakerStillProtects) {
  IDEMLEDGER_NEEDS_OWN_SESSION("pg_terminate_backend of its own backend");
  absl::Time now = absl::Now();
  CircuitBreakerOptions o = options();
  o.now = [&] { return now; };
  CircuitBreaker b(o);
  std::unique_ptr<pg::Connection> gone = connect();
  const std::string pid = std::to_string(gone->backend_pid());
  ASSERT_EQ(scalar("SELECT pg_terminate_backend(" + pid + ")"), "t");
  absl::SleepFor(absl::Milliseconds(100));

  for (int i = 0; i < 3; ++i) {
    const BreakerDecision d = b.acquire(*gone);
    EXPECT_TRUE(d.local);
    EXPECT_EQ(d.admission, Admission::kAllow);
    b.record(*gone, d, false);
  }
  EXPECT_EQ(b.local_state(), BreakerState::kOpen);
  EXPECT_EQ(b.acquire(*gone).admission, Admission::kReject) << "the RPC is protected";
  now += absl::Milliseconds(250);
  const BreakerDecision probe = b.acquire(*gone);
  EXPECT_EQ(probe.admission, Admission::kProbe);
  EXPECT_EQ(b.acquire(*gone).admission, Admission::kReject) << "one probe in this process";
  b.record(*gone, probe, true);
  EXPECT_EQ(b.local_state(), BreakerState::kClosed);
  EXPECT_EQ(b.acquire(*gone).admission, Admission::kAllow);
}

}  // namespace
}  // namespace idemledger::testing
