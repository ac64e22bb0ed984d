-- Room on every page for the next version of a row: run, step, attempt and tenant_queue rows are
-- updated several times each (state, counters, bookkeeping) without their indexed columns changing,
-- so with free space on the page PostgreSQL updates them in place (HOT) instead of adding an entry
-- to every index of the table. Applies to pages written from now on.
alter table run set (fillfactor = 70);
alter table step set (fillfactor = 70);
alter table attempt set (fillfactor = 70);
alter table tenant_queue set (fillfactor = 50);
