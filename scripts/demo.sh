#!/usr/bin/env bash
# demo.sh — README command 1: the whole service on a private PostgreSQL.
#
# webhook_intake + 2 outbox_worker processes; provider_simulator sends 20,000
# events in three assets (ETH, USDC, WBTC) — deposits, withdrawals, and
# withdrawal requests (holds) that are then confirmed (posted), failed
# (voided) or left to expire — each delivered 1-3 times, plus bad and
# conflicting deliveries of every kind; it waits until every event is
# terminal, prints a summary per asset and checks every invariant. The workers' notifications go through 2 notification_relay
# processes to mock_downstream, which hangs and then fails for 3 s each in the
# middle; relay-check then proves each was delivered exactly once or kept with
# its reason. Exits non-zero if anything fails. SIM_EVENTS etc. override sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build
exec bash scripts/with-postgres.sh build bash scripts/demo-services.sh
