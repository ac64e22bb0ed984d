-- Status changes checked by a WHEN clause that needs no function. PostgreSQL prepares a trigger's
-- WHEN clause again for every statement that updates the table, and an SQL function called there
-- is inlined, that is, its body is parsed, each time: with ordo_transition_allowed in the clauses,
-- preparing them took about a tenth of PostgreSQL's time in a chain of steps. Each trigger now
-- holds its entity's allowed changes as a constant list, generated here from state_transition (a
-- migration that changes the table regenerates them; a test checks every pair of states against
-- the code). Same rule, same message, same SQLSTATE.
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
      $t$create trigger %I before update of status on %I
        for each row
        when (old.status is distinct from new.status and (old.status || '>' || new.status) <> all (%L::text[]))
        execute function ordo_refuse_transition(%L)$t$,
      v_entity || '_transition', v_entity, '{' || v_list || '}', v_entity);
  end loop;
end
$$;
