-- Optional: the outbox table partitioned by day, for users who keep rows and
-- drop whole days instead of deleting rows. Not applied by default; apply it
-- instead of 001_outbox.sql, before the default migrations (001 then finds
-- the table and leaves it as it is). Idempotent.
--
-- Same columns as 001_outbox.sql; the primary key must include the partition
-- key, so it is (id, created_at). Daily partitions cover UTC days and are
-- named <table>_pYYYYMMDD beside the table; rows outside every daily
-- partition go to <table>_default.
--
-- Logical replication: a publication must have publish_via_partition_root =
-- true, or inserts are published under the daily partition's name instead of
-- the table's.
--
-- Keep partitions ahead of time, e.g. daily from cron or pg_cron:
--   SELECT walrelay.outbox_create_partitions(3);    -- today .. today+3
--   SELECT walrelay.outbox_drop_partitions('7 days'); -- or `walrelay prune`
-- The functions work on the table this file was applied for (resolved when
-- called) unless given another partitioned table as their second argument.
-- They only touch partitions named <table>_pYYYYMMDD.

-- Serialize concurrent `walrelay migrate` runs against one database (this
-- file runs as one transaction there): concurrent CREATE OR REPLACE FUNCTION
-- or CREATE SCHEMA IF NOT EXISTS would otherwise fail.
SELECT pg_advisory_xact_lock(8315672063421710848);
CREATE SCHEMA IF NOT EXISTS walrelay;
GRANT USAGE ON SCHEMA walrelay TO PUBLIC;

CREATE TABLE IF NOT EXISTS public.outbox (
  id             uuid        NOT NULL DEFAULT gen_random_uuid(),
  aggregate_type text        NOT NULL,
  aggregate_id   text        NOT NULL,
  event_type     text        NOT NULL,
  payload        jsonb,
  headers        jsonb       NOT NULL DEFAULT '{}',
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);

-- outbox_create_partitions creates the default partition when missing and
-- the daily partitions for today .. today + days_ahead (UTC) that do not
-- exist yet; it returns how many daily partitions it created. A day whose
-- rows already sit in the default partition is skipped with a warning (its
-- partition cannot be attached over them); `walrelay prune` removes such
-- rows once they are old enough.
CREATE OR REPLACE FUNCTION walrelay.outbox_create_partitions(
  days_ahead int DEFAULT 3,
  tbl regclass DEFAULT $walrelay_tbl$public.outbox$walrelay_tbl$::text::regclass
) RETURNS int
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $walrelay_fn$
DECLARE
  nsp      name;
  rel      name;
  kind     "char";
  def      regclass;
  day      date;
  lo       timestamptz;
  hi       timestamptz;
  part     text;
  taken    boolean;
  created  int := 0;
BEGIN
  IF days_ahead IS NULL OR days_ahead < 0 THEN
    RAISE EXCEPTION 'walrelay.outbox_create_partitions: days_ahead must be 0 or more, not %', days_ahead
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT n.nspname, c.relname, c.relkind INTO nsp, rel, kind
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE c.oid = tbl;
  IF kind IS DISTINCT FROM 'p' THEN
    RAISE EXCEPTION 'walrelay.outbox_create_partitions: % is not a partitioned table', tbl
      USING ERRCODE = 'wrong_object_type';
  END IF;
  IF octet_length(rel) > 53 THEN
    RAISE EXCEPTION 'walrelay.outbox_create_partitions: table name % is too long for daily partition names (at most 53 bytes)', rel
      USING ERRCODE = 'name_too_long';
  END IF;

  SELECT nullif(p.partdefid, 0)::regclass INTO def FROM pg_partitioned_table p WHERE p.partrelid = tbl;
  IF def IS NULL THEN
    EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s DEFAULT', nsp, rel || '_default', tbl);
    SELECT nullif(p.partdefid, 0)::regclass INTO def FROM pg_partitioned_table p WHERE p.partrelid = tbl;
  END IF;

  FOR day IN
    SELECT d::date FROM generate_series((now() AT TIME ZONE 'UTC')::date,
                                        (now() AT TIME ZONE 'UTC')::date + days_ahead,
                                        interval '1 day') AS d
  LOOP
    part := rel || '_p' || to_char(day, 'YYYYMMDD');
    CONTINUE WHEN to_regclass(format('%I.%I', nsp, part)) IS NOT NULL;
    lo := day::timestamp AT TIME ZONE 'UTC';
    hi := (day + 1)::timestamp AT TIME ZONE 'UTC';
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE created_at >= $1 AND created_at < $2)', def)
      INTO taken USING lo, hi;
    IF taken THEN
      RAISE WARNING 'walrelay.outbox_create_partitions: not creating %.%: the default partition % holds rows of that day', nsp, part, def;
      CONTINUE;
    END IF;
    EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)', nsp, part, tbl, lo, hi);
    created := created + 1;
  END LOOP;
  RETURN created;
END
$walrelay_fn$;

-- outbox_expired_partitions lists the daily partitions of tbl (named
-- <table>_pYYYYMMDD) whose day ended before now() - older_than, oldest
-- first. Other partitions are never listed.
CREATE OR REPLACE FUNCTION walrelay.outbox_expired_partitions(
  older_than interval,
  tbl regclass DEFAULT $walrelay_tbl$public.outbox$walrelay_tbl$::text::regclass
) RETURNS TABLE (partition regclass, upper_bound timestamptz)
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $walrelay_fn$
  SELECT p.partition, p.upper_bound
    FROM (
      SELECT c.oid::regclass AS partition,
             (to_date(substr(c.relname, length(t.relname) + 3), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' AS upper_bound
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class t ON t.oid = i.inhparent
       WHERE i.inhparent = tbl
         AND c.relkind = 'r'
         AND c.relnamespace = t.relnamespace
         AND left(c.relname, length(t.relname) + 2) = t.relname || '_p'
         AND substr(c.relname, length(t.relname) + 3) ~ '^[0-9]{8}$'
    ) p
   WHERE p.upper_bound <= now() - older_than
   ORDER BY p.upper_bound
$walrelay_fn$;

-- outbox_drop_partitions drops the partitions outbox_expired_partitions
-- lists and returns how many it dropped. Dropping a partition briefly takes
-- an exclusive lock on the table: it waits for open transactions that
-- touched the table, and inserts wait for it.
CREATE OR REPLACE FUNCTION walrelay.outbox_drop_partitions(
  older_than interval,
  tbl regclass DEFAULT $walrelay_tbl$public.outbox$walrelay_tbl$::text::regclass
) RETURNS int
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $walrelay_fn$
DECLARE
  part    regclass;
  dropped int := 0;
BEGIN
  IF older_than IS NULL THEN
    RAISE EXCEPTION 'walrelay.outbox_drop_partitions: older_than must not be null'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOR part IN SELECT e.partition FROM walrelay.outbox_expired_partitions(older_than, tbl) e LOOP
    EXECUTE format('DROP TABLE %s', part);
    dropped := dropped + 1;
  END LOOP;
  RETURN dropped;
END
$walrelay_fn$;

SELECT walrelay.outbox_create_partitions();
