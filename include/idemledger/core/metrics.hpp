// idemledger/core/metrics.hpp — the library's instruments, in a prometheus-cpp registry.
//
// Purpose: idemledger records what it does in a prometheus::Registry
// (prometheus-cpp, Debian's prometheus-cpp-dev) that the host owns — the same
// one its own instruments live in — so one exposition serves both. The
// helpers here register families the way every idemledger component does:
// get-or-create by name, with the kind and the label names checked.
//
//   prometheus::Registry registry;                 // the host's, or a new one
//   idemledger::LedgerMetrics metrics(registry);   // ledger/metrics.hpp
//   idemledger::Ledger ledger({.metrics = &metrics});
//   ... ledger.process_deposit(conn, event) ...
//   std::string body = idemledger::render(registry);   // or the host's exposer
//
// Guarantees: asking again for a name and label set returns the same
// instrument, so independent components (and two LedgerMetrics) share it.
// Durations are observed in seconds, as Prometheus expects; money never goes
// through a metric. Every label the library sets takes values from a fixed
// set or a bounded one (registered assets, capped), so a hostile input can
// never create series.
//
// Misuse is a programming error, not a runtime condition: a name already
// registered as another kind, an invalid metric or label name, or unsorted
// buckets is reported on stderr and aborts (prometheus-cpp's exceptions never
// cross this API).
//
// Thread-safety: the helpers and every instrument are thread-safe, as
// prometheus-cpp's are; instruments live as long as their registry.
#ifndef IDEMLEDGER_CORE_METRICS_HPP
#define IDEMLEDGER_CORE_METRICS_HPP

#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/labels.h"
#include "prometheus/registry.h"

namespace idemledger {

// Buckets from 250 µs to 60 s, in seconds, for latencies that span a commit
// flush, a lock wait and a retry.
[[nodiscard]] const prometheus::Histogram::BucketBoundaries& default_latency_buckets();

// The series `name{labels}` in `registry`, created on first use.
// REQUIRES: `name` and the label names are valid Prometheus names, and the
// name is not registered as another kind (checked; a violation aborts).
prometheus::Counter& counter(prometheus::Registry& registry, std::string_view name,
                             std::string_view help, const prometheus::Labels& labels = {});
prometheus::Gauge& gauge(prometheus::Registry& registry, std::string_view name,
                         std::string_view help, const prometheus::Labels& labels = {});
// A series that exists already keeps the buckets it was created with.
// REQUIRES: `buckets` strictly increasing (checked; a violation aborts).
prometheus::Histogram& histogram(prometheus::Registry& registry, std::string_view name,
                                 std::string_view help,
                                 const prometheus::Histogram::BucketBoundaries& buckets,
                                 const prometheus::Labels& labels = {});

// observe()
//
// Records `d` in seconds.
inline void observe(prometheus::Histogram& h, absl::Duration d) {
  h.Observe(absl::ToDoubleSeconds(d));
}

// render()
//
// Every family of `registry` in the Prometheus text exposition format
// (0.0.4), for a host that serves /metrics itself.
[[nodiscard]] std::string render(prometheus::Registry& registry);

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_METRICS_HPP
