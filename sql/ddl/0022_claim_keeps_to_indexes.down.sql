-- 0022 down: the claim functions may plan sequential scans again.
ALTER FUNCTION taskq.claim_batch_v1(text, text[], integer[], integer[], integer, text, boolean,
                                    boolean)
    RESET enable_seqscan;
ALTER FUNCTION taskq.claim_batch_v3(text, text[], integer[], integer[], integer, text, boolean,
                                    boolean, boolean)
    RESET enable_seqscan;
ALTER FUNCTION taskq.claim_lanes_v1(text, text[], text[], integer, real, boolean, boolean,
                                    bigint[])
    RESET enable_seqscan;
ALTER FUNCTION taskq.claim_lanes_v2(text, text[], text[], integer, real, boolean, boolean,
                                    bigint[], boolean)
    RESET enable_seqscan;
ALTER FUNCTION taskq.claim_scan_v1(text, text[], text[], text, integer, boolean, bigint[])
    RESET enable_seqscan;
ALTER FUNCTION taskq.claim_scan_v2(text, text[], text[], text, integer, boolean, bigint[],
                                   boolean)
    RESET enable_seqscan;
ALTER FUNCTION taskq.claim_key_v1(text, text, text, boolean, boolean, bigint[])
    RESET enable_seqscan;
ALTER FUNCTION taskq.claim_key_v2(text, text, text, boolean, boolean, bigint[], boolean)
    RESET enable_seqscan;
ALTER FUNCTION taskq.claim_keys_v1(text, text, text, integer)
    RESET enable_seqscan;
