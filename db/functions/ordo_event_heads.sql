-- Each run's head after a batch of chained events: the last event of each run in the batch (the
-- highest number, since ordo_append_events numbers a run's events in order). The one rule by which
-- the engine functions set run.event_seq and run.event_hash after appending; an UPDATE ... FROM
-- the whole batch would take any one of a run's rows.

create or replace function ordo_event_heads(p_ch ordo_adv_chained[])
  returns table (tenant_id text, run_id uuid, seq integer, hash text)
  language sql immutable parallel safe
  as $$
    select distinct on (e.tenant_id, e.run_id) e.tenant_id, e.run_id, e.seq, e.hash
    from unnest(p_ch) e
    order by e.tenant_id, e.run_id, e.seq desc
  $$;

revoke all on function ordo_event_heads(ordo_adv_chained[]) from public;
grant all on function ordo_event_heads(ordo_adv_chained[]) to ordo_system, ordo_app;
