-- The call of claim_procedure.sql: claim.sql's arguments.
CALL {{proc}}(?, ?, ?, ?, ?, ?, ?, ?)
