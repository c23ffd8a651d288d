#!/usr/bin/env bash
# core-deps.sh: a program that imports only the core (idem, storekit,
# storetest, memstore) must pull in no third-party module. It builds such a
# program in a scratch module outside the workspace and checks
# `go list -m all`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat >go.mod <<MOD
module example.com/coreuser

go 1.25

require github.com/idem-go/idem v0.0.0-00010101000000-000000000000

replace github.com/idem-go/idem => $root
MOD
imports='"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"'
for pkg in storekit stores/storetest; do
  [ -d "$root/$pkg" ] && imports="$imports
	_ \"github.com/idem-go/idem/$pkg\""
done
cat >main.go <<GO
package main

import (
	"context"
	"fmt"

	$imports
)

func main() {
	st, _ := memstore.New()
	g, err := idem.New[string](st)
	if err != nil {
		panic(err)
	}
	v, err := g.Do(context.Background(), "k", func(context.Context) (string, error) { return "ok", nil })
	fmt.Println(v, err)
}
GO
export GOWORK=off GOFLAGS=-mod=mod
go mod tidy >/dev/null 2>&1 || go mod tidy
go build ./...
mods=$(go list -m all)
echo "$mods"
others=$(echo "$mods" | grep -v -x -e 'example.com/coreuser' -e 'github.com/idem-go/idem v0.0.0-00010101000000-000000000000 => .*' || true)
if [ -n "$others" ]; then
  echo "core-deps: the core module pulls in third-party modules:"; echo "$others"; exit 1
fi
echo "core-deps: a program on the core and memstore pulls in no third-party module"
