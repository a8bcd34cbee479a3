-- walrelay.emit: write one outbox event from SQL, inside the caller's
-- transaction, whatever language the application is written in. Idempotent.
--
--   SELECT walrelay.emit('order', 'o-42', 'OrderCreated', '{"total": 99.90}',
--                        '{"traceparent": "00-..."}');
--
-- The setting walrelay.emit_mode chooses where the event goes:
--   'table' (default, also when unset or empty): a row in public.outbox;
--   'wal': no row, only a transactional logical message with the prefix
--          walrelay.outbox (the tableless mode, DESIGN.md section 3).
-- Set it per database, role or session, e.g.
--   ALTER DATABASE app SET walrelay.emit_mode = 'wal';
-- It returns the event id (a new gen_random_uuid()): the id of the row, or
-- the id field of the message.
--
-- `walrelay migrate --table schema.name` substitutes the table in this file,
-- including in the function body below. There is one walrelay.emit per
-- database: migrating another table points it at that table.
--
-- The function runs with the caller's rights (SECURITY INVOKER): in table
-- mode the caller needs INSERT on the outbox table, nothing more. USAGE on
-- the schema is granted to PUBLIC so that any role may call it; that grants
-- no rights on the table. The message prefix is fixed: wal mode needs
-- walrelay run --message-prefix walrelay.outbox (the tableless outbox is
-- opt-in, off by default). Once EXECUTE on pg_logical_emit_message is
-- revoked from PUBLIC (walrelay doctor warns until it is), wal mode needs
-- the caller to have it, or this function to be SECURITY DEFINER (README).

-- Serialize concurrent `walrelay migrate` runs against one database (this
-- file runs as one transaction there): concurrent CREATE OR REPLACE FUNCTION
-- or CREATE SCHEMA IF NOT EXISTS would otherwise fail.
SELECT pg_advisory_xact_lock(8315672063421710848);
CREATE SCHEMA IF NOT EXISTS walrelay;
GRANT USAGE ON SCHEMA walrelay TO PUBLIC;

CREATE OR REPLACE FUNCTION walrelay.emit(
  aggregate_type text,
  aggregate_id   text,
  event_type     text,
  payload        jsonb,
  headers        jsonb DEFAULT '{}'
) RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $walrelay_emit$
DECLARE
  mode     text := coalesce(nullif(current_setting('walrelay.emit_mode', true), ''), 'table');
  hdrs     jsonb := coalesce(emit.headers, '{}'::jsonb);
  event_id uuid;
BEGIN
  IF emit.aggregate_type IS NULL OR emit.aggregate_id IS NULL OR emit.event_type IS NULL THEN
    RAISE EXCEPTION 'walrelay.emit: aggregate_type, aggregate_id and event_type must not be null'
      USING ERRCODE = 'not_null_violation';
  END IF;
  IF jsonb_typeof(hdrs) <> 'object' THEN
    RAISE EXCEPTION 'walrelay.emit: headers must be a JSON object, not %', jsonb_typeof(hdrs)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  event_id := gen_random_uuid();
  IF mode = 'table' THEN
    -- The id is set here, as the column default would, rather than read
    -- back with RETURNING, which would need SELECT on the table.
    INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)
    VALUES (event_id, emit.aggregate_type, emit.aggregate_id, emit.event_type, emit.payload, hdrs);
  ELSIF mode = 'wal' THEN
    PERFORM pg_logical_emit_message(true, 'walrelay.outbox', jsonb_build_object(
      'id',             event_id::text,
      'aggregate_type', emit.aggregate_type,
      'aggregate_id',   emit.aggregate_id,
      'event_type',     emit.event_type,
      'payload',        emit.payload,
      'headers',        hdrs
    )::text);
  ELSE
    RAISE EXCEPTION 'walrelay.emit: invalid walrelay.emit_mode %', quote_literal(mode)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'walrelay.emit_mode must be ''table'' (the default when unset or empty) or ''wal''.';
  END IF;
  RETURN event_id;
END
$walrelay_emit$;
