DROP TABLE IF EXISTS taskq.audit;
