module github.com/idem-go/idem/stores/natsstore

go 1.26.0

require (
	github.com/idem-go/idem v0.1.0
	github.com/nats-io/nats.go v1.55.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
