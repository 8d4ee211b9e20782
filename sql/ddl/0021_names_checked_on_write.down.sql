-- 0021 down: the name rules back as CHECK constraints (validated against every row).
ALTER TABLE taskq.tasks
    ADD CONSTRAINT tasks_task_type_check CHECK (
        length(task_type) BETWEEN 1 AND 200 AND task_type !~ '[[:cntrl:]]'
        AND task_type = btrim(task_type)),
    ADD CONSTRAINT tasks_queue_check CHECK (
        length(queue) BETWEEN 1 AND 200 AND queue !~ '[[:cntrl:]]' AND queue = btrim(queue));
DROP TRIGGER tasks_valid_names_update ON taskq.tasks;
DROP TRIGGER tasks_valid_names_insert ON taskq.tasks;
DROP FUNCTION taskq.check_names_v1();
DROP FUNCTION taskq.valid_name_v1(text);
