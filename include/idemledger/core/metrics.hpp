// idemledger/core/metrics.hpp — counters, gauges and histograms in Prometheus text.
//
// A small registry whose instruments are updated lock-free from hot paths and
// rendered in the Prometheus text exposition format (version 0.0.4). Host
// services serve render() on /metrics, or append it to their own exporter's
// output. The ledger's own instruments are LedgerMetrics (ledger/metrics.hpp).
//
//   idemledger::MetricsRegistry registry;
//   idemledger::Counter& c = registry.counter("app_things_total", "Things done.");
//   c.increment();
//   std::string body = registry.render();
//
// Values are integers: counts, and durations kept in nanoseconds and printed
// as exact decimal seconds, so no binary floating point is involved.
//
// MetricsRegistry and every instrument are thread-safe; instruments live as
// long as their registry and never move.
#ifndef IDEMLEDGER_CORE_METRICS_HPP
#define IDEMLEDGER_CORE_METRICS_HPP

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "idemledger/core/mutex.hpp"

namespace idemledger {

// Label pairs of one time series, e.g. {{"outcome", "applied"}}.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Counter
//
// A monotonically increasing count.
class Counter {
 public:
  void increment(std::uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> value_{0};
};

// Gauge
//
// A value that goes up and down (a queue depth, a unix timestamp).
class Gauge {
 public:
  void set(std::int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void add(std::int64_t d) { value_.fetch_add(d, std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> value_{0};
};

// Histogram
//
// Durations counted into fixed buckets (cumulative on output, as Prometheus
// expects). observe() is lock-free and allocates nothing.
class Histogram {
 public:
  // REQUIRES: `upper_bounds` strictly increasing and positive.
  explicit Histogram(std::span<const absl::Duration> upper_bounds);

  void observe(absl::Duration d);

  struct Snapshot {
    std::vector<std::int64_t> upper_bounds_ns;
    std::vector<std::uint64_t> cumulative_counts;  // one per bound, then +Inf
    std::uint64_t count = 0;
    std::int64_t sum_ns = 0;
  };
  [[nodiscard]] Snapshot snapshot() const;

 private:
  std::vector<std::int64_t> upper_bounds_ns_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;  // bounds + 1 (the +Inf bucket)
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::int64_t> sum_ns_{0};
};

// Buckets from 1 ms to 60 s, for latencies that span a lock wait and a retry.
[[nodiscard]] std::span<const absl::Duration> default_latency_buckets();

// MetricsRegistry
//
// Owns instruments by (name, labels). Asking again for the same name and
// labels returns the same instrument, so independent components can share one.
//
// REQUIRES (for every registration): `name` matches [a-zA-Z_:][a-zA-Z0-9_:]*,
// label names match [a-zA-Z_][a-zA-Z0-9_]* and do not start with "__", a name
// is always registered as the same kind; histograms of one name share bounds.
// A violation is a programming error: it is reported on stderr and aborts.
class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Counter& counter(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help,
                       std::span<const absl::Duration> upper_bounds,
                       const MetricLabels& labels = {});

  // render()
  //
  // Every family in name order: "# HELP", "# TYPE", then one line per series
  // (histograms: _bucket{le=...} cumulative, _sum in seconds, _count).
  [[nodiscard]] std::string render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Series {
    std::string labels;  // rendered `k="v",...`, escaped; empty without labels
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Kind kind;
    std::string help;
    std::map<std::string, Series, std::less<>> series;
  };
  Series& series_for(std::string_view name, std::string_view help, Kind kind,
                     const MetricLabels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_METRICS_HPP
