module github.com/idem-go/idem

go 1.25
