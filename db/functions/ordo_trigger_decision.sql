-- What a pending step's trigger rule makes of its dependencies so far: 'wait' (not decided yet),
-- 'ready', or the reason it is skipped ('upstream_failed', 'upstream_skipped', 'trigger_rule').
-- `failed` counts dependencies that failed or were skipped because something upstream failed;
-- `skipped` those skipped otherwise (a false condition, a trigger rule); the others that ended
-- succeeded (a disabled step counts as succeeded for its dependents). A rule decides as soon as
-- the outcome can no longer change: all_success skips at the first failure, one_success runs at
-- the first success. The rules are Airflow's. No rule (null) is all_success.
create or replace function ordo_trigger_decision(rule text, total integer, pending integer, failed integer,
  skipped integer) returns text
  language sql immutable parallel safe
  as $$
    select case coalesce(rule, 'all_success')
      when 'all_success' then
        case when failed > 0 then 'upstream_failed' when skipped > 0 then 'upstream_skipped'
          when pending = 0 then 'ready' else 'wait' end
      when 'all_done' then case when pending = 0 then 'ready' else 'wait' end
      when 'none_failed' then
        case when failed > 0 then 'upstream_failed' when pending = 0 then 'ready' else 'wait' end
      when 'none_skipped' then
        case when skipped > 0 then 'upstream_skipped' when pending = 0 then 'ready' else 'wait' end
      when 'none_failed_min_one_success' then
        case when failed > 0 then 'upstream_failed' when pending > 0 then 'wait'
          when total - failed - skipped > 0 then 'ready' else 'upstream_skipped' end
      when 'one_success' then
        case when total - pending - failed - skipped > 0 then 'ready' when pending = 0 then 'trigger_rule' else 'wait' end
      when 'one_failed' then
        case when failed > 0 then 'ready' when pending = 0 then 'trigger_rule' else 'wait' end
      when 'one_done' then
        case when total - pending - skipped > 0 then 'ready' when pending = 0 then 'trigger_rule' else 'wait' end
      when 'all_failed' then
        case when total - pending - failed > 0 then 'trigger_rule' when pending = 0 then 'ready' else 'wait' end
      when 'all_skipped' then
        case when total - pending - skipped > 0 then 'trigger_rule' when pending = 0 then 'ready' else 'wait' end
    end
  $$;

revoke all on function ordo_trigger_decision(text, integer, integer, integer, integer) from public;
grant all on function ordo_trigger_decision(text, integer, integer, integer, integer) to ordo_system;
