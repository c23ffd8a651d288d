# make run   runs the example programs (file stores and a SQLite file in temporary directories; no server)
# make test  starts the backends and runs every check (scripts/test.sh)
# make bench prints the cost tables: the embedded stores' (idem-bench), then, with the
#            backends started as make test starts them, Redis's, PostgreSQL's and DynamoDB's

.PHONY: run test bench

run:
	go run ./examples/invoice
	go run ./examples/checkout

test:
	scripts/test.sh

bench:
	go run ./cmd/idem-bench
	go test -run '^$$' -bench . -benchtime 2000x .
	eval "$$(scripts/backends.sh)" && \
	  go run ./stores/redisstore/internal/benchtable && \
	  go run ./stores/sqlstore/internal/benchtable && \
	  go run ./stores/dynamostore/internal/benchtable
