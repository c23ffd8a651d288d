-- The record table and the index of its expiry, which Purge reads.
-- SQLite names an index's schema on the index, not on its table (the
-- index is made ON the table's name alone).
CREATE TABLE IF NOT EXISTS {{table}} (
  tenant         TEXT    NOT NULL DEFAULT '',
  scope          TEXT    NOT NULL DEFAULT '',
  key_hash       TEXT    NOT NULL PRIMARY KEY,
  record_version INTEGER NOT NULL DEFAULT 1,
  claim_nonce    TEXT    NOT NULL,
  status         TEXT    NOT NULL,
  attempt_count  INTEGER NOT NULL DEFAULT 1,
  payload_hash   TEXT    NOT NULL DEFAULT '',
  result         BLOB,
  error_message  TEXT,
  error_type     TEXT,
  started_at     INTEGER NOT NULL,
  heartbeat_at   INTEGER NOT NULL,
  completed_at   INTEGER NOT NULL DEFAULT 0,
  expires_at     INTEGER NOT NULL,
  taken_over_at  INTEGER NOT NULL DEFAULT 0,
  takeover_ms    INTEGER NOT NULL DEFAULT 0,
  owner          TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS {{index}} ON {{on}} (expires_at);
