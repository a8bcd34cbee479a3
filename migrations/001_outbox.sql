-- The default outbox table (DESIGN.md section 3). Idempotent.
-- `walrelay migrate --table schema.name` applies this file with public.outbox
-- replaced by the given table; `psql -f` applies it as written.
CREATE TABLE IF NOT EXISTS public.outbox (
  id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregate_type text        NOT NULL,
  aggregate_id   text        NOT NULL,
  event_type     text        NOT NULL,
  payload        jsonb,
  headers        jsonb       NOT NULL DEFAULT '{}',
  created_at     timestamptz NOT NULL DEFAULT now()
);
