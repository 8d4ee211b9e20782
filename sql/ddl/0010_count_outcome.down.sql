DROP FUNCTION IF EXISTS taskq.count_outcome_v1(text, text, text, bigint, double precision);
