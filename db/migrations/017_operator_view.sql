-- The operator's view counts claims per tenant over a recent window from the attempts begun in it
-- (every dispatch inserts an attempt row). Attempts are appended in creation order, so a block
-- range index on their creation time finds a window's rows by reading the newest block ranges
-- only; it is a few pages for any table size, and an insert costs it at most a summary update
-- (HOT updates of the attempt are unaffected: the column never changes).
create index attempt_created_brin_idx on attempt using brin (created_at) with (autosummarize = on);
