-- Map steps (dynamic fan-out). A map step's instances are step rows of its run (`<step>[<index>]`);
-- the map step waits until they all ended, counted down on its row: how many instances it has
-- (map_size) and how many have not ended yet (map_left). Null on every other step.
alter table step add column map_size integer, add column map_left integer;
alter table step alter column map_size set statistics 0;
alter table step alter column map_left set statistics 0;
