// Google Benchmark cases for the pure, per-event parts of the hot path.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "idemledger/amount.hpp"
#include "idemledger/idempotency_key.hpp"

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

}  // namespace
