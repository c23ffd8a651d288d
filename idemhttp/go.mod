module github.com/idem-go/idem/idemhttp

go 1.26.0

require github.com/idem-go/idem v0.1.0
