#!/usr/bin/env bash
# release.sh: tag every published module of the repository at one version.
#
#   scripts/release.sh [-n] VERSION      # e.g. scripts/release.sh v0.1.0
#
# It refuses unless the working tree is clean, CHANGELOG.md has a section
# for VERSION, every go.mod requires its sibling modules at VERSION (to move
# to a new version first: go run ./scripts/modproxy -set-version VERSION,
# then commit), and every module installs from a module proxy built from
# HEAD at VERSION (scripts/proxycheck.sh VERSION HEAD). Then it makes an
# annotated tag per module on HEAD: VERSION for the core module,
# DIR/VERSION for the others (stores/redisstore/VERSION, ...). It pushes
# nothing; it prints the push command. -n checks everything and prints the
# tags without making them.
set -euo pipefail
cd "$(dirname "$0")/.."

dry=
if [ "${1:-}" = "-n" ]; then dry=1; shift; fi
version=${1:-}
if ! [[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "usage: scripts/release.sh [-n] vX.Y.Z" >&2; exit 2
fi

if [ -n "$(git status --porcelain)" ]; then
  echo "release: the working tree has changes; commit or stash them first" >&2; exit 1
fi
if ! grep -q "^## \[\?${version#v}\]\?\|^## \[\?$version\]\?" CHANGELOG.md; then
  echo "release: CHANGELOG.md has no section for $version" >&2; exit 1
fi
if ! go run ./scripts/modproxy -version "$version" -check; then
  echo "release: to require the sibling modules at $version: go run ./scripts/modproxy -set-version $version, then commit" >&2
  exit 1
fi

tags=()
while read -r path dir; do
  if [ "$dir" = . ]; then tag=$version; else tag=$dir/$version; fi
  if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
    echo "release: tag $tag exists already" >&2; exit 1
  fi
  tags+=("$tag")
done < <(go run ./scripts/modproxy -version "$version" -list)

scripts/proxycheck.sh "$version" HEAD

commit=$(git rev-parse HEAD)
for tag in "${tags[@]}"; do
  if [ -n "$dry" ]; then echo "would tag $tag at $commit"; continue; fi
  git tag -a "$tag" -m "idem $version" "$commit"
  echo "tagged $tag at $commit"
done
echo
echo "Nothing was pushed. To publish: git push origin ${tags[*]}"
