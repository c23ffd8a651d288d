package sqlstore

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"
)

// cols are the record columns every read returns, in scan order.
const cols = "record_version, claim_nonce, status, attempt_count, payload_hash, result, " +
	"error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner"

// statement names.
type stmtID int

const (
	stClaim stmtID = iota // Postgres: upsert + existing row; MySQL: INSERT IGNORE
	stCAS                 // MySQL: conditional takeover / re-claim
	stGet
	stHeartbeat
	stComplete
	stRelease
	stDelete
	stWatch                 // Postgres: mark a row watched, so that its changes notify
	stCompleteTx            // DoTx's completion inside its transaction (MySQL: hands back the connection id)
	stClaimRet              // MariaDB 10.5+: the claim's insert returning the row it wrote or found
	stClaimProc             // MySQL: CALL of the claim procedure Migrate creates (insert, or the row found)
	stClaimRead             // MySQL: the claim's read of a row it did not insert, with its owner's liveness
	stCompleteClaimTx       // DoTx's one-commit completion: the claim's record written with its outcome (onecommit.go; MySQL: of a key with no row)
	stCompleteClaimTxUpdate // MySQL: DoTx's one-commit completion of a key whose row it replaces
	stClaimGone             // Postgres: the claim, allowed to take over one claim whose owner is gone (owner_gone.sql)
	numStmts
)

// queries holds the text of every statement for one table and dialect.
type queries struct {
	create []string
	// proc creates the MySQL claim procedure (empty on PostgreSQL); Migrate
	// runs it after create.
	proc string
	text [numStmts]string
	// readBack is DoTx's locking read of a record row after a failed
	// commit (not prepared: it is rare).
	readBack string
	// DoTx's one-commit claim (onecommit.go): the claim read before the
	// transaction, and the key lock's wait and release (empty where the
	// dialect has no one-commit claim).
	claimTx, lockKey, unlockKey string
	// SQLite (sqlite.go): the transactions' first statement, the clock's
	// read, and a purge batch.
	liteLock, liteNow, litePurge string
}

// quote returns the quoted, possibly schema-qualified table name and the
// unquoted index name for its expires_at index.
func quote(d Dialect, table string) (qtable, index string) {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	parts := strings.Split(table, ".")
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = q + p + q
	}
	index = parts[len(parts)-1] + "_expires_idx"
	return strings.Join(quoted, "."), q + index + q
}

// claimProcedure returns the quoted name of a MySQL table's claim
// procedure: the table's name (and schema) with "_claim_v3", the version
// of its body, so that a later body gets a name of its own (Migrate
// creates it beside the one processes not yet upgraded call). The body
// reads the clock after the row, so a row released since the statement
// began is judged by a clock at least as late as its release.
func claimProcedure(table string) string {
	p, _ := quote(MySQL, table+"_claim_v3")
	return p
}

