module github.com/idem-go/idem/idemlambda

go 1.26.0

require (
	github.com/aws/aws-lambda-go v1.55.1
	github.com/idem-go/idem v0.1.0
	github.com/idem-go/idem/idemhttp v0.1.0
	github.com/idem-go/idem/internal/dynamotest v0.1.0
	github.com/idem-go/idem/stores/dynamostore v0.1.0
	github.com/jmespath-community/go-jmespath v1.1.1
)

require (
	github.com/aws/aws-sdk-go-v2 v1.47.7 // indirect
	github.com/aws/aws-sdk-go-v2/credentials v1.20.15 // indirect
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.5.10 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.8.10 // indirect
	github.com/aws/aws-sdk-go-v2/service/dynamodb v1.73.1 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/accept-encoding v1.13.24 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/endpoint-discovery v1.13.10 // indirect
	github.com/aws/smithy-go v1.28.8 // indirect
	golang.org/x/exp v0.0.0-20230314191032-db074128a8ec // indirect
)
