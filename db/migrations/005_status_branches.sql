-- Status branches. A step may end succeeded with a named status (`approved`, `rejected`…, one of
-- the names its definition declares); a dependent that names the status it needs of that step
-- counts any other as skipped. The step keeps the name, and a result carries it.
alter table step add column named_status text;
alter table step alter column named_status set statistics 0;

alter type ordo_adv_result add attribute named_status text;
