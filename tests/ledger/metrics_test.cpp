#include "idemledger/ledger/metrics.hpp"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/prometheus_text.hpp"

namespace idemledger {
namespace {

using testing::parse_prometheus_text;

TEST(Metrics, ComponentsMayEachBuildLedgerMetricsOnOneRegistry) {
  prometheus::Registry registry;
  LedgerMetrics first(registry);
  LedgerMetrics second(registry);
  EXPECT_EQ(&first.applied, &second.applied);
}

TEST(Metrics, LedgerMetricsRenderAsValidText) {
  prometheus::Registry registry;
  LedgerMetrics m(registry);
  m.applied.Increment(5);
  observe(m.apply_duration, absl::Microseconds(480));
  m.queue_pending.Set(7);
  absl::StatusOr<testing::PrometheusSamples> parsed = parse_prometheus_text(render(registry));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->at("idemledger_ledger_outcomes_total{outcome=\"applied\"}"), "5");
  EXPECT_EQ(parsed->at("idemledger_queue_events{status=\"pending\"}"), "7");
  EXPECT_EQ(parsed->at("idemledger_apply_duration_seconds_bucket{le=\"0.0005\"}"), "1");
  EXPECT_EQ(parsed->at("idemledger_apply_duration_seconds_sum"), "0.00048");
}

// Asset codes come from the database, but a bug or a flood of registered
// assets must still not grow the series without bound.
TEST(Metrics, AssetLabelsStayBoundedPastTheCap) {
  prometheus::Registry registry;
  LedgerMetrics m(registry);
  for (std::size_t i = 0; i < LedgerMetrics::kMaxAssets + 44; ++i) {
    m.count_for_asset("A" + std::to_string(i), "applied");
    m.count_for_asset("A" + std::to_string(i), "already_applied");
  }
  m.count_for_asset("A0", "applied");
  absl::StatusOr<testing::PrometheusSamples> parsed = parse_prometheus_text(render(registry));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::size_t series = 0;
  for (const auto& [name, value] : *parsed) {
    if (name.starts_with("idemledger_asset_outcomes_total{")) ++series;
  }
  EXPECT_EQ(series, 2 * (LedgerMetrics::kMaxAssets + 1));
  EXPECT_EQ(parsed->at(R"(idemledger_asset_outcomes_total{asset="A0",outcome="applied"})"), "2");
  EXPECT_EQ(parsed->at(R"(idemledger_asset_outcomes_total{asset="other",outcome="applied"})"),
            "44");
}

}  // namespace
}  // namespace idemledger