// Server clock expressions: the database's time in Unix milliseconds.
//
// PostgreSQL's clock_timestamp() is the time it is evaluated. The claim's
// first read and Get read it once per statement (a materialized CTE, an
// InitPlan); the writes that can wait for a row lock (the claim's conflict
// update, Heartbeat, Complete, Release) evaluate it in the row's WHERE and
// SET, which PostgreSQL evaluates after the lock is held (ON CONFLICT DO
// UPDATE locks the row before its WHERE; an UPDATE that finds its row
// changed by the transaction it waited for evaluates the row again,
// EvalPlanQual), so a write that waited behind another judges the row it
// waited for with the time after the wait.
//
// MySQL's UTC_TIMESTAMP(6) is NOW(6) in UTC: the time the statement
// started, constant within the statement and free of the session time
// zone (the UNIX_TIMESTAMP(NOW(6)) spelling is ambiguous in the hour a
// daylight saving change repeats). mysqlNow is used only by Purge's read.
// mysqlExecNow adds the time elapsed since the statement
// started (SYSDATE(6), the time it is evaluated, minus NOW(6), both in the
// session zone), so a write evaluates it after InnoDB handed it the locked
// row; a statement that writes it in several columns writes it once and
// refers to that column (MySQL evaluates an UPDATE's assignments, and an
// INSERT's values, from left to right, with the values already assigned).
// SYSDATE is not frozen by SET timestamp, and a server started with
// --sysdate-is-now makes it NOW again (then a write that waited judges the
// row with the time it started, as before). A read that judges a row (Get,
// the claim's read) takes mysqlExecNow too, in its select list, which is
// evaluated after the row is read: NOW is fixed when the statement starts,
// before InnoDB takes the read's snapshot, so a Release that commits in
// between is seen by the read with an expires_at later than NOW, and the
// released row would look live (a claim then took it over, or answered
// Existing; TestClaimReadClock).
const (
	pgNow        = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	mysqlNow     = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)`
	mysqlExecNow = `((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) + ` +
		`TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000)`
)

// maxChannelLen is PostgreSQL's limit on a channel name (NAMEDATALEN - 1).
const maxChannelLen = 63

// notifyChannel returns the PostgreSQL channel a table's changes are
// notified on: the table name as given (with its schema, if any) when it
// fits, otherwise its first 46 bytes and 16 hex digits of its SHA-256.
func notifyChannel(table string) string {
	if len(table) <= maxChannelLen {
		return table
	}
	sum := sha256.Sum256([]byte(table))
	return table[:46] + "_" + hex.EncodeToString(sum[:8])
}

// buildQueries returns the statements of table in dialect d, from the
// files under sql/ with the table's names substituted.
func buildQueries(d Dialect, table string) queries {
	switch d {
	case Postgres:
		return postgresQueries(table)
	case MySQL:
		return mysqlQueries(table)
	case SQLite:
		return sqliteQueries(table)
	}
	return queries{}
}

// postgresQueries returns the PostgreSQL statements of table.
func postgresQueries(table string) queries {
	t, idx := quote(Postgres, table)
	r := strings.NewReplacer("{{table}}", t, "{{index}}", idx, "{{cols}}", cols, "{{now}}", pgNow,
		// The channel is letters, digits, underscores and dots
		// (WithTable), so it is a plain string literal.
		"{{channel}}", notifyChannel(table))
	// The claim's two tests of a row: the row in its snapshot by the
	// clock read once, and the locked row, whose expiry is judged by the
	// clock read after the lock and its staleness by the clock read once.
	// gone is what else makes a live claim claimable: nothing (the
	// claim), or being the claim whose owner is gone (owner_gone.sql).
	claimable := func(row, now, staleNow, gone string) string {
		return sqlFile(Postgres, "claimable", strings.NewReplacer("{{row}}", row, "{{now}}", now, "{{stale_now}}", staleNow,
			"{{gone}}", strings.ReplaceAll(gone, "{{row}}", row)))
	}
	claim := func(gone string) string {
		return sqlFile(Postgres, "claim", strings.NewReplacer("{{table}}", t, "{{cols}}", cols, "{{now}}", pgNow,
			"{{claimable_cur}}", claimable("cur", "clk.ms", "clk.ms", gone),
			"{{claimable_locked}}", claimable("r", pgNow, "(SELECT ms FROM clk)", gone)))
	}
	q := commonQueries(Postgres, r)
	q.text[stClaim] = claim("false")
	q.text[stClaimGone] = claim(sqlFile(Postgres, "owner_gone", strings.NewReplacer("{{owner_class}}", strconv.Itoa(pgOwnerClass))))
	q.text[stCompleteTx] = q.text[stComplete]
	q.text[stWatch] = sqlFile(Postgres, "watch", r)
	q.claimTx = sqlFile(Postgres, "claim_tx", r)
	q.text[stCompleteClaimTx] = sqlFile(Postgres, "complete_claim_tx", r)
	q.lockKey = "SELECT pg_advisory_lock(hashtextextended($1, 0))"
	q.unlockKey = "SELECT pg_advisory_unlock(hashtextextended($1, 0))"
	return q
}

// mysqlQueries returns the MySQL statements of table, and the claim
// procedure Migrate creates.
func mysqlQueries(table string) queries {
	t, idx := quote(MySQL, table)
	gone := sqlFile(MySQL, "owner_gone", strings.NewReplacer("{{owner_lock}}", mysqlOwnerLock))
	goneProc := strings.Replace(strings.Replace(gone, "?", "p_nonce", 1), "?", "p_owner", 1)
	r := strings.NewReplacer("{{table}}", t, "{{index}}", idx, "{{cols}}", cols, "{{now}}", mysqlExecNow,
		"{{proc}}", claimProcedure(table), "{{owner_gone}}", gone, "{{owner_gone_proc}}", goneProc)
	q := commonQueries(MySQL, r)
	q.proc = sqlFile(MySQL, "claim_procedure", r)
	q.text[stClaim] = sqlFile(MySQL, "claim", r)
	q.text[stClaimRet] = sqlFile(MySQL, "claim_returning", r)
	q.text[stClaimProc] = sqlFile(MySQL, "claim_call", r)
	q.text[stClaimRead] = sqlFile(MySQL, "claim_read", r)
	q.text[stCAS] = sqlFile(MySQL, "cas", r)
	q.text[stCompleteTx] = sqlFile(MySQL, "complete_tx", r)
	q.claimTx = sqlFile(MySQL, "claim_tx", r)
	q.text[stCompleteClaimTx] = sqlFile(MySQL, "claim_tx_insert", r)
	q.text[stCompleteClaimTxUpdate] = sqlFile(MySQL, "claim_tx_update", r)
	// Literal names (keyLock.mysqlText): no parameters, no prepared
	// statement. GET_LOCK's timeout is a year: the wait ends with the
	// holder's session or with the caller's context (the driver closes
	// the connection).
	q.lockKey = "DO GET_LOCK({{lock}}, 31536000)"
	q.unlockKey = "DO RELEASE_LOCK({{lock}})"
	return q
}

// commonQueries returns the statements every dialect has a file of its
// own for: the schema, get, heartbeat, complete, release, delete and the
// read-back, with r's substitutions made.
func commonQueries(d Dialect, r *strings.Replacer) queries {
	var q queries
	q.create = sqlStatements(d, "create", r)
	for st, name := range map[stmtID]string{stGet: "get", stHeartbeat: "heartbeat", stComplete: "complete", stRelease: "release", stDelete: "delete"} {
		q.text[st] = sqlFile(d, name, r)
	}
	q.readBack = sqlFile(d, "read_back", r)
	return q
}

// sqlFiles holds the statements of each dialect, one file per statement
// (create.sql: the schema, several statements), under sql/<dialect>/.
// A file's lines that start with "--" are comments, dropped before it is
// sent; {{name}} in the rest is a name the dialect's function fills in:
// {{table}} the quoted, possibly schema-qualified table, {{index}} its
// expiry index, {{cols}} the record columns (cols), {{now}} the server's
// clock expression (pgNow, mysqlExecNow, liteNow).
//
//go:embed sql
var sqlFiles embed.FS

// sqlFile returns the statement in the file sql/<d>/<name>.sql without
// its comments and its final semicolon, with r's substitutions made.
func sqlFile(d Dialect, name string, r *strings.Replacer) string {
	b, err := sqlFiles.ReadFile("sql/" + d.String() + "/" + name + ".sql")
	if err != nil {
		panic("sqlstore: " + err.Error()) // the files are embedded: a test finds a missing one
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	text := strings.TrimSuffix(strings.TrimSpace(strings.Join(lines, "\n")), ";")
	return r.Replace(text)
}

// sqlStatements returns the statements of the file sql/<d>/<name>.sql,
// each ended by a semicolon at the end of a line.
func sqlStatements(d Dialect, name string, r *strings.Replacer) []string {
	var stmts []string
	for _, s := range strings.Split(sqlFile(d, name, r), ";\n") {
		stmts = append(stmts, strings.TrimSpace(s))
	}
	return stmts
}
