#!/usr/bin/env bash
# test.sh: the whole test suite on a fresh machine. It starts (installing
# if needed) every backend the suite talks to, then runs format and lint
# checks, the race-enabled tests of every package, short fuzzing runs and
# the store-operation budget check.
#
#   scripts/test.sh                         # backends may be skipped if absent
#   IDEM_REQUIRE_BACKENDS=1 scripts/test.sh # a missing backend fails (CI)
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$PATH:$(go env GOPATH)/bin"
FUZZTIME=${FUZZTIME:-10s}
STATICCHECK_VERSION=2026.2.2

step() { echo; echo "== $*"; }

step "backends"
eval "$(scripts/backends.sh)"
env | grep '^IDEM_' | sort

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "not gofmt'ed:"; echo "$unformatted"; exit 1; fi

step "go vet"
go vet ./...

step "staticcheck"
if ! staticcheck -version 2>/dev/null | grep -q "$STATICCHECK_VERSION"; then
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
staticcheck ./...

step "go test -race"
go test -race -count=1 -timeout 25m ./...

step "fuzz ($FUZZTIME each)"
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "-- $pkg $target"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"
  done
done

step "store operations per call"
go run ./cmd/idem-bench

echo
echo "all checks passed"
