// idemledger.hpp — everything in the core library, for those who want one include.
// The libpq adapter is separate: idemledger/pg/connection.hpp, idemledger/pg/pool.hpp.
#ifndef IDEMLEDGER_HPP
#define IDEMLEDGER_HPP

#include "idemledger/alert.hpp"
#include "idemledger/amount.hpp"
#include "idemledger/circuit_breaker.hpp"
#include "idemledger/cleanup.hpp"
#include "idemledger/connection.hpp"
#include "idemledger/dispatcher.hpp"
#include "idemledger/dlq.hpp"
#include "idemledger/event_status.hpp"
#include "idemledger/event_type.hpp"
#include "idemledger/finality.hpp"
#include "idemledger/idempotency_key.hpp"
#include "idemledger/intake.hpp"
#include "idemledger/ledger.hpp"
#include "idemledger/log.hpp"
#include "idemledger/metrics.hpp"
#include "idemledger/migrate.hpp"
#include "idemledger/monitor.hpp"
#include "idemledger/partitioning.hpp"
#include "idemledger/reconcile.hpp"
#include "idemledger/relay.hpp"
#include "idemledger/retry.hpp"
#include "idemledger/status.hpp"
#include "idemledger/version.hpp"

#endif  // IDEMLEDGER_HPP
