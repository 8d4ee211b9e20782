DROP TABLE IF EXISTS taskq.workers;
