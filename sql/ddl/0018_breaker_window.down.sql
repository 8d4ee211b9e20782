DROP FUNCTION taskq.breaker_reset_v2(text, text, text);
ALTER TABLE taskq.breakers
    DROP COLUMN probed_empty_at,
    DROP COLUMN window_from;
