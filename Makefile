# make run        runs the example programs (file stores and a SQLite file in temporary directories; no server)
# make test       starts the backends and runs every check (scripts/test.sh); it needs root (it installs
#                 Debian packages, Java for DynamoDB Local and npm packages when they are missing) and
#                 takes about 25 minutes
# make test-short the checks that need no server and no root: gofmt, go vet, and go test -short of every
#                 module's packages with the IDEM_* variables unset, so every test that needs a backend
#                 skips itself
# make bench      prints the cost tables: the embedded stores' (idem-bench), then, with the
#                 backends started as make test starts them, Redis's, PostgreSQL's and DynamoDB's

.PHONY: run test test-short bench

run:
	go run ./examples/invoice
	go run ./examples/checkout

test:
	scripts/test.sh

test-short:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "not gofmt'ed:"; echo "$$unformatted"; exit 1; fi
	go vet $$(go list -m -f '{{.Dir}}/...')
	unset $$(env | sed -n 's/^\(IDEM_[A-Za-z0-9_]*\)=.*/\1/p'); \
	  go test -short -count=1 -timeout 15m $$(go list -m -f '{{.Dir}}/...')

bench:
	go run ./cmd/idem-bench
	go test -run '^$$' -bench . -benchtime 2000x .
	eval "$$(scripts/backends.sh)" && \
	  go run ./stores/redisstore/internal/benchtable && \
	  go run ./stores/sqlstore/internal/benchtable && \
	  go run ./stores/dynamostore/internal/benchtable
