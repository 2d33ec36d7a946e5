#include "idemledger/core/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>

namespace idemledger {
namespace {

constexpr std::int64_t kNanosPerSecond = 1'000'000'000;

[[noreturn]] void registration_error(std::string_view name, std::string_view rule) {
  std::fprintf(stderr, "idemledger metrics: \"%.*s\": %.*s\n", static_cast<int>(name.size()),
               name.data(), static_cast<int>(rule.size()), rule.data());
  std::abort();
}

bool is_name_char(char c, bool first, bool allow_colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  const bool digit = c >= '0' && c <= '9';
  return alpha || (allow_colon && c == ':') || (!first && digit);
}

bool valid_name(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!is_name_char(name[i], i == 0, allow_colon)) return false;
  }
  return true;
}

// Escapes what the text format requires: \ and newline in HELP, plus " in label values.
void append_escaped(std::string& out, std::string_view text, bool escape_quote) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && escape_quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

std::string render_labels(std::string_view metric, const MetricLabels& labels, bool histogram) {
  std::string out;
  for (const auto& [name, value] : labels) {
    if (!valid_name(name, /*allow_colon=*/false) || name.starts_with("__") ||
        (histogram && name == "le")) {
      registration_error(metric, fmt::format("invalid label name \"{}\"", name));
    }
    if (!out.empty()) out += ',';
    out += name;
    out += "=\"";
    append_escaped(out, value, /*escape_quote=*/true);
    out += '"';
  }
  return out;
}

// Exact decimal seconds: 2500000 ns -> "0.0025", 60 s -> "60".
std::string seconds_text(std::int64_t ns) {
  const bool negative = ns < 0;
  const std::uint64_t magnitude =
      negative ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  const std::uint64_t whole = magnitude / kNanosPerSecond;
  std::uint64_t fraction = magnitude % kNanosPerSecond;
  std::string out = fmt::format("{}{}", negative ? "-" : "", whole);
  if (fraction != 0) {
    int digits = 9;
    while (fraction % 10 == 0) {
      fraction /= 10;
      --digits;
    }
    out += fmt::format(".{:0{}}", fraction, digits);
  }
  return out;
}

void append_sample(std::string& out, std::string_view name, std::string_view labels,
                   std::string_view value) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
}

constexpr std::array<absl::Duration, 17> kDefaultLatencyBuckets = {
    absl::Microseconds(250),  absl::Microseconds(500), absl::Milliseconds(1),
    absl::Microseconds(2500), absl::Milliseconds(5),   absl::Milliseconds(10),
    absl::Milliseconds(25),   absl::Milliseconds(50),  absl::Milliseconds(100),
    absl::Milliseconds(250),  absl::Milliseconds(500), absl::Seconds(1),
    absl::Milliseconds(2500), absl::Seconds(5),        absl::Seconds(10),
    absl::Seconds(30),        absl::Seconds(60)};

}  // namespace

Histogram::Histogram(std::span<const absl::Duration> upper_bounds)
    : buckets_(std::make_unique<std::atomic<std::uint64_t>[]>(upper_bounds.size() + 1)) {
  upper_bounds_ns_.reserve(upper_bounds.size());
  for (absl::Duration bound : upper_bounds) {
    upper_bounds_ns_.push_back(absl::ToInt64Nanoseconds(bound));
  }
}

void Histogram::observe(absl::Duration d) {
  const std::int64_t ns = absl::ToInt64Nanoseconds(d);
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(upper_bounds_ns_.begin(), upper_bounds_ns_.end(), ns) -
      upper_bounds_ns_.begin());
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds_ns = upper_bounds_ns_;
  s.cumulative_counts.reserve(upper_bounds_ns_.size() + 1);
  std::uint64_t running = 0;
  for (std::size_t i = 0; i <= upper_bounds_ns_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative_counts.push_back(running);
  }
  // Concurrent observations may land between the loads; the +Inf bucket and
  // _count must agree for the output to be valid, so count is the bucket sum.
  s.count = running;
  s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  return s;
}

