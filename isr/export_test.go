package isr

// PurgeReads is how many item files the clean-up of t has opened.
func PurgeReads(t *FileTable) int64 { return t.purgeReads.Load() }
