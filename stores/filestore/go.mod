module github.com/idem-go/idem/stores/filestore

go 1.26.0

require (
	github.com/gofrs/flock v0.13.1
	github.com/idem-go/idem v0.1.0
	github.com/stretchr/testify v1.12.1
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
