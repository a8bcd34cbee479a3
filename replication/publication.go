package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

func (c *Conn) ensurePublication(ctx context.Context) error {
	pub, err := c.lit(c.cfg.Publication)
	if err != nil {
		return err
	}
	rows, err := c.query(ctx, "SELECT 1 FROM pg_publication WHERE pubname = "+pub)
	if err != nil {
		return fmt.Errorf("look up publication: %w", err)
	}
	ident := pgx.Identifier{c.cfg.Publication}.Sanitize()
	if len(rows) == 0 {
		if c.Standby {
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q does not exist on this standby", c.cfg.Publication),
				Fix: fmt.Sprintf("create it on the primary (a standby is read-only; it replicates the publication): CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true);", ident, c.quotedTables()), Err: ErrMissing}
		}
		if c.cfg.NoCreatePublication {
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q does not exist", c.cfg.Publication),
				Fix: fmt.Sprintf("run CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true);", ident, c.quotedTables()), Err: ErrMissing}
		}
		if err := c.checkCanCreatePublication(ctx, ident); err != nil {
			return err
		}
		// publish_via_partition_root: inserts into a partitioned outbox arrive
		// under the outbox's name, not its daily partitions'. A tableless
		// outbox needs no table: logical messages are not filtered.
		sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true)", ident, c.quotedTables())
		if len(c.tables) == 0 {
			sql = fmt.Sprintf("CREATE PUBLICATION %s WITH (publish = 'insert')", ident)
		}
		if _, err := c.query(ctx, sql); err != nil {
			return fmt.Errorf("create publication %s: %w", c.cfg.Publication, err)
		}
		c.CreatedPublication = true
		return nil
	}
	return c.checkPublication(ctx, pub, ident)
}

