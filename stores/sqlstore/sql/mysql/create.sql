-- The record table, with the index of its expiry, which Purge reads.
CREATE TABLE IF NOT EXISTS {{table}} (
  tenant         VARCHAR(64)  NOT NULL DEFAULT '',
  scope          VARCHAR(255) NOT NULL DEFAULT '',
  key_hash       VARCHAR(255) NOT NULL,
  record_version SMALLINT     NOT NULL DEFAULT 1,
  claim_nonce    VARCHAR(64)  NOT NULL,
  status         VARCHAR(16)  NOT NULL,
  attempt_count  BIGINT       NOT NULL DEFAULT 1,
  payload_hash   VARCHAR(255) NOT NULL DEFAULT '',
  result         LONGBLOB     NULL,
  error_message  MEDIUMTEXT   NULL,
  error_type     TEXT         NULL,
  started_at     BIGINT       NOT NULL,
  heartbeat_at   BIGINT       NOT NULL,
  completed_at   BIGINT       NOT NULL DEFAULT 0,
  expires_at     BIGINT       NOT NULL,
  taken_over_at  BIGINT       NOT NULL DEFAULT 0,
  takeover_ms    BIGINT       NOT NULL DEFAULT 0,
  owner          VARCHAR(255) NOT NULL DEFAULT '',
  PRIMARY KEY (key_hash),
  KEY {{index}} (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
