package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem/storekit"

	_ "github.com/go-sql-driver/mysql"
	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/sqlstore"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// soakConfig is the soak table's load: fresh keys at rate per second, each
// with a TTL of ttl, on a store that keeps records retention past their
// expiry and cleans up about every cleanup, for run per store, a row every
// interval.
type soakConfig struct {
	run, interval, ttl, retention, cleanup time.Duration
	rate                                   int
}

// soakStore is one store under the soak load: the store, what it holds
// now (a count and bytes, each named), and how to close it.
type soakStore struct {
	name      string
	store     storekit.Store
	size      func(ctx context.Context) (count int64, bytes int64, err error)
	countName string
	bytesName string
	close     func() error
}

// soakStores opens the stores the soak table runs: memory and files always,
// PostgreSQL, MariaDB and NATS when their address is given.
func soakStores(ctx context.Context, c soakConfig, dir, pgDSN, mysqlDSN, natsURL string) ([]soakStore, error) {
	var out []soakStore
	mem, err := memstore.New(memstore.WithRetention(c.retention), memstore.WithCleanup(c.cleanup))
	if err != nil {
		return nil, err
	}
	out = append(out, soakStore{name: "memstore", store: mem, countName: "records", bytesName: "heap",
		size: func(context.Context) (int64, int64, error) {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return int64(mem.Len()), int64(ms.HeapInuse), nil
		}, close: mem.Close})

	fdir := filepath.Join(dir, "soak-files")
	fst, err := filestore.New(fdir, filestore.WithRetention(c.retention), filestore.WithCleanup(c.cleanup))
	if err != nil {
		return nil, err
	}
	out = append(out, soakStore{name: "filestore", store: fst, countName: "files", bytesName: "bytes (files + dirs)",
		size: func(context.Context) (int64, int64, error) { return dirSize(fdir) }, close: fst.Close})

	for _, d := range []struct {
		name, driver, dsn string
		dialect           sqlstore.Dialect
		sizeQuery         string
	}{
		{"postgres", "pgx", pgDSN, sqlstore.Postgres, `SELECT pg_total_relation_size('idem_soak')`},
		{"mariadb", "mysql", mysqlDSN, sqlstore.MySQL, `SELECT data_length + index_length + data_free FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'idem_soak'`},
	} {
		if d.dsn == "" {
			continue
		}
		db, err := sql.Open(d.driver, d.dsn)
		if err != nil {
			return nil, err
		}
		if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS idem_soak`); err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		st, err := sqlstore.New(db, d.dialect, sqlstore.WithTable("idem_soak"),
			sqlstore.WithRetention(c.retention), sqlstore.WithCleanup(c.cleanup))
		if err != nil {
			return nil, err
		}
		if err := st.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		q, name := d.sizeQuery, d.name
		out = append(out, soakStore{name: d.name, store: st, countName: "rows", bytesName: "table bytes",
			size: func(ctx context.Context) (n, b int64, err error) {
				if err := db.QueryRowContext(ctx, `SELECT count(*) FROM idem_soak`).Scan(&n); err != nil {
					return 0, 0, err
				}
				if name == "mariadb" {
					// information_schema's sizes are the optimizer's
					// statistics: refresh them first.
					if _, err := db.ExecContext(ctx, `ANALYZE TABLE idem_soak`); err != nil {
						return 0, 0, err
					}
				}
				err = db.QueryRowContext(ctx, q).Scan(&b)
				return n, b, err
			},
			close: func() error { return errors.Join(st.Close(), db.Close()) }})
	}

	if natsURL != "" {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		_ = js.DeleteKeyValue(ctx, "idem_soak")
		kv, err := natsstore.CreateBucket(ctx, js, "idem_soak")
		if err != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		st, err := natsstore.New(kv, natsstore.WithRetention(c.retention), natsstore.WithCleanup(c.cleanup))
		if err != nil {
			return nil, err
		}
		out = append(out, soakStore{name: "natsstore", store: st, countName: "messages", bytesName: "stream bytes",
			size: func(ctx context.Context) (int64, int64, error) {
				s, err := js.Stream(ctx, "KV_idem_soak")
				if err != nil {
					return 0, 0, err
				}
				info, err := s.Info(ctx)
				if err != nil {
					return 0, 0, err
				}
				return int64(info.State.Msgs), int64(info.State.Bytes), nil
			},
			close: func() error { err := st.Close(); nc.Close(); return err }})
	}
	return out, nil
}

// dirSize counts the regular files under dir and adds up their sizes and
// the sizes of the directories themselves (a directory that once held
// many entries keeps its size on some file systems).
func dirSize(dir string) (files, bytes int64, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by the clean-up meanwhile
			}
			return err
		}
		if info.Mode().IsRegular() {
			files++
		}
		bytes += info.Size()
		return nil
	})
	return files, bytes, err
}

// soakTable runs the soak load on each store and prints a row per interval:
// the store's size and the p50, p99 and worst of the fresh calls made in
// that interval. The plateau to expect is rate × (TTL + retention +
// clean-up interval) records.
func soakTable(ctx context.Context, w io.Writer, c soakConfig, stores []soakStore) error {
	fmt.Fprintf(w, "\nSoak: fresh keys at %d/s, TTL %v, retention %v, clean-up about every %v, %v per store;\n",
		c.rate, c.ttl, c.retention, c.cleanup, c.run)
	fmt.Fprintf(w, "held records should plateau near rate × (TTL + retention + clean-up interval) = %d\n",
		int(float64(c.rate)*(c.ttl+c.retention+c.cleanup).Seconds()))
	for _, s := range stores {
		if err := soakOne(ctx, w, c, s); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

func soakOne(ctx context.Context, out io.Writer, c soakConfig, s soakStore) error {
	defer s.close()
	g, err := idem.New[int](s.store, idem.WithTTL(c.ttl))
	if err != nil {
		return err
	}
	_, base, err := s.size(ctx)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\n%s\t%s\t%s\tcalls\tp50\tp99\tworst\terrors\tnot started\t\n", s.name+" at", s.countName, s.bytesName)
	fmt.Fprintf(w, "0s\t0\t%s\t\t\t\t\t\t\t\n", human(base))

	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      atomic.Int64
		skipped   atomic.Int64
		seq       atomic.Int64
		wg        sync.WaitGroup
	)
	runCtx, cancel := context.WithTimeout(ctx, c.run)
	defer cancel()
	tick := time.NewTicker(time.Second / time.Duration(c.rate))
	defer tick.Stop()
	sem := make(chan struct{}, 64)
	go func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				skipped.Add(1) // 64 calls already in flight: the store is not keeping up
				continue
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				key := "soak-" + s.name + "-" + strconv.FormatInt(seq.Add(1), 36)
				start := time.Now()
				_, err := g.Do(ctx, key, func(context.Context) (int, error) { return 1, nil })
				d := time.Since(start)
				if err != nil {
					errs.Add(1)
					return
				}
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}()
		}
	}()

	start := time.Now()
	rows := time.NewTicker(c.interval)
	defer rows.Stop()
	for done := false; !done; {
		select {
		case <-runCtx.Done():
			done = true
		case <-rows.C:
		}
		if done {
			break // the last window is cut short: the idle row follows
		}
		mu.Lock()
		lat := latencies
		latencies = nil
		mu.Unlock()
		n, b, err := s.size(ctx)
		if err != nil {
			return err
		}
		slices.Sort(lat)
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t\n", time.Since(start).Round(time.Second), n, human(b),
			len(lat), pct(lat, 0.50), pct(lat, 0.99), pct(lat, 1), errs.Swap(0), skipped.Swap(0))
	}
	wg.Wait()
	// No more calls: everything expires and is cleaned up.
	idle := c.ttl + c.retention + 2*c.cleanup
	time.Sleep(idle)
	n, b, err := s.size(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "+%v idle\t%d\t%s\t\t\t\t\t\t\t\n", idle.Round(time.Second), n, human(b))
	return w.Flush()
}

func pct(sorted []time.Duration, p float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	i := int(p*float64(len(sorted))) - 1
	i = max(0, min(i, len(sorted)-1))
	d := sorted[i]
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

func human(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return strconv.FormatInt(b, 10) + " B"
}

// soakSelected reports whether -soak-stores (a comma-separated list of
// store names, or "all") selects a store.
func soakSelected(list string) func(string) bool {
	if list == "" || list == "all" {
		return func(string) bool { return true }
	}
	set := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		set[strings.TrimSpace(s)] = true
	}
	return func(name string) bool { return set[name] }
}
