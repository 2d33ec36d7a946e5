#include "idemledger/eth/finality.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/text.hpp"

namespace idemledger {
namespace {

// A JSON-RPC quantity ("0x1b4") as an unsigned integer.
std::optional<std::uint64_t> quantity(const nlohmann::json& v) {
  if (!v.is_string()) return std::nullopt;
  const std::string s = v.get<std::string>();
  std::uint64_t n = 0;
  if (s.size() < 3 || s.size() > 18 || !s.starts_with("0x") ||
      !absl::SimpleHexAtoi(internal::to_absl(std::string_view(s).substr(2)), &n)) {
    return std::nullopt;
  }
  return n;
}

absl::Status node_error(std::string_view what) {
  return absl::UnavailableError(fmt::format("finality: the node's answer {}", what));
}

}  // namespace

EthFinalityOracle::EthFinalityOracle(EthFinalityOracleOptions options)
    : options_(std::move(options)) {}

std::size_t EthFinalityOracle::rpc_calls() const {
  MutexLock lock(&mu_);
  return rpc_calls_;
}

absl::StatusOr<bool> EthFinalityOracle::is_finalized(std::string_view tx_hash) {
  if (!internal::is_tx_hash(tx_hash)) {
    return absl::InvalidArgumentError(
        fmt::format("finality: \"{}\" is not a transaction hash (0x + 64 hex digits)", tx_hash));
  }
  {
    MutexLock lock(&mu_);
    if (auto it = cache_.find(internal::to_absl(tx_hash));
        it != cache_.end() && options_.now() < it->second.expires) {
      return it->second.final;
    }
  }
  BreakerDecision decision;
  if (options_.breaker != nullptr) {
    decision = options_.breaker->acquire();
    if (decision.admission == Admission::kReject) {
      return absl::UnavailableError("finality: the node's circuit breaker is open");
    }
  }
  absl::StatusOr<bool> answer = ask_node(tx_hash);
  // A malformed hash or a reverted transaction is a good answer from a
  // healthy node; only "could not ask" counts against it.
  const bool node_ok = answer.ok() || answer.status().code() != absl::StatusCode::kUnavailable;
  if (options_.breaker != nullptr) options_.breaker->record(decision, node_ok);
  if (answer.ok()) remember(tx_hash, *answer);
  return answer;
}

absl::StatusOr<bool> EthFinalityOracle::ask_node(std::string_view tx_hash) {
  {
    MutexLock lock(&mu_);
    ++rpc_calls_;
  }
  const nlohmann::json batch = nlohmann::json::array({{{"jsonrpc", "2.0"},
                                                       {"id", 1},
                                                       {"method", "eth_getTransactionReceipt"},
                                                       {"params", {std::string(tx_hash)}}},
                                                      {{"jsonrpc", "2.0"},
                                                       {"id", 2},
                                                       {"method", "eth_getBlockByNumber"},
                                                       {"params", {"finalized", false}}}});
  absl::StatusOr<std::string> body = options_.transport(batch.dump());
  if (!body.ok()) {
    return absl::UnavailableError(
        fmt::format("finality: node unreachable: {}", body.status().message()));
  }
  const nlohmann::json reply = nlohmann::json::parse(*body, nullptr, false);
  if (!reply.is_array()) return node_error("is not a JSON-RPC batch");
  const nlohmann::json* receipt = nullptr;
  const nlohmann::json* finalized = nullptr;
  for (const nlohmann::json& r : reply) {
    if (!r.is_object()) return node_error("holds a non-object");
    if (r.contains("error")) return node_error(fmt::format("is an error: {}", r["error"].dump()));
    const nlohmann::json id = r.value("id", nlohmann::json());
    if (id == 1) receipt = &r;
    if (id == 2) finalized = &r;
  }
  if (receipt == nullptr || finalized == nullptr) return node_error("misses a response");
  const nlohmann::json& rc = (*receipt)["result"];
  if (rc.is_null()) return false;  // not mined yet (or unknown): not final
  const std::optional<std::uint64_t> block = quantity(rc.value("blockNumber", nlohmann::json()));
  const std::optional<std::uint64_t> status = quantity(rc.value("status", nlohmann::json()));
  const nlohmann::json& fb = (*finalized)["result"];
  const std::optional<std::uint64_t> final_block =
      fb.is_object() ? quantity(fb.value("number", nlohmann::json())) : std::nullopt;
  if (!block || !status || !final_block) return node_error("has no readable block numbers");
  if (*block > *final_block) return false;
  if (*status != 1) {
    return absl::FailedPreconditionError(
        fmt::format("finality: transaction {} reverted in final block {}", tx_hash, *block));
  }
  return true;
}

void EthFinalityOracle::remember(std::string_view tx_hash, bool final) {
  const absl::Time now = options_.now();
  MutexLock lock(&mu_);
  if (cache_.size() >= options_.max_cache_entries) {
    absl::erase_if(cache_, [&](const auto& kv) { return kv.second.expires <= now; });
    if (cache_.size() >= options_.max_cache_entries) return;  // bounded: skip, never grow
  }
  cache_.insert_or_assign(std::string(tx_hash),
                          Cached{final, now + (final ? options_.final_ttl : options_.pending_ttl)});
}

}  // namespace idemledger
