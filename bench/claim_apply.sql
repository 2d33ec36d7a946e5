-- claim_apply.sql: a worker's claim and apply in idemledger's own SQL, driven
-- by pgbench instead of outbox_worker: BEGIN, claim_events() for up to g
-- events, apply_steps() on them, COMMIT — the calls Dispatcher::run_once
-- makes, minus the worker around them. For run_sql_profile.sh, beside the
-- real worker and bench/queue_floor_own.sql's claim and apply, on the same
-- backlog of pending deposits. The idempotency keys and fingerprints are
-- hashed by the server here (the library hashes them in the client), as the
-- floor hashes its own.
BEGIN;
SELECT array_agg(c.event_id) AS ids, array_agg(c.event_type) AS types, array_agg(c.user_id) AS users,
       array_agg(c.asset) AS assets, array_agg(c.amount) AS amounts,
       array_agg(encode(sha256(convert_to(c.event_id || '/key', 'UTF8')), 'hex')) AS keys,
       array_agg(encode(sha256(convert_to(c.event_id || '/fingerprint', 'UTF8')), 'hex')) AS fingerprints,
       array_fill(NULL::text, ARRAY[count(*)::int]) AS nulls
  FROM claim_events(:g::int, 30000::bigint) AS c \gset
-- ids, types, users, assets, amounts, keys, fingerprints, fees, expiries, holds, notify
SELECT count(*) FROM apply_steps(:ids::text[], :types::text[], :users::bigint[], :assets::text[],
    :amounts::numeric[], :keys::text[], :fingerprints::text[], :nulls::numeric[], :nulls::bigint[],
    :nulls::text[], false);
COMMIT;
