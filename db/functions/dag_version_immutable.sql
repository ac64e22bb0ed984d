-- A DAG version's content never changes once inserted: any UPDATE other than the status flip
-- (status, disabled_at) is refused, even from the owner.

create or replace function dag_version_immutable() returns trigger
  language plpgsql
  as $$
begin
  if (new.tenant_id, new.dag_id, new.version, new.content_hash, new.definition, new.source_format,
      new.owner, new.signature, new.bundle_hash, new.created_at, new.warnings)
     is distinct from
     (old.tenant_id, old.dag_id, old.version, old.content_hash, old.definition, old.source_format,
      old.owner, old.signature, old.bundle_hash, old.created_at, old.warnings) then
    raise exception 'dag_version %/% is immutable: only status and disabled_at may change', old.dag_id, old.version
      using errcode = 'integrity_constraint_violation';
  end if;
  return new;
end
$$;

create or replace trigger dag_version_immutable before update on dag_version
  for each row execute function dag_version_immutable();
