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
