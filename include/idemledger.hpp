// idemledger.hpp — every module's public headers, for those who want one
// include (link idemledger::idemledger). A host that needs less includes the
// headers of its modules and links only those targets, e.g. idemledger::ledger
// over its own Connection, without libpq, OpenSSL's HMAC or a JSON library.
#ifndef IDEMLEDGER_HPP
#define IDEMLEDGER_HPP

// core
#include "idemledger/core/alert.hpp"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/breaker.hpp"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/event_status.hpp"
#include "idemledger/core/event_type.hpp"
#include "idemledger/core/finality.hpp"
#include "idemledger/core/log.hpp"
#include "idemledger/core/metrics.hpp"
#include "idemledger/core/mutex.hpp"
#include "idemledger/core/params.hpp"
#include "idemledger/core/progress.hpp"
#include "idemledger/core/result.hpp"
#include "idemledger/core/retry.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/core/status.hpp"
#include "idemledger/core/version.hpp"
// ledger
#include "idemledger/ledger/dead_letter.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/ledger/metrics.hpp"
#include "idemledger/ledger/migrate.hpp"
#include "idemledger/ledger/topics.hpp"
#include "idemledger/ledger/transitions.hpp"
// queue
#include "idemledger/queue/dispatcher.hpp"
#include "idemledger/queue/dlq.hpp"
#include "idemledger/queue/intake.hpp"
// relay
#include "idemledger/relay/circuit_breaker.hpp"
#include "idemledger/relay/policy.hpp"
#include "idemledger/relay/relay.hpp"
#include "idemledger/relay/report.hpp"
// ops
#include "idemledger/ops/cleanup.hpp"
#include "idemledger/ops/monitor.hpp"
#include "idemledger/ops/partitioning.hpp"
#include "idemledger/ops/reconcile.hpp"
#include "idemledger/ops/report.hpp"
// adapters
#include "idemledger/eth/finality.hpp"
#include "idemledger/pg/connection.hpp"
#include "idemledger/pg/pool.hpp"

#endif  // IDEMLEDGER_HPP
