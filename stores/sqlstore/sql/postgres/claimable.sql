-- Whether the row {{row}} can be claimed (storekit.DecideClaim): it is
-- decodable (storekit.CheckRecord: an attempt below the largest bigint, so
-- that attempt_count + 1 is in range, and a takeover threshold that is not
-- negative; a row that is not is returned as it is, and reported
-- corrupt), and it has expired by the clock {{now}}, or it is an
-- in-progress claim with the same payload hash ($5), another nonce ($4)
-- and a heartbeat stale by the clock {{stale_now}}: by the row's own
-- stored threshold, or by the caller's ($7) when it has none, or, in the
-- claim that may take over a gone owner's (stClaimGone), that is the
-- claim named by $9 whose owner is gone ({{gone}}: owner_gone.sql; false
-- in the plain claim). claim.sql includes it twice.
{{row}}.record_version = 1 AND {{row}}.attempt_count >= 1 AND {{row}}.claim_nonce <> ''
    AND {{row}}.attempt_count < 9223372036854775807 AND {{row}}.takeover_ms >= 0
    AND {{row}}.status IN ('in_progress', 'completed', 'failed')
    AND ({{row}}.status <> 'failed' OR {{row}}.error_message IS NOT NULL)
    AND ({{row}}.error_type IS NULL OR {{row}}.error_message IS NOT NULL)
    AND ({{row}}.expires_at <= {{now}}
      OR ({{row}}.status = 'in_progress' AND {{row}}.payload_hash = $5
          AND {{row}}.claim_nonce <> $4
          AND CASE WHEN {{stale_now}} - {{row}}.heartbeat_at >= CASE WHEN {{row}}.takeover_ms > 0 THEN {{row}}.takeover_ms ELSE $7 END
            THEN true ELSE {{gone}} END))
