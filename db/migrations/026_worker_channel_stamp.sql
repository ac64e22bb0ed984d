-- The stamp (µs of the database's clock) of a worker's newest connection: a channel opened, or a
-- sync over HTTP (the worker pulls by long-poll). An api process holding an older channel of the
-- worker closes it; it reads these stamps when its listening connection is back, as the
-- notifications of newer channels sent meanwhile did not reach it.
alter table worker add column channel_stamp bigint;
