// idemledger/eth/finality.hpp — Ethereum finality over JSON-RPC.
//
//   idemledger::LocalBreaker rpc_breaker({.name = "eth_rpc"});
//   idemledger::EthFinalityOracle oracle({.transport = my_http_post, .breaker = &rpc_breaker});
//   absl::StatusOr<bool> final = oracle.is_finalized("0x5c50...e7a1");
//
// EthFinalityOracle asks an Ethereum JSON-RPC node, in one batched request,
// for the transaction's receipt and the `finalized` block: final iff the
// receipt exists, succeeded (status 0x1) and its block is at or below the
// finalized block. A reverted transaction is kFailedPrecondition: it will
// never pay. Answers are cached — final ones for final_ttl (they cannot
// change), pending ones briefly — and every RPC call goes through the
// circuit breaker, so a dead node is not hammered by every thread.
//
// The HTTP call itself is the host's (JsonRpcTransport: request body in,
// response body out), so the library carries no HTTP client. This adapter
// depends on the core only.
//
// EthFinalityOracle is thread-safe if its transport is.
#ifndef IDEMLEDGER_ETH_FINALITY_HPP
#define IDEMLEDGER_ETH_FINALITY_HPP

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/core/breaker.hpp"
#include "idemledger/core/finality.hpp"
#include "idemledger/core/mutex.hpp"

namespace idemledger {

// One JSON-RPC POST: the request body in, the response body out; a
// non-OK status for transport failures (refused, timed out, HTTP >= 500).
using JsonRpcTransport = std::function<absl::StatusOr<std::string>(std::string_view body)>;

struct EthFinalityOracleOptions {
  JsonRpcTransport transport;  // REQUIRES: set
  absl::Duration final_ttl = absl::Hours(24);
  absl::Duration pending_ttl = absl::Seconds(5);
  std::size_t max_cache_entries = 100'000;
  // The node's breaker; nullptr means no breaker.
  LocalBreaker* breaker = nullptr;
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

class EthFinalityOracle final : public FinalityOracle {
 public:
  explicit EthFinalityOracle(EthFinalityOracleOptions options);

  [[nodiscard]] absl::StatusOr<bool> is_finalized(std::string_view tx_hash) override;

  // RPC calls made so far (cache misses that reached the transport).
  [[nodiscard]] std::size_t rpc_calls() const;

 private:
  absl::StatusOr<bool> ask_node(std::string_view tx_hash);
  void remember(std::string_view tx_hash, bool final);

  EthFinalityOracleOptions options_;
  mutable Mutex mu_;
  struct Cached {
    bool final;
    absl::Time expires;
  };
  absl::flat_hash_map<std::string, Cached> cache_ ABSL_GUARDED_BY(mu_);
  std::size_t rpc_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_ETH_FINALITY_HPP
