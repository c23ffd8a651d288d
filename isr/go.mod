module github.com/idem-go/idem/isr

go 1.26.0

require (
	github.com/gofrs/flock v0.13.1
	github.com/idem-go/idem v0.1.0
)

require golang.org/x/sys v0.48.0 // indirect
