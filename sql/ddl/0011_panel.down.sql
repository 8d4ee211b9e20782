DROP INDEX taskq.tasks_biz_browse_idx;
DROP INDEX taskq.tasks_trace_idx;
DROP INDEX taskq.tasks_dead_letter_browse_idx;
ALTER TABLE taskq.workers DROP COLUMN rss_bytes;
DROP TABLE taskq.backlog_samples;
