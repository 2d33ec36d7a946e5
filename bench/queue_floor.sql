-- queue_floor.sql: the queued path's floor — what PostgreSQL itself needs to
-- take deposits through a durable queue, in the fewest statements, on the
-- reference schema (bench/reference/seed_schema.sql). A pgbench custom script;
-- run_load.sh runs it beside the one-statement floor (one_statement.sql), the
-- same clients, the same server, the same run.
--
-- One pass handles g deposits, as the service must:
--   1. record: every event delivered twice (a provider's at-least-once: the
--      service sees ~2.2 deliveries per event) and recorded `pending` before
--      it would be answered — ONE statement and ONE commit for the 2g
--      deliveries (intake's group commit), one NOTIFY;
--   2. claim: up to g due events marked `enqueued` (updated_at is the seed's
--      lease) with FOR UPDATE SKIP LOCKED, committed before any is applied
--      (SPEC: claim, commit, then process) — ONE statement;
--   3. apply: the claimed events, set-based: idempotency records, one
--      aggregated balance update per user, the ledger rows and the status
--      `confirmed` — ONE statement and ONE commit.
-- With -D together=1, steps 2 and 3 share one transaction and one commit
-- (throughput issue: allowed if a crash loses nothing and leaks no lease —
-- here a crash rolls the claim back with the apply).
--
-- So per g events: 3 commits (2 together) and no PL/pgSQL, no per-event
-- subtransaction, no asset, account or address lookup, no second ledger
-- leg, no lease column — less than the service does, never more: a floor.
-- Deposits/s = events confirmed over the run's seconds (run_load.sh counts
-- them), not g x tps: a claim may find another client took the events.
-- Event ids: 'q' || (r * 64 + i) for the pass's i-th event (its two copies
-- share it), r random, so g is at most 64; user 1 + (uid + i) % 10000, the
-- amount as in one_statement.sql. No ':' inside string literals (pgbench
-- variables). Run with -D g=N -D together=0|1 (both required) and
-- --max-tries: the aggregated balance updates of two clients take no lock
-- order and may deadlock, which pgbench then retries.
\set r random(1, 100000000000000)
\set uid random(1, 10000)
\set amt random(1, 1000000) / 100.0
WITH recorded AS (
    INSERT INTO payment_events (event_id, user_id, amount, event_type, status)
    SELECT 'q' || (:r::bigint * 64 + d / 2)::text, 1 + (:uid + d / 2) % 10000, :amt, 'deposit', 'pending'
      FROM generate_series(0, 2 * :g - 1) AS d
    ON CONFLICT (event_id) DO NOTHING
    RETURNING 1)
SELECT pg_notify('queue_floor', '') FROM (SELECT count(*) FROM recorded) AS n;
\if :together
BEGIN;
\endif
WITH claimed AS (
    UPDATE payment_events p SET status = 'enqueued', updated_at = now()
     WHERE p.event_id IN (SELECT e.event_id FROM payment_events e WHERE e.status = 'pending'
                           ORDER BY e.updated_at, e.created_at LIMIT :g FOR UPDATE SKIP LOCKED)
    RETURNING p.event_id)
SELECT coalesce(array_agg(event_id), '{}') AS ids FROM claimed \gset
WITH ev AS (
    SELECT e.event_id, e.user_id, e.amount FROM payment_events e
     WHERE e.event_id = ANY (:ids::text[]) AND e.status = 'enqueued'),
guard AS (
    INSERT INTO processed_events (idempotency_key, outcome)
    SELECT 'deposit-' || ev.event_id, 'success' FROM ev RETURNING 1),
credited AS (
    UPDATE users SET balance = users.balance + s.total
      FROM (SELECT ev.user_id, sum(ev.amount) AS total FROM ev GROUP BY 1) AS s
     WHERE users.id = s.user_id RETURNING 1),
leg AS (
    INSERT INTO balance_events (user_id, amount, event_type, source_event_id)
    SELECT ev.user_id, ev.amount, 'deposit', ev.event_id FROM ev RETURNING 1),
settled AS (
    UPDATE payment_events p SET status = 'confirmed', updated_at = now(), retry_count = 0
      FROM ev WHERE p.event_id = ev.event_id RETURNING 1)
SELECT (SELECT count(*) FROM guard), (SELECT count(*) FROM credited),
       (SELECT count(*) FROM leg), (SELECT count(*) FROM settled);
\if :together
COMMIT;
\endif
