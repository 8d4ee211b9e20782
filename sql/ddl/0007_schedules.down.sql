DROP TABLE IF EXISTS taskq.schedule_ticks;
DROP TABLE IF EXISTS taskq.schedules;
