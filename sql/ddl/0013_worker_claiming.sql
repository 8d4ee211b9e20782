-- taskq 0013: a worker that is alive but has stopped claiming says so.
-- The memory guard stops claiming while resident memory is above --max-memory. A worker in
-- that state still heart-beats, so by its heartbeat alone it looks healthy. Its heartbeat now
-- also carries why it is not claiming (NULL while it claims) and since when, on the database
-- clock, so `taskq health` and `taskq stats` can report it.
ALTER TABLE taskq.workers
    ADD COLUMN claiming_stopped_at timestamptz,
    ADD COLUMN claiming_stopped_reason text;
