-- 0031 down: workers claim through taskq.claim_batch_v3 only.
DROP FUNCTION taskq.claim_few_v1(text, text[], integer[], integer[], integer, text, boolean,
                                 boolean, boolean);
