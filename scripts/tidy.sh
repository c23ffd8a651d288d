#!/usr/bin/env bash
# tidy.sh: go mod tidy for modules of this repository.
#
#   scripts/tidy.sh                 # every module of go.work
#   scripts/tidy.sh stores/sqlstore # the modules in these directories
#
# go mod tidy ignores go.work, and the sibling versions a go.mod requires
# (v0.1.0, ...) may not be published yet. So each module is tidied with a
# temporary replace of every module of the repository by its directory;
# the replaces are dropped again afterwards (a committed go.mod never has
# one), and go.sum holds checksums of third-party modules only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
all=$(go list -m -f '{{.Path}} {{.Dir}}')
version=$(awk '$1 == "replace" && $2 == "github.com/idem-go/idem" {print $3; exit}' go.work)
[ -n "$version" ] || { echo "tidy: go.work has no replace line for github.com/idem-go/idem"; exit 1; }
if [ $# -eq 0 ]; then set -- $(echo "$all" | cut -d' ' -f2); fi
for dir in "$@"; do
  dir=$(cd "$dir" && pwd)
  echo "tidy $dir"
  reps=()
  while read -r path mdir; do
    [ "$mdir" = "$dir" ] && continue
    reps+=("$path")
    (cd "$dir" && go mod edit -replace="$path=$mdir")
  done <<<"$all"
  status=0
  (cd "$dir" && GOWORK=off GOFLAGS=-mod=mod go mod tidy) || status=$?
  for path in "${reps[@]}"; do (cd "$dir" && go mod edit -dropreplace="$path"); done
  [ $status -eq 0 ] || exit $status
  # A sibling that tidy added for the first time is required at a
  # placeholder version: require it at the version go.work names.
  for path in "${reps[@]}"; do
    if grep -qE "(^|[[:space:]])${path//./\\.} v0\.0\.0-00010101000000-" "$dir/go.mod"; then
      (cd "$dir" && go mod edit -require="$path@$version")
    fi
  done
  # An empty go.sum is removed (the core module has none).
  if [ -f "$dir/go.sum" ] && [ ! -s "$dir/go.sum" ]; then rm "$dir/go.sum"; fi
done
