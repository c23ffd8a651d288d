module github.com/idem-go/idem/idemhttp

go 1.26.0

require (
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/idem-go/idem v0.1.0
	github.com/idem-go/idem/stores/filestore v0.1.0
	github.com/idem-go/idem/stores/redisstore v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/gofrs/flock v0.13.1 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/prometheus/common v0.73.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
