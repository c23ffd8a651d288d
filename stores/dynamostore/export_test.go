package dynamostore

// SetFreshConditioned sets whether a one-request DoTx's record Put is
// conditioned on the key having no record (false: the broken variant);
// restore puts it back.
func SetFreshConditioned(on bool) (restore func()) {
	old := freshConditioned
	freshConditioned = on
	return func() { freshConditioned = old }
}
