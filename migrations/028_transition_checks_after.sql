-- Status changes checked after the row is written, in the same statement. A BEFORE ROW trigger makes
-- PostgreSQL lock the row it is about to update (to hand the trigger a stable old row), and that lock
-- is written to the WAL: every update of a run, step or attempt status cost a lock record before its
-- new row version (a chain of ten steps wrote 40 of them; about a tenth of the records of a burst).
-- An AFTER ROW trigger reads the old row without locking it, and its WHEN clause is evaluated when the
-- row changes, so an allowed change queues nothing; a refused one raises before the statement ends,
-- and the statement (with its transaction) is undone: never applied. Same allowed changes (from
-- state_transition), same message, same SQLSTATE.
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
    execute format('drop trigger %I on %I', v_entity || '_transition', v_entity);
    execute format(
      $t$create trigger %I after update of status on %I
        for each row
        when (old.status is distinct from new.status and (old.status || '>' || new.status) <> all (%L::text[]))
        execute function ordo_refuse_transition(%L)$t$,
      v_entity || '_transition', v_entity, '{' || v_list || '}', v_entity);
  end loop;
end
$$;
