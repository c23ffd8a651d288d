#!/usr/bin/env bash
# proxycheck.sh: the modules install from a module proxy as a user gets them.
#
#   scripts/proxycheck.sh [VERSION [REV]]
#
# It builds a throw-away module proxy (a file:// GOPROXY holding each
# module's .zip, .mod and .info, made by scripts/modproxy with
# golang.org/x/mod/zip) from the working tree, or from git revision REV, at
# VERSION (default: the version the go.mod files require, v0.1.0). Then, in
# empty directories, with no go.work, GOFLAGS=-mod=mod and a fresh module
# cache (third-party modules come from the local module cache or the normal
# proxy, checked against the checksum database as usual; only
# github.com/idem-go is exempt from it, since the tree is not published):
#
#   1. go install github.com/idem-go/idem/cmd/idem@VERSION, and run it;
#   2. a program go-gets the core, redisstore and sqlstore and builds;
#   3. every published module is fetched and all its packages load (and,
#      for a release, REV given, build);
#   4. the README's quick start (idem + memstore) runs and prints what it
#      says, and a program on idem + memstore, and one on idem + idemhttp + memstore,
#      list no third-party module in `go list -m all` (the core module
#      requires none, and idemhttp none but the core), and the core module
#      has no go.sum content.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=${1:-v0.1.0}
rev=${2:-}

tmp=$(mktemp -d)
cleanup() { chmod -R u+w "$tmp" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

go run ./scripts/modproxy -version "$version" -out "$tmp/proxy" ${rev:+-rev "$rev"}
published=$(go run ./scripts/modproxy -version "$version" -list | cut -d' ' -f1)

if [ -s "$root/go.sum" ]; then
  echo "proxycheck: the core module has a go.sum with content; it must require nothing"; exit 1
fi

localcache=$(go env GOMODCACHE)/cache/download
# -trimpath: the build cache then does not depend on the temporary paths,
# so a second run compiles nothing it compiled before.
export GOWORK=off GOTOOLCHAIN=local GOFLAGS="-mod=mod -modcacherw -trimpath"
export GOPROXY="file://$tmp/proxy,file://$localcache,https://proxy.golang.org"
export GONOSUMDB=github.com/idem-go GONOPROXY= GOPRIVATE=
export GOMODCACHE="$tmp/modcache" GOBIN="$tmp/bin"

newmod() { # newmod DIR MODULE: an empty module of a user
  mkdir -p "$1" && cd "$1" && go mod init "$2" >/dev/null 2>&1
}

echo "-- go install github.com/idem-go/idem/cmd/idem@$version"
(cd "$tmp" && GOFLAGS="-modcacherw -trimpath" go install "github.com/idem-go/idem/cmd/idem@$version")
"$GOBIN/idem" key create_invoice 42 1999 >/dev/null
echo "idem installed; idem key create_invoice 42 1999 = $("$GOBIN/idem" key create_invoice 42 1999)"

echo "-- a program on the core, redisstore and sqlstore"
newmod "$tmp/app" example.com/app
cat >main.go <<'GO'
package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/redis/go-redis/v9"
)

var (
	_ = redisstore.New
	_ = sqlstore.New
	_ *redis.Client
	_ *sql.DB
)

func main() {
	st, err := memstore.New()
	if err != nil {
		panic(err)
	}
	g, err := idem.New[string](st)
	if err != nil {
		panic(err)
	}
	v, err := g.Do(context.Background(), "k", func(context.Context) (string, error) { return "ran once", nil })
	fmt.Println(v, err)
}
GO
go get "github.com/idem-go/idem@$version" "github.com/idem-go/idem/stores/redisstore@$version" "github.com/idem-go/idem/stores/sqlstore@$version"
go mod tidy
go build -o app . && ./app
echo "the program's go.mod:"; sed 's/^/    /' go.mod | grep -v '// indirect'
echo "its module graph (go list -m all): $(go list -m all | wc -l) modules"; go list -m all | sed 's/^/    /'

echo "-- every published module resolves${rev:+ and builds}"
newmod "$tmp/all" example.com/all
for m in $published; do go get "$m@$version"; done
for m in $published; do
  # go list loads every package and its imports from the module graph; a
  # release (REV given) also compiles them.
  go list "$m/..." >/dev/null
  if [ -n "$rev" ]; then go build "$m/..."; fi
done
echo "resolved: $(echo $published | wc -w) modules"

coreonly() { # coreonly NAME IMPORTS...: go list -m all of a program on IMPORTS
  local name=$1; shift
  newmod "$tmp/$name" "example.com/$name"
  { echo "package main"; echo; echo "import ("; for p in "$@"; do echo "	_ \"$p\""; done; echo ")"; } >imports.go
  if [ "$name" = core ]; then
    # The README's quick start, as a user copies it.
    awk '/^## Quick start/{q=1} q&&/^```go/{c=1;next} c&&/^```/{exit} c' "$root/README.md" >main.go
    [ -s main.go ] || { echo "proxycheck: README.md has no Quick start program"; exit 1; }
  else
    printf 'package main\n\nfunc main() {}\n' >main.go
  fi
  for p in "$@"; do go get "$p@$version" >/dev/null 2>&1 || go get "$p@$version"; done
  go mod tidy
  go build -o prog .
  if [ "$name" = core ]; then
    out=$(./prog)
    echo "README quick start prints: $out"
    [ "$out" = "inv_1 <nil> charges: 1" ] || { echo "proxycheck: the quick start should print: inv_1 <nil> charges: 1"; exit 1; }
  fi
  local mods others
  mods=$(go list -m all)
  echo "go list -m all ($*):"; echo "$mods" | sed 's/^/    /'
  others=$(echo "$mods" | grep -v -x -e "example.com/$name" -e "github.com/idem-go/idem[^ ]* $version" || true)
  if [ -n "$others" ]; then
    echo "proxycheck: a program on $* pulls in:"; echo "$others"; exit 1
  fi
  if [ -f go.sum ] && grep -v '^github.com/idem-go/' go.sum; then
    echo "proxycheck: go.sum names third-party modules"; exit 1
  fi
}
echo "-- module rule: the core pulls in no third-party module"
coreonly core github.com/idem-go/idem github.com/idem-go/idem/stores/memstore github.com/idem-go/idem/storekit github.com/idem-go/idem/stores/storetest
coreonly http github.com/idem-go/idem github.com/idem-go/idem/idemhttp github.com/idem-go/idem/stores/memstore

echo
echo "proxycheck: every module installs from a module proxy at $version"