// checkCanCreatePublication reports why the role could not create the
// publication: CREATE PUBLICATION needs the CREATE privilege on the database
// and ownership of each table (superusers have both).
func (c *Conn) checkCanCreatePublication(ctx context.Context, ident string) error {
	rows, err := c.query(ctx, "SELECT current_user, current_database(), has_database_privilege(current_database(), 'CREATE')")
	if err != nil {
		return fmt.Errorf("check publication privileges: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 3 {
		return errors.New("check publication privileges: unexpected result")
	}
	user, db := string(rows[0][0]), string(rows[0][1])
	var missing []string
	var grants []string
	if string(rows[0][2]) != "t" {
		missing = append(missing, fmt.Sprintf("the CREATE privilege on database %q", db))
		grants = append(grants, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s;", pgx.Identifier{db}.Sanitize(), pgx.Identifier{user}.Sanitize()))
	}
	owners := map[string]bool{}
	for _, t := range c.tables {
		lt, err := c.lit(t.Quoted())
		if err != nil {
			return err
		}
		rows, err := c.query(ctx, "SELECT pg_get_userbyid(relowner), pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = to_regclass("+lt+")")
		if err != nil {
			return fmt.Errorf("check owner of %s: %w", t, err)
		}
		if len(rows) == 1 && len(rows[0]) == 2 && string(rows[0][1]) != "t" {
			owner := string(rows[0][0])
			missing = append(missing, fmt.Sprintf("ownership of table %s (owner %q)", t, owner))
			owners[owner] = true
		}
	}
	if len(missing) == 0 {
		return nil
	}
	create := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true);", ident, c.quotedTables())
	if len(c.tables) == 0 {
		create = fmt.Sprintf("CREATE PUBLICATION %s WITH (publish = 'insert');", ident)
	}
	// The owner creates it (Postgres lets only a table's owner publish it);
	// the grants are only what this role would need to create it itself.
	who := "a superuser"
	if len(owners) == 1 {
		for o := range owners {
			who = fmt.Sprintf("the table owner %q or a superuser", o)
		}
	}
	fix := fmt.Sprintf("have %s run %s (walrelay then uses it)", who, create)
	if len(owners) == 0 {
		fix = "have a superuser or the database owner run " + strings.Join(grants, " ") + " or create the publication: " + create
	}
	return &PrereqError{Check: "publication", Problem: fmt.Sprintf("role %q cannot create publication %q: it lacks %s", user, c.cfg.Publication, strings.Join(missing, " and ")),
		Fix: fix}
}

// checkPublication reports an existing publication that does not carry
// every outbox insert whole: inserts not published, a partitioned outbox
// published under its partitions' names, a table missing, a row filter, or
// a column list without a mapped column (each would drop events silently).
func (c *Conn) checkPublication(ctx context.Context, pub, ident string) error {
	if len(c.tables) == 0 {
		return nil // logical messages are not filtered by publications
	}
	rows, err := c.query(ctx, "SELECT pubinsert, pubviaroot FROM pg_publication WHERE pubname = "+pub)
	if err != nil {
		return fmt.Errorf("look up publication: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 2 {
		return errors.New("look up publication: unexpected result")
	}
	name := c.cfg.Publication
	if string(rows[0][0]) != "t" {
		return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q does not publish inserts, so no outbox event reaches walrelay", name),
			Fix: fmt.Sprintf("run ALTER PUBLICATION %s SET (publish = 'insert'); (keep any other operations it must publish in the list)", ident)}
	}
	viaRoot := string(rows[0][1]) == "t"
	readd := func(t TableName) string {
		return fmt.Sprintf("run BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s; COMMIT;", ident, t.Quoted(), ident, t.Quoted())
	}
	for _, t := range c.tables {
		lt, err := c.lit(t.Quoted())
		if err != nil {
			return err
		}
		filter := "NULL, NULL"
		if c.version >= 150000 {
			filter = "array_to_json(pt.attnames)::text, pt.rowfilter"
		}
		rows, err := c.query(ctx, "SELECT c.relkind::text, pt.tablename IS NOT NULL, "+filter+", "+
			"(SELECT array_to_json(array_agg(a.attname))::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) "+
			"FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "+
			"LEFT JOIN pg_publication_tables pt ON pt.pubname = "+pub+" AND pt.schemaname = n.nspname AND pt.tablename = c.relname "+
			"WHERE c.oid = to_regclass("+lt+")")
		if err != nil {
			return fmt.Errorf("check publication %s for table %s: %w", name, t, err)
		}
		if len(rows) == 0 {
			continue // a missing table is the table check's to report
		}
		if len(rows) != 1 || len(rows[0]) != 5 {
			return fmt.Errorf("check publication %s for table %s: unexpected result", name, t)
		}
		r := rows[0]
		relkind, included, published, rowFilter := string(r[0]), string(r[1]) == "t", r[2], r[3]
		switch {
		case relkind == "p" && !viaRoot:
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q sends inserts into the partitioned table %s under its partitions' names, which are not outbox tables", name, t),
				Fix: fmt.Sprintf("run ALTER PUBLICATION %s SET (publish_via_partition_root = true);", ident)}
		case !included:
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q does not include table %s", name, t),
				Fix: fmt.Sprintf("run ALTER PUBLICATION %s ADD TABLE %s;", ident, t.Quoted())}
		case rowFilter != nil:
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q publishes %s with a row filter (WHERE %s): events of other rows would be skipped", name, t, rowFilter),
				Fix: readd(t) + " (adds it back without the WHERE clause)"}
		}
		if published == nil {
			continue
		}
		var pubCols, tableCols []string
		if err := json.Unmarshal(published, &pubCols); err != nil {
			return fmt.Errorf("check publication %s for table %s: column list: %w", name, t, err)
		}
		if len(r[4]) > 0 {
			if err := json.Unmarshal(r[4], &tableCols); err != nil {
				return fmt.Errorf("check publication %s for table %s: columns: %w", name, t, err)
			}
		}
		for _, col := range c.cfg.Columns[t.String()] {
			// A mapped column the table lacks is the decoder's to report
			// (missing column); here only one the column list leaves out.
			if slices.Contains(tableCols, col) && !slices.Contains(pubCols, col) {
				return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q publishes %s with a column list that leaves out the mapped column %q", name, t, col),
					Fix: readd(t) + " (adds it back with all its columns)"}
			}
		}
	}
	return nil
}

// publicationNamesArg is pgoutput's publication_names option for one
// publication. pgoutput splits the value as a list of SQL identifiers, which
// folds unquoted names to lower case and splits at commas, so the name is
// quoted as an identifier, then as a string literal.
func publicationNamesArg(pub string) string {
	return "publication_names '" + strings.ReplaceAll(pgx.Identifier{pub}.Sanitize(), "'", "''") + "'"
}

func (c *Conn) quotedTables() string {
	q := make([]string, len(c.tables))
	for i, t := range c.tables {
		q[i] = t.Quoted()
	}
	return strings.Join(q, ", ")
}
