package natsstore

// KVKey and StorageKey expose the key mapping to the tests.
var (
	KVKey      = kvKey
	StorageKey = storageKey
)
