#include "idemledger/core/metrics.hpp"

#include <gtest/gtest.h>

#include <array>
#include <thread>
#include <vector>

#include "tests/support/prometheus_text.hpp"

namespace idemledger {
namespace {

using testing::parse_prometheus_text;

TEST(Metrics, RendersEachKindExactly) {
  MetricsRegistry registry;
  registry.counter("jobs_total", "Jobs done.", {{"queue", "a"}}).increment(3);
  registry.counter("jobs_total", "Jobs done.", {{"queue", "b"}}).increment();
  registry.gauge("depth", "Queue depth.").set(-2);
  const std::array<absl::Duration, 2> bounds = {absl::Microseconds(2500), absl::Seconds(1)};
  Histogram& h = registry.histogram("latency_seconds", "Latency.", bounds);
  h.observe(absl::Milliseconds(1));     // first bucket
  h.observe(absl::Microseconds(2500));  // on the bound: le is inclusive
  h.observe(absl::Milliseconds(200));
  h.observe(absl::Seconds(3));  // +Inf only
  EXPECT_EQ(registry.render(),
            "# HELP depth Queue depth.\n"
            "# TYPE depth gauge\n"
            "depth -2\n"
            "# HELP jobs_total Jobs done.\n"
            "# TYPE jobs_total counter\n"
            "jobs_total{queue=\"a\"} 3\n"
            "jobs_total{queue=\"b\"} 1\n"
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{le=\"0.0025\"} 2\n"
            "latency_seconds_bucket{le=\"1\"} 3\n"
            "latency_seconds_bucket{le=\"+Inf\"} 4\n"
            "latency_seconds_sum 3.2035\n"
            "latency_seconds_count 4\n");
  EXPECT_TRUE(parse_prometheus_text(registry.render()).ok());
}

TEST(Metrics, EscapesHelpAndLabelValuesAsTheFormatRequires) {
  MetricsRegistry registry;
  registry.counter("odd_total", "Back\\slash and\nnewline.", {{"path", "a\"b\\c\nd"}}).increment();
  const std::string text = registry.render();
  EXPECT_NE(text.find("# HELP odd_total Back\\\\slash and\\nnewline.\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("odd_total{path=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
  absl::StatusOr<testing::PrometheusSamples> parsed = parse_prometheus_text(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
}

TEST(Metrics, SameNameAndLabelsIsTheSameInstrument) {
  MetricsRegistry registry;
  Counter& a = registry.counter("x_total", "X.", {{"k", "v"}});
  Counter& b = registry.counter("x_total", "X.", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &registry.counter("x_total", "X.", {{"k", "w"}}));
}

TEST(Metrics, ConcurrentUpdatesAreNeverLost) {
  MetricsRegistry registry;
  Counter& c = registry.counter("c_total", "C.");
  Histogram& h = registry.histogram("h_seconds", "H.", default_latency_buckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100'000; ++i) {
        c.increment();
        h.observe(absl::Microseconds(i % 3000));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 400'000u);
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.count, 400'000u);
  EXPECT_EQ(s.cumulative_counts.back(), 400'000u);
}

TEST(MetricsDeathTest, MisuseIsAProgrammingError) {
  MetricsRegistry registry;
  registry.counter("taken", "T.");
  EXPECT_DEATH(registry.gauge("taken", "T."), "another kind");
  EXPECT_DEATH(registry.counter("9bad", "B."), "must match");
  EXPECT_DEATH(registry.counter("ok_total", "B.", {{"__reserved", "x"}}), "invalid label name");
  const std::array<absl::Duration, 2> unordered = {absl::Seconds(2), absl::Seconds(1)};
  EXPECT_DEATH(registry.histogram("h", "H.", unordered), "strictly increasing");
}

// The checker itself must be able to fail, or the tests above prove nothing.
TEST(PrometheusTextChecker, RefusesWhatAServerWouldRefuse) {
  EXPECT_TRUE(parse_prometheus_text("# TYPE a counter\na 1\n").ok());
  EXPECT_FALSE(parse_prometheus_text("a 1\n").ok()) << "no TYPE";
  EXPECT_FALSE(parse_prometheus_text("# TYPE a counter\na 1").ok()) << "no final newline";
  EXPECT_FALSE(parse_prometheus_text("# TYPE a counter\na{k=\"\\x\"} 1\n").ok()) << "bad escape";
  EXPECT_FALSE(parse_prometheus_text("# TYPE a counter\na one\n").ok()) << "bad value";
  EXPECT_FALSE(parse_prometheus_text("# TYPE a counter\na 1\na 2\n").ok()) << "repeated";
  EXPECT_FALSE(
      parse_prometheus_text("# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"1\"} 1\n").ok())
      << "split family";
  EXPECT_FALSE(parse_prometheus_text("# TYPE h histogram\nh_bucket{le=\"1\"} 3\n"
                                     "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n")
                   .ok())
      << "not cumulative";
  EXPECT_FALSE(parse_prometheus_text("# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
                                     "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n")
                   .ok())
      << "+Inf != count";
  EXPECT_FALSE(parse_prometheus_text("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\n").ok())
      << "no +Inf bucket";
}

}  // namespace
}  // namespace idemledger
