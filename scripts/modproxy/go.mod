// Not published: the tool behind scripts/proxycheck.sh and scripts/release.sh.
module github.com/idem-go/idem/scripts/modproxy

go 1.26.0

require golang.org/x/mod v0.41.0
