package idem

// The typed errors behind ErrLostOwnership and ErrDuplicate, for the
// tests' errors.As.
type (
	LapseError     = lapseError
	DuplicateError = duplicateError
)
