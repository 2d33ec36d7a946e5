#include "idemledger/ledger/metrics.hpp"

#include <gtest/gtest.h>

#include "tests/support/prometheus_text.hpp"

namespace idemledger {
namespace {

using testing::parse_prometheus_text;

TEST(Metrics, ComponentsMayEachBuildLedgerMetricsOnOneRegistry) {
  MetricsRegistry registry;
  LedgerMetrics first(registry);
  LedgerMetrics second(registry);
  EXPECT_EQ(&first.applied, &second.applied);
}

TEST(Metrics, LedgerMetricsRenderAsValidText) {
  MetricsRegistry registry;
  LedgerMetrics m(registry);
  m.applied.increment(5);
  m.apply_duration.observe(absl::Microseconds(480));
  m.queue_pending.set(7);
  absl::StatusOr<testing::PrometheusSamples> parsed = parse_prometheus_text(registry.render());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->at("idemledger_ledger_outcomes_total{outcome=\"applied\"}"), "5");
  EXPECT_EQ(parsed->at("idemledger_queue_events{status=\"pending\"}"), "7");
  EXPECT_EQ(parsed->at("idemledger_apply_duration_seconds_bucket{le=\"0.0005\"}"), "1");
  EXPECT_EQ(parsed->at("idemledger_apply_duration_seconds_sum"), "0.00048");
}

}  // namespace
}  // namespace idemledger
