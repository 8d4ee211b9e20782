-- taskq 0004: every operator action on tasks leaves a record (who, when, what, why).
CREATE TABLE taskq.audit (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    actor     text        NOT NULL,
    action    text        NOT NULL,
    task_id   bigint,
    task_type text,
    note      text,
    detail    jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_task_id_idx ON taskq.audit (task_id);
CREATE INDEX audit_at_idx ON taskq.audit (at);
