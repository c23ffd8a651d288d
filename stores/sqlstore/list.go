package sqlstore

import (
	"context"
	"fmt"
	"iter"
	"strconv"

	"github.com/idem-go/idem/storekit"
)

var _ storekit.Lister = (*Store)(nil)

// listPage is how many rows one page of Records reads.
const listPage = 1000

// listQuery returns the statement of one page of Records: the live rows
// after a key, in primary-key order, and the database's now (SQLite's is
// the default case).
func (s *Store) listQuery() string {
	t, _ := quote(s.dialect, s.cfg.table)
	lim := strconv.Itoa(listPage)
	switch s.dialect {
	case Postgres:
		return `SELECT key_hash, ` + cols + `, n.ms FROM ` + t + `, (SELECT ` + pgNow + ` AS ms) n` +
			` WHERE key_hash > $1 AND expires_at > n.ms ORDER BY key_hash LIMIT ` + lim
	case MySQL:
		return `SELECT key_hash, ` + cols + `, n.ms FROM ` + t + `, (SELECT ` + mysqlNow + ` AS ms) n` +
			` WHERE key_hash > ? AND expires_at > n.ms ORDER BY key_hash LIMIT ` + lim
	default:
		return `SELECT key_hash, ` + cols + `, n.ms FROM ` + t + `, (SELECT ` + liteNow + ` AS ms) n` +
			` WHERE key_hash > ?1 AND expires_at > n.ms ORDER BY key_hash LIMIT ` + lim
	}
}

// Records implements storekit.Lister. It reads the table, every tenant and
// scope, in pages of 1000 rows in primary-key order, each page one plain
// SELECT after the last key of the one before (keyset pagination: every
// page is an index range, however far the listing has gone). A plain
// SELECT takes no row lock (a consistent read on InnoDB, MVCC on
// PostgreSQL), so claims go on while it runs; memory holds one page. Rows
// whose expiry has passed on the database's clock are skipped.
func (s *Store) Records(ctx context.Context) iter.Seq2[*storekit.Record, error] {
	return func(yield func(*storekit.Record, error) bool) {
		q := s.listQuery()
		after := ""
		for {
			page, err := s.listPage(ctx, q, after)
			if err != nil {
				yield(nil, storeErr("list", err))
				return
			}
			for _, p := range page {
				if p.err != nil {
					if !yield(nil, p.err) {
						return
					}
					continue
				}
				if !yield(p.rec, nil) {
					return
				}
			}
			if len(page) < listPage {
				return
			}
			after = page[len(page)-1].key
		}
	}
}

type listed struct {
	key string
	rec *storekit.Record
	err error
}

// listPage reads the page of rows after key.
func (s *Store) listPage(ctx context.Context, q, after string) ([]listed, error) {
	var page []listed
	err := retryTransient(ctx, func() error {
		page = page[:0]
		rows, err := s.db.QueryContext(ctx, q, after)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				key string
				raw rawRecord
				now int64
			)
			if err := rows.Scan(append(append([]any{&key}, raw.dest()...), &now)...); err != nil {
				return err
			}
			rec, err := raw.record(key)
			page = append(page, listed{key: key, rec: rec, err: err})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read the rows after %q: %w", after, err)
	}
	return page, nil
}
