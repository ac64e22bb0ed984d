-- ordo:checksum-with select string_agg(entity || ':' || from_state || '>' || to_state, ',' order by entity, from_state, to_state) from state_transition
--
-- Every status change of a run, step or attempt is checked against state_transition, the allowed
-- changes (a migration's data). Each entity's trigger holds its allowed changes as a constant list
-- in its WHEN clause, generated here from the table: the clause is evaluated when the row changes,
-- so an allowed change runs no function at all, and a refused one raises before the statement ends
-- and undoes it, never applied. The triggers run AFTER the row is written, which reads the old row
-- without locking it (a BEFORE ROW trigger would lock, and write that lock to the WAL). This file is
-- applied again whenever state_transition changes (the checksum above includes its rows).

create or replace function ordo_refuse_transition() returns trigger
  language plpgsql
  as $$
begin
  raise exception 'illegal % transition % -> %', tg_argv[0], old.status, new.status
    using errcode = 'check_violation', hint = 'illegal_transition';
end
$$;

do $$
declare
  v_entity text;
  v_list text;
begin
  foreach v_entity in array array['run', 'step', 'attempt'] loop
    select string_agg(from_state || '>' || to_state, ',' order by from_state, to_state)
    into strict v_list
    from state_transition
    where entity = v_entity;
    execute format(
      $t$create or replace trigger %I after update of status on %I
        for each row
        when (old.status is distinct from new.status and (old.status || '>' || new.status) <> all (%L::text[]))
        execute function ordo_refuse_transition(%L)$t$,
      v_entity || '_transition', v_entity, '{' || v_list || '}', v_entity);
  end loop;
end
$$;
