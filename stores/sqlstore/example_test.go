package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// A Guard over PostgreSQL: the table is created once, and a charge runs at
// most once per idempotency key.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable("payments_idempotency"))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	g, err := idem.New[string](store)
	if err != nil {
		log.Fatal(err)
	}
	id, err := g.Do(ctx, "charge-order-1234", func(ctx context.Context) (string, error) {
		return "ch_1", nil // the side effect
	})
	fmt.Println(id, err)
}

// DoTx: the order row and the call's outcome commit in one transaction. A
// crash before the commit leaves neither (a retry inserts the row), a
// crash after it leaves both (a retry replays the order id).
func ExampleDoTx() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.Postgres)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	g, err := idem.New[int64](store)
	if err != nil {
		log.Fatal(err)
	}
	id, err := sqlstore.DoTx(ctx, g, "order-1234", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		var id int64
		err := tx.QueryRowContext(ctx,
			`INSERT INTO orders (customer, total) VALUES ($1, $2) RETURNING id`, "c-42", 1999).Scan(&id)
		return id, err
	})
	fmt.Println(id, err)
}

// StepTx: a checkout that calls a payment provider and writes its order
// row exactly once, without holding a transaction open while the
// provider answers. The charge is a Step (at most once per attempt that
// dies inside it, under one StepKey for the provider to dedupe); the order
// row and the step's record commit in one transaction, so a crash before
// the commit leaves neither and a retry replays the order id after it.
func ExampleStepTx() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.Postgres)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	g, err := idem.New[int64](store)
	if err != nil {
		log.Fatal(err)
	}
	id, err := g.Do(ctx, "checkout-1234", func(ctx context.Context) (int64, error) {
		charge, err := idem.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			key, _ := idem.StepKey(ctx) // the provider's Idempotency-Key
			return "ch_" + key[:8], nil // the provider's call
		})
		if err != nil {
			return 0, err
		}
		return sqlstore.StepTx(ctx, "order", func(ctx context.Context, tx *sql.Tx) (int64, error) {
			var id int64
			err := tx.QueryRowContext(ctx,
				`INSERT INTO orders (customer, charge) VALUES ($1, $2) RETURNING id`, "c-42", charge).Scan(&id)
			return id, err
		})
	})
	fmt.Println(id, err)
}
