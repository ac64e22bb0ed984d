-- The hash a run ends with: SHA-256 of the canonical JSON object of its succeeded steps' outputs
-- hashes, by step id ({"a":"<sha256>",…}, keys in code-point order, RFC 8785). Declared stable so
-- that PostgreSQL inlines it where it is called.

create or replace function ordo_run_outputs_hash(p_tenant text, p_run uuid) returns text
  language sql stable parallel safe
  as $$
    select encode(sha256(convert_to('{' || coalesce((
      select string_agg(to_json(s.step_id)::text || ':' || coalesce(to_json(s.outputs_hash)::text, 'null'), ','
        order by s.step_id collate "C")
      from step s where s.tenant_id = p_tenant and s.run_id = p_run and s.status = 'succeeded'
    ), '') || '}', 'UTF8')), 'hex')
  $$;

revoke all on function ordo_run_outputs_hash(text, uuid) from public;
grant all on function ordo_run_outputs_hash(text, uuid) to ordo_system;
