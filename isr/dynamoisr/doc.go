// Package dynamoisr is the DynamoDB table and the S3 body store of package
// isr, in a module of their own so that isr itself needs no AWS SDK.
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	if err != nil {
//		return err
//	}
//	table, err := dynamoisr.NewTable(dynamodb.NewFromConfig(cfg), "") // FACETHEORY_CACHE_TABLE_NAME
//	if err != nil {
//		return err
//	}
//	bodies, err := dynamoisr.NewS3Body(s3.NewFromConfig(cfg), "pages-bucket", dynamoisr.WithS3Prefix("pages/"))
//	if err != nil {
//		return err
//	}
//	coord, err := isr.NewCoordinator(table)
//	if err != nil {
//		return err
//	}
//	h, err := isr.NewHandler(coord, bodies, render)
//
// Table is an isr.Table on a DynamoDB table with the ISR schema (see
// docs/isr.md in the repository): reads are strongly consistent, every write is one
// conditional request or one TransactWriteItems, and it passes the
// conformance suite isrtest.Run as every table does. CreateTable creates
// the table (pk and sk, on-demand billing) and turns on TTL deletion on
// the ttl attribute.
//
// S3Body is a body.Store keeping one object per key in an S3 bucket, with
// the same behaviour as package body's File and Memory; CreateBucket
// creates a bucket for it.
//
// Items keep the attribute names and types the TypeScript and Python
// services reading the same table use; the golden items in testdata and
// the Node interoperability test check them.
package dynamoisr
