DROP FUNCTION IF EXISTS taskq.enqueue(text, jsonb, text, text, integer, timestamptz, interval,
                                      integer, integer, text);