std::span<const absl::Duration> default_latency_buckets() { return kDefaultLatencyBuckets; }

MetricsRegistry::Series& MetricsRegistry::series_for(std::string_view name, std::string_view help,
                                                     Kind kind, const MetricLabels& labels) {
  if (!valid_name(name, /*allow_colon=*/true)) {
    registration_error(name, "a metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  auto family = families_.find(name);
  if (family == families_.end()) {
    family =
        families_.emplace(std::string(name), Family{.kind = kind, .help = std::string(help)}).first;
  } else if (family->second.kind != kind) {
    registration_error(name, "already registered as another kind of metric");
  }
  std::string rendered = render_labels(name, labels, kind == Kind::kHistogram);
  auto series = family->second.series.find(rendered);
  if (series == family->second.series.end()) {
    series = family->second.series.emplace(rendered, Series{.labels = rendered}).first;
  }
  return series->second;
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help,
                                  const MetricLabels& labels) {
  MutexLock lock(&mu_);
  Series& s = series_for(name, help, Kind::kCounter, labels);
  if (!s.counter) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help,
                              const MetricLabels& labels) {
  MutexLock lock(&mu_);
  Series& s = series_for(name, help, Kind::kGauge, labels);
  if (!s.gauge) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help,
                                      std::span<const absl::Duration> upper_bounds,
                                      const MetricLabels& labels) {
  for (std::size_t i = 0; i < upper_bounds.size(); ++i) {
    if (upper_bounds[i] <= absl::ZeroDuration() ||
        (i > 0 && upper_bounds[i] <= upper_bounds[i - 1]))
      registration_error(name, "histogram bounds must be positive and strictly increasing");
  }
  MutexLock lock(&mu_);
  Series& s = series_for(name, help, Kind::kHistogram, labels);
  if (!s.histogram) {
    for (const auto& [other_labels, other] : families_.find(name)->second.series) {
      if (other.histogram &&
          !std::ranges::equal(other.histogram->snapshot().upper_bounds_ns, upper_bounds, {}, {},
                              [](absl::Duration d) { return absl::ToInt64Nanoseconds(d); })) {
        registration_error(name, "every series of a histogram must have the same bounds");
      }
    }
    s.histogram = std::make_unique<Histogram>(upper_bounds);
  }
  return *s.histogram;
}

std::string MetricsRegistry::render() const {
  std::string out;
  MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) {
    out += "# HELP ";
    out += name;
    out += ' ';
    append_escaped(out, family.help, /*escape_quote=*/false);
    out += '\n';
    switch (family.kind) {
      case Kind::kCounter:
        out += fmt::format("# TYPE {} counter\n", name);
        for (const auto& [labels, s] : family.series) {
          append_sample(out, name, labels, fmt::format("{}", s.counter->value()));
        }
        break;
      case Kind::kGauge:
        out += fmt::format("# TYPE {} gauge\n", name);
        for (const auto& [labels, s] : family.series) {
          append_sample(out, name, labels, fmt::format("{}", s.gauge->value()));
        }
        break;
      case Kind::kHistogram: {
        out += fmt::format("# TYPE {} histogram\n", name);
        const std::string bucket = name + "_bucket";
        for (const auto& [labels, s] : family.series) {
          const Histogram::Snapshot snap = s.histogram->snapshot();
          const std::string prefix = labels.empty() ? "" : labels + ",";
          for (std::size_t i = 0; i < snap.cumulative_counts.size(); ++i) {
            const std::string le = i < snap.upper_bounds_ns.size()
                                       ? seconds_text(snap.upper_bounds_ns[i])
                                       : std::string("+Inf");
            append_sample(out, bucket, fmt::format("{}le=\"{}\"", prefix, le),
                          fmt::format("{}", snap.cumulative_counts[i]));
          }
          append_sample(out, name + "_sum", labels, seconds_text(snap.sum_ns));
          append_sample(out, name + "_count", labels, fmt::format("{}", snap.count));
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace idemledger
