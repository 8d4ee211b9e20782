-- Runs once, when the postgres container creates its data folder (docker-entrypoint-initdb.d),
-- as the superuser. Creates the login roles of examples/docker-compose.yml as members of taskq's
-- group roles. The group roles are created here too so that the logins can join them now;
-- `taskq migrate --roles` then finds them and grants them their privileges.
CREATE ROLE taskq_enqueuer NOLOGIN;
CREATE ROLE taskq_worker NOLOGIN;
CREATE ROLE taskq_operator NOLOGIN;

CREATE ROLE worker LOGIN PASSWORD 'worker' IN ROLE taskq_worker;
CREATE ROLE operator LOGIN PASSWORD 'operator' IN ROLE taskq_operator;
-- Your services that enqueue (not needed by this example):
CREATE ROLE producer LOGIN PASSWORD 'producer' IN ROLE taskq_enqueuer;
