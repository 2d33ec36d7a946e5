// Google Benchmark cases for the pure, per-event parts of the hot path.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/log.hpp"
#include "idemledger/core/metrics.hpp"
#include "idemledger/core/params.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "idemledger/ledger/metrics.hpp"

namespace {

void BM_AmountParse(benchmark::State& state, const std::string& text) {
  for (auto _ : state) benchmark::DoNotOptimize(idemledger::Amount::parse(text));
}
BENCHMARK_CAPTURE(BM_AmountParse, integer, std::string("50"));
BENCHMARK_CAPTURE(BM_AmountParse, cents, std::string("1234.56"));
BENCHMARK_CAPTURE(BM_AmountParse, wei_precision,
                  std::string("12345678901234567890.123456789012345678"));
BENCHMARK_CAPTURE(BM_AmountParse, exponent, std::string("1.5e3"));
BENCHMARK_CAPTURE(BM_AmountParse, rejected_huge_exponent, std::string("1e999999999"));

void BM_AmountToString(benchmark::State& state) {
  const idemledger::Amount a =
      *idemledger::Amount::parse("12345678901234567890.123456789012345678");
  for (auto _ : state) benchmark::DoNotOptimize(a.to_string());
}
BENCHMARK(BM_AmountToString);

void BM_AmountFromBaseUnits(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(idemledger::Amount::from_base_units("1500000000000000000", 18));
}
BENCHMARK(BM_AmountFromBaseUnits);

void BM_IdempotencyKey(benchmark::State& state) {
  const std::string id = "evt_0123456789abcdef0123456789abcdef";
  for (auto _ : state) benchmark::DoNotOptimize(idemledger::idempotency_key(id, "deposit"));
}
BENCHMARK(BM_IdempotencyKey);

void BM_PayloadFingerprint(benchmark::State& state) {
  const idemledger::Amount a = *idemledger::Amount::parse("1234.56");
  for (auto _ : state)
    benchmark::DoNotOptimize(idemledger::payload_fingerprint(424242, a, "deposit"));
}
BENCHMARK(BM_PayloadFingerprint);

// What process_batch() computes on the client for each event before its one
// round trip: the key, the fingerprint, and seven array elements. Reported
// per event.
void BM_BatchEncodingPerEvent(benchmark::State& state) {
  const idemledger::Amount a = *idemledger::Amount::parse("1234.56");
  std::vector<std::string> ids;
  for (int i = 0; i < 100; ++i) ids.push_back("evt_0123456789abcdef_" + std::to_string(i));
  for (auto _ : state) {
    idemledger::ArrayText id, type, user, asset, amount, key, fingerprint;
    for (const std::string& e : ids) {
      id.add(e);
      type.add(std::string_view("deposit"));
      user.add(std::int64_t{424242});
      asset.add(idemledger::Param());
      amount.add(a);
      key.add(idemledger::idempotency_key(e, "deposit"));
      fingerprint.add(idemledger::payload_fingerprint(424242, a, "deposit"));
    }
    benchmark::DoNotOptimize(std::move(key).finish());
    benchmark::DoNotOptimize(std::move(fingerprint).finish());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(ids.size()));
}
BENCHMARK(BM_BatchEncodingPerEvent);

// What every Ledger call adds when given LedgerMetrics: a histogram
// observation and a counter increment (prometheus-cpp's instruments), from
// several threads at once; with_asset:1 adds the per-asset count.
void BM_MetricsPerLedgerCall(benchmark::State& state) {
  static prometheus::Registry registry;
  static idemledger::LedgerMetrics metrics(registry);
  const bool with_asset = state.range(0) != 0;
  std::int64_t ns = 400'000 + state.thread_index() * 1'000;
  for (auto _ : state) {
    idemledger::observe(metrics.apply_duration, absl::Nanoseconds(ns));
    metrics.applied.Increment();
    if (with_asset) metrics.count_for_asset("USDC", "applied");
    ns = ns * 7 % 9'000'000;  // spread over the buckets
  }
}
BENCHMARK(BM_MetricsPerLedgerCall)->ArgName("with_asset")->Arg(0)->Arg(1)->Threads(1)->Threads(4);

void BM_RenderLedgerMetrics(benchmark::State& state) {
  prometheus::Registry registry;
  idemledger::LedgerMetrics metrics(registry);
  metrics.applied.Increment(123'456);
  for (auto _ : state) benchmark::DoNotOptimize(idemledger::render(registry));
}
BENCHMARK(BM_RenderLedgerMetrics);

void BM_FormatJsonLogLine(benchmark::State& state) {
  const idemledger::LogField fields[] = {{"event_type", std::string_view("deposit")},
                                         {"user_id", std::int64_t{424242}},
                                         {"amount", std::string_view("1234.56")},
                                         {"result", std::string_view("applied")},
                                         {"retry_count", std::int64_t{0}}};
  const idemledger::LogRecord record{.level = idemledger::LogLevel::kInfo,
                                     .time = absl::Now(),
                                     .message = "event",
                                     .trace_id = "5f0c2a9e4b7d4c1fa0e3b2d19c8f7a65",
                                     .event_id = "evt_123456",
                                     .fields = fields};
  for (auto _ : state) benchmark::DoNotOptimize(idemledger::format_json_log_line(record));
}
BENCHMARK(BM_FormatJsonLogLine);

}  // namespace
