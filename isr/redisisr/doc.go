// Package redisisr is the Redis table of package isr, in a module of its
// own so that isr itself needs no Redis client.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	table, err := redisisr.NewTable(client, redisisr.WithPrefix("site1:"))
//	if err != nil {
//		return err
//	}
//	coord, err := isr.NewCoordinator(table)
//
// Table is an isr.Table on Redis (standalone, Sentinel, Cluster or Ring):
// every item is one hash under the DynamoDB item's attribute names, every
// write one embedded Lua script, and it passes the conformance suite
// isrtest.Run as every table does. See Table for the layout of the keys
// and how time is decided.
package redisisr
