#include "idemledger/core/metrics.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "tests/support/prometheus_text.hpp"

namespace idemledger {
namespace {

using testing::parse_prometheus_text;

TEST(Metrics, RendersEachKindAsPrometheusReadsIt) {
  prometheus::Registry registry;
  counter(registry, "jobs_total", "Jobs done.", {{"queue", "a"}}).Increment(3);
  counter(registry, "jobs_total", "Jobs done.", {{"queue", "b"}}).Increment();
  gauge(registry, "depth", "Queue depth.").Set(-2);
  prometheus::Histogram& h = histogram(registry, "latency_seconds", "Latency.", {0.0025, 1});
  observe(h, absl::Milliseconds(1));     // first bucket
  observe(h, absl::Microseconds(2500));  // on the bound: le is inclusive
  observe(h, absl::Milliseconds(200));
  observe(h, absl::Seconds(3));  // +Inf only
  const std::string text = render(registry);
  absl::StatusOr<testing::PrometheusSamples> parsed = parse_prometheus_text(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  const testing::PrometheusSamples expected = {{"jobs_total{queue=\"a\"}", "3"},
                                               {"jobs_total{queue=\"b\"}", "1"},
                                               {"depth", "-2"},
                                               {"latency_seconds_bucket{le=\"0.0025\"}", "2"},
                                               {"latency_seconds_bucket{le=\"1\"}", "3"},
                                               {"latency_seconds_bucket{le=\"+Inf\"}", "4"},
                                               {"latency_seconds_sum", "3.2035"},
                                               {"latency_seconds_count", "4"}};
  EXPECT_EQ(*parsed, expected) << text;
  EXPECT_NE(text.find("# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\n"),
            std::string::npos)
      << text;
}

TEST(Metrics, EscapesLabelValuesAsTheFormatRequires) {
  prometheus::Registry registry;
  counter(registry, "odd_total", "Odd.", {{"path", "a\"b\\c\nd"}}).Increment();
  const std::string text = render(registry);
  EXPECT_NE(text.find("odd_total{path=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
  absl::StatusOr<testing::PrometheusSamples> parsed = parse_prometheus_text(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
}

TEST(Metrics, SameNameAndLabelsIsTheSameInstrument) {
  prometheus::Registry registry;
  prometheus::Counter& a = counter(registry, "x_total", "X.", {{"k", "v"}});
  prometheus::Counter& b = counter(registry, "x_total", "X.", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &counter(registry, "x_total", "X.", {{"k", "w"}}));
  prometheus::Histogram& h = histogram(registry, "h_seconds", "H.", default_latency_buckets());
  EXPECT_EQ(&h, &histogram(registry, "h_seconds", "H.", default_latency_buckets()));
}

TEST(Metrics, DefaultBucketsSpanACommitToAMinuteInOrder) {
  const prometheus::Histogram::BucketBoundaries& b = default_latency_buckets();
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front(), 0.00025);
  EXPECT_EQ(b.back(), 60.0);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  EXPECT_EQ(std::adjacent_find(b.begin(), b.end()), b.end());
}

TEST(Metrics, ConcurrentUpdatesAreNeverLost) {
  prometheus::Registry registry;
  prometheus::Counter& c = counter(registry, "c_total", "C.");
  prometheus::Histogram& h = histogram(registry, "h_seconds", "H.", default_latency_buckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100'000; ++i) {
        c.Increment();
        observe(h, absl::Microseconds(i % 3000));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), 400'000.0);
  const prometheus::ClientMetric m = h.Collect();
  EXPECT_EQ(m.histogram.sample_count, 400'000u);
  EXPECT_EQ(m.histogram.bucket.back().cumulative_count, 400'000u);
}

TEST(MetricsDeathTest, MisuseIsAProgrammingErrorNotAnException) {
  prometheus::Registry registry;
  counter(registry, "taken", "T.");
  EXPECT_DEATH(gauge(registry, "taken", "T."), "idemledger metrics: \"taken\"");
  EXPECT_DEATH(counter(registry, "9bad", "B."), "idemledger metrics: \"9bad\"");
  EXPECT_DEATH(counter(registry, "ok_total", "B.", {{"__reserved", "x"}}),
               "idemledger metrics: \"ok_total\"");
  EXPECT_DEATH(histogram(registry, "h", "H.", {2, 1}), "idemledger metrics: \"h\"");
  // prometheus-cpp would write these unescaped and break the exposition.
  EXPECT_DEATH(counter(registry, "help_total", "Two\nlines."), "HELP text must not");
  EXPECT_DEATH(counter(registry, "help_total", "Back\\slash."), "HELP text must not");
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
  // prometheus-cpp writes _count and _sum first; Prometheus accepts either order.
  EXPECT_TRUE(parse_prometheus_text("# TYPE h histogram\nh_count 2\nh_sum 1\n"
                                    "h_bucket{le=\"+Inf\"} 2\n")
                  .ok());
  EXPECT_FALSE(parse_prometheus_text("# TYPE h histogram\nh_count 3\nh_sum 1\n"
                                     "h_bucket{le=\"+Inf\"} 2\n")
                   .ok())
      << "+Inf != count, count first";
  EXPECT_FALSE(parse_prometheus_text("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\n").ok())
      << "no +Inf bucket";
}

}  // namespace
}  // namespace idemledger
