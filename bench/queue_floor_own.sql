-- queue_floor_own.sql: the queued path's floor on idemledger's OWN schema —
-- the rows the service must write for a deposit, in the fewest plain
-- statements, with every index, domain and constraint the schema has. A
-- pgbench custom script; run_load.sh runs it beside the bare process_deposit
-- loop, the same clients, the same server, the same run.
--
-- queue_floor.sql measures the queue on the seed's reference schema, which
-- has one ledger leg, no fingerprints, no lease, no trace and no assets: a
-- floor for the queue's statements, not for this schema's writes. This one
-- writes what the service writes, per g deposits:
--   1. record: each event delivered twice and recorded `pending` (its owner
--      found by deposit address, its asset the default), ONE statement and
--      ONE commit for the 2g deliveries, one NOTIFY;
--   2. claim: up to g due events `enqueued` under a 30 s lease, FOR UPDATE
--      SKIP LOCKED, ONE statement;
--   3. apply: the idempotency record with its fingerprint, one aggregated
--      balance update per account, both ledger legs (the user's and the
--      system's), the status `confirmed` — ONE statement; with -D together=1
--      in the claim's transaction and commit, as Dispatcher::run_once does.
-- No PL/pgSQL, no subtransaction, no validation beyond the schema's own: less
-- than the service does, never more. Keys are hashed by the server here
-- (the library hashes them in the client).
--
-- Runs in a schema that `provider_simulator setup` made (users with deposit
-- addresses addr_1 .. addr_200, the default asset), named by the session's
-- search_path (PGOPTIONS="-c search_path=NAME"). Event ids: 'q' || (r * 64 + i)
-- for the pass's i-th event, r random, so g is at most 64. Run with -D g=N
-- -D together=0|1, -D record=1 -D apply=1 and --max-tries: two clients'
-- aggregated balance updates take no lock order and may deadlock, which
-- pgbench then retries. run_sql_profile.sh runs the two halves apart
-- (record=1 apply=0, then record=0 apply=1 on what that recorded).
\set r random(1, 100000000000000)
\set uid random(1, 200)
\set amt random(1, 1000000) / 100.0
\if :record
WITH d AS (
    SELECT 'q' || (:r::bigint * 64 + i / 2)::text AS id,
           'addr_' || (1 + (:uid + i / 2) % 200)::text AS address
      FROM generate_series(0, 2 * :g - 1) AS i),
recorded AS (
    INSERT INTO payment_events (event_id, user_id, asset, amount, event_type, status, trace_id)
    SELECT d.id, w.user_id, a.code, :amt, 'deposit', 'pending', 'trace'
      FROM d JOIN deposit_addresses w ON w.chain = '' AND w.address = d.address
      JOIN assets a ON a.is_default
    ON CONFLICT (event_id) DO NOTHING
    RETURNING 1)
SELECT pg_notify('queue_floor_own', '') FROM (SELECT count(*) FROM recorded) AS n;
\endif
\if :apply
\if :together
BEGIN;
\endif
WITH claimed AS (
    UPDATE payment_events p
       SET status = 'enqueued', lease_until = now() + interval '30 seconds', updated_at = now()
     WHERE p.event_id IN (SELECT e.event_id FROM payment_events e
                           WHERE e.status = 'pending' AND e.next_attempt_at <= now()
                           ORDER BY e.next_attempt_at, e.created_at LIMIT :g FOR UPDATE SKIP LOCKED)
    RETURNING p.event_id)
SELECT coalesce(array_agg(event_id), '{}') AS ids FROM claimed \gset
WITH ev AS (
    SELECT e.event_id, e.user_id, e.amount, e.asset FROM payment_events e
     WHERE e.event_id = ANY (:ids::text[]) AND e.status = 'enqueued'),
guard AS (
    INSERT INTO processed_events (idempotency_key, fingerprint, outcome, asset)
    SELECT encode(sha256(convert_to(ev.event_id || 'deposit', 'UTF8')), 'hex'),
           encode(sha256(convert_to(ev.user_id::text || ev.amount::text, 'UTF8')), 'hex'),
           'success', ev.asset FROM ev RETURNING 1),
credited AS (
    UPDATE accounts a SET balance = a.balance + s.total
      FROM (SELECT ev.user_id, ev.asset, sum(ev.amount) AS total FROM ev GROUP BY 1, 2) AS s
     WHERE a.user_id = s.user_id AND a.asset = s.asset RETURNING 1),
user_leg AS (
    INSERT INTO balance_events (user_id, asset, amount, event_type, source_event_id)
    SELECT ev.user_id, ev.asset, ev.amount, 'deposit', ev.event_id FROM ev RETURNING 1),
system_leg AS (
    INSERT INTO system_entries (asset, account, amount, event_type, source_event_id)
    SELECT ev.asset, 'external', -ev.amount, 'deposit', ev.event_id FROM ev RETURNING 1),
settled AS (
    UPDATE payment_events p SET status = 'confirmed', updated_at = now(), retry_count = 0
      FROM ev WHERE p.event_id = ev.event_id RETURNING 1)
SELECT (SELECT count(*) FROM guard), (SELECT count(*) FROM credited), (SELECT count(*) FROM user_leg),
       (SELECT count(*) FROM system_leg), (SELECT count(*) FROM settled);
\if :together
COMMIT;
\endif
\endif
