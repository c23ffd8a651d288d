// Package dynamofaults holds the fault-injection tests of
// github.com/idem-go/idem/stores/dynamostore that need
// github.com/Shopify/toxiproxy/v2: responses of requests DynamoDB Local
// applied lost to a connection reset, a dropped response or a hung
// connection, one by one and at random under concurrent guarded calls.
// They live in the integration module, which is not published, so that a
// user of dynamostore does not resolve toxiproxy and its dependencies.
//
// It has no API: it exists for its tests.
package dynamofaults
