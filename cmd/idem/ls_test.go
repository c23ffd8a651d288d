//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/storetest"
)

func randName(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestListStores: on every store the command opens, a record in each
// state (made through the store's own calls) is listed by idem ls with
// its state, counted by idem stats, filtered by -state, and the stale one
// is released by idem unlock -storage-key -force.
func TestListStores(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"mem":  func(t *testing.T) string { return storeSpec(t, "mem") },
		"file": func(t *testing.T) string { return storeSpec(t, "file") },
		"redis": func(t *testing.T) string {
			return "redis://" + testenv.RedisAddr(t) + "/0?prefix=idem-ls-" + randName(t) + ":"
		},
		"redis-cluster": func(t *testing.T) string {
			addrs := testenv.RedisClusterAddrs(t)
			s := "redis-cluster://" + addrs[0] + "?prefix=idem-ls-" + randName(t) + ":"
			for _, a := range addrs[1:] {
				s += "&addr=" + a
			}
			return s
		},
		"dynamodb": func(t *testing.T) string {
			endpoint := testenv.DynamoDBEndpoint(t)
			for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
				"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"} {
				t.Setenv(k, v)
			}
			return "dynamodb://idem_cli_test?create=1&endpoint=" + endpoint + "&prefix=ls" + randName(t) + "%23"
		},
		"postgres": func(t *testing.T) string {
			dsn := testenv.PostgresDSN(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("table", sqlTable(t, "pgx", dsn))
			q.Set("migrate", "1")
			u.RawQuery = q.Encode()
			return u.String()
		},
		"mysql": func(t *testing.T) string {
			dsn := testenv.MySQLDSN(t)
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				t.Fatal(err)
			}
			u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName,
				RawQuery: "migrate=1&table=" + sqlTable(t, "mysql", dsn), User: url.UserPassword(cfg.User, cfg.Passwd)}
			return u.String()
		},
		"sqlite": func(t *testing.T) string {
			return "sqlite://" + t.TempDir() + "/idem.db?migrate=1"
		},
		"nats": func(t *testing.T) string {
			nu, err := url.Parse(testenv.NATSURL(t))
			if err != nil {
				t.Fatal(err)
			}
			bucket := "idem_ls_" + randName(t)
			t.Cleanup(func() {
				nc, err := nats.Connect(nu.String())
				if err != nil {
					return
				}
				defer nc.Close()
				if js, err := jetstream.New(nc); err == nil {
					_ = js.DeleteKeyValue(context.Background(), bucket)
				}
			})
			return "nats://" + nu.Host + "/" + bucket + "?create=1"
		},
	}
	for name, spec := range stores {
		t.Run(name, func(t *testing.T) { listCLI(t, spec(t)) })
	}
}

func listCLI(t *testing.T, spec string) {
	ctx := context.Background()
	st, err := openStore(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	keys := storetest.MakeStates(t, st.Store)
	st.Close()
	time.Sleep(2 * storetest.StaleAfter)
	e := env{}

	iv := invoke(ctx, e, "ls", "-store", spec, "-json")
	if iv.code != 0 {
		t.Fatalf("ls -json: %v", iv)
	}
	got := map[string]storekit.RecordState{}
	for _, line := range strings.Split(strings.TrimSpace(iv.stdout), "\n") {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("ls -json line %q: %v", line, err)
		}
		got[r.StorageKey] = r.State
		if r.StorageKey == keys.Stale && (r.HeartbeatAgeMs == nil || r.Stale == nil || !*r.Stale || r.Attempt != 1 || r.ExpiresAtMs == 0) {
			t.Errorf("the stale record: %s", line)
		}
	}
	for k, want := range keys.ByState() {
		if got[k] != want {
			t.Errorf("ls: %s is %q, want %q", k, got[k], want)
		}
	}
	if _, ok := got[keys.Expired]; ok || len(got) != 4 {
		t.Errorf("ls listed %d records (want 4, not the expired one): %v", len(got), iv)
	}

	iv = invoke(ctx, e, "stats", "-store", spec, "-json")
	var counts map[string]int
	if err := json.Unmarshal([]byte(iv.stdout), &counts); iv.code != 0 || err != nil {
		t.Fatalf("stats -json: %v (%v)", iv, err)
	}
	want := map[string]int{"in_progress": 1, "stale": 1, "failed": 1, "completed": 1, "total": 4}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("stats: %s = %d, want %d (%s)", k, counts[k], n, iv.stdout)
		}
	}

	iv = invoke(ctx, e, "ls", "-store", spec, "-state", "stale")
	if iv.code != 0 || !strings.Contains(iv.stdout, keys.Stale) || strings.Count(iv.stdout, "\n") != 2 {
		t.Fatalf("ls -state stale: %v", iv)
	}
	iv = invoke(ctx, e, "unlock", "-store", spec, "-storage-key", keys.Stale, "-force")
	if iv.code != 0 {
		t.Fatalf("unlock -storage-key -force: %v", iv)
	}
	iv = invoke(ctx, e, "stats", "-store", spec)
	if iv.code != 0 || !strings.Contains(iv.stdout, "stale        0\n") || !strings.Contains(iv.stdout, "total        3\n") {
		t.Errorf("stats after unlock: %v", iv)
	}
	if iv := invoke(ctx, e, "purge", "-store", spec); iv.code != 0 {
		t.Errorf("purge: %v", iv)
	}
}

func TestListUsage(t *testing.T) {
	spec := storeSpec(t, "mem")
	if iv := invoke(context.Background(), env{}, "ls", "-store", spec, "-state", "stuck"); iv.code != exitUsage {
		t.Errorf("ls -state stuck: %v", iv)
	}
	if iv := invoke(context.Background(), env{}, "ls", "-store", spec, "-limit", "-1"); iv.code != exitUsage {
		t.Errorf("ls -limit -1: %v", iv)
	}
	if iv := invoke(context.Background(), env{}, "unlock", "-store", spec, "-storage-key", "idem:x", "-key", "k"); iv.code != exitUsage {
		t.Errorf("unlock with -key and -storage-key: %v", iv)
	}
}
