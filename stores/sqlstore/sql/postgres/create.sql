-- The record table and the index of its expiry, which Purge reads.
CREATE TABLE IF NOT EXISTS {{table}} (
  tenant         TEXT     NOT NULL DEFAULT '',
  scope          TEXT     NOT NULL DEFAULT '',
  key_hash       TEXT     NOT NULL,
  record_version SMALLINT NOT NULL DEFAULT 1,
  claim_nonce    TEXT     NOT NULL,
  status         TEXT     NOT NULL,
  attempt_count  BIGINT   NOT NULL DEFAULT 1,
  payload_hash   TEXT     NOT NULL DEFAULT '',
  result         BYTEA,
  error_message  TEXT,
  error_type     TEXT,
  started_at     BIGINT   NOT NULL,
  heartbeat_at   BIGINT   NOT NULL,
  completed_at   BIGINT   NOT NULL DEFAULT 0,
  expires_at     BIGINT   NOT NULL,
  taken_over_at  BIGINT   NOT NULL DEFAULT 0,
  takeover_ms    BIGINT   NOT NULL DEFAULT 0,
  owner          TEXT     NOT NULL DEFAULT '',
  watched        BOOLEAN  NOT NULL DEFAULT false,
  PRIMARY KEY (key_hash)
);
CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (expires_at);
