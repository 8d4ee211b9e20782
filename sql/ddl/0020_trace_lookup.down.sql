-- 0020 down: trace ids back in a hash index on taskq.tasks.
DROP TRIGGER tasks_traces_truncate ON taskq.tasks;
DROP TRIGGER tasks_traces_update ON taskq.tasks;
DROP TRIGGER tasks_traces_delete ON taskq.tasks;
DROP TRIGGER tasks_traces_insert ON taskq.tasks;
DROP FUNCTION taskq.truncate_traces_v1();
DROP FUNCTION taskq.move_trace_v1();
DROP FUNCTION taskq.forget_traces_v1();
DROP FUNCTION taskq.index_traces_v1();
DROP TABLE taskq.task_traces;
CREATE INDEX tasks_trace_idx ON taskq.tasks USING hash (trace_id);
