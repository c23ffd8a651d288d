module github.com/idem-go/idem/idemlambda

go 1.26.0

require (
	github.com/aws/aws-lambda-go v1.55.1
	github.com/idem-go/idem v0.1.0
	github.com/idem-go/idem/idemhttp v0.1.0
	github.com/jmespath-community/go-jmespath v1.1.1
)

require golang.org/x/exp v0.0.0-20230314191032-db074128a8ec // indirect
