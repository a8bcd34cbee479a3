-- The time column of an outbox table created by someone else, such as
-- Debezium's outbox table (id, aggregatetype, aggregateid, type, payload):
-- walrelay status, replay and prune select rows by created_at. Idempotent:
-- a table that has the column (every table 001 created) is left alone,
-- without taking a lock. On Postgres 11+ adding a column with this default
-- rewrites nothing (the rows already there read the time of the change);
-- Debezium's outbox router ignores the column.
DO $walrelay_time_column$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = 'public.outbox'::regclass AND attname = 'created_at'
                    AND attnum > 0 AND NOT attisdropped) THEN
    ALTER TABLE public.outbox ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
  END IF;
END
$walrelay_time_column$;
