-- record_events.sql: intake's record step as webhook_intake makes it — one
-- call of idemledger's record_events() per group commit, g deposits each
-- delivered twice (2g deliveries), addressed by deposit address, the arrays
-- bound as parameters, in one statement and one commit. A pgbench custom
-- script for run_sql_profile.sh, beside bench/queue_floor_own.sql's record
-- statement, which writes the same rows the fewest plain way. The first
-- statement only makes the arrays (a round trip intake does not make). Event
-- ids: 'q' || (r * 64 + i), r random, so g is at most 32.
--
-- Runs in a schema that `provider_simulator setup` made (deposit addresses
-- addr_1 .. addr_200), named by the session's search_path.
\set r random(1, 100000000000000)
\set uid random(1, 200)
SELECT array_agg('q' || (:r::bigint * 64 + i / 2)::text) AS ids,
       array_agg('addr_' || (1 + (:uid + i / 2) % 200)::text) AS addresses,
       array_fill('deposit'::text, ARRAY[2 * :g]) AS types,
       array_fill(1.5::numeric, ARRAY[2 * :g]) AS amounts,
       array_fill(NULL::text, ARRAY[2 * :g]) AS nulls,
       array_fill('trace'::text, ARRAY[2 * :g]) AS traces,
       array_fill(rpad('{}', 300)::text, ARRAY[2 * :g]) AS payloads  -- the raw bodies intake sends
  FROM generate_series(0, 2 * :g - 1) AS i \gset
-- ids, types, amounts, asset (the default), chain, contract, addresses, user
-- (found by address), fee, hold, expiry, traces, payloads, tx hash
SELECT count(*) FROM record_events(:ids::text[], :types::text[], :amounts::numeric[],
    :nulls::text[], :nulls::text[], :nulls::text[], :addresses::text[], :nulls::bigint[],
    :nulls::numeric[], :nulls::text[], :nulls::bigint[], :traces::text[], :payloads::text[],
    :nulls::text[]);
