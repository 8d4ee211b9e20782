-- taskq 0030: a claim draws its tokens' randomness once, not once per row.
--
-- Every claimed row gets a fresh effective_id: the attempt's token, which fences its later
-- writes and which handlers pass downstream as an idempotency key. gen_random_uuid() for each
-- row of a claim was 3 % of the database's CPU in a drain (perf on the worker's backends:
-- OpenSSL's RAND_bytes, a getpid() system call included, 100 times per claim of 100), about
-- 0.9 us per call against 0.3 us for the text built below.
--
-- Now the claim's UPDATE draws one UUID (an uncorrelated sub-select: evaluated once per
-- statement) and each token is its first 24 characters, 74 random bits in a version-4 UUID's
-- layout, followed by the low 48 bits of the row's id as 12 hex digits. Still new at every
-- claim and unique: two attempts of one task come from two claims, which draw alike with odds
-- of 2^-74; two tasks differ in their ids (below 2^48, 281 trillion, in any table). The
-- function's contract, arguments and settings are unchanged (workers of the previous release
-- call it as before); only the one assignment is edited in place, as 0028 edited its UPDATE.
DO $migration$
DECLARE
    v_old text := 'effective_id = gen_random_uuid(),';
    v_new text := $new$effective_id = ((SELECT left(gen_random_uuid()::text, 24))
                            || lpad(to_hex(t.id & 281474976710655), 12, '0'))::uuid,$new$;
    v_def text := pg_get_functiondef('taskq.claim_batch_v3(text, text[], integer[], integer[],
        integer, text, boolean, boolean, boolean)'::regprocedure);
BEGIN
    IF position(v_old IN v_def) = 0 THEN
        RAISE EXCEPTION 'taskq 0030: taskq.claim_batch_v3 is not the function 0028 made';
    END IF;
    EXECUTE replace(v_def, v_old, v_new);
END
$migration$;
