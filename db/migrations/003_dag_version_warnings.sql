-- What publishing found that may fail at run time (src/modules/dags/dag-publish-checks.ts), kept
-- with the version and, like its definition, never changed (db/functions/dag_version_immutable.sql).
-- Versions published before the checks have none.
alter table dag_version add column warnings jsonb not null default '[]'::jsonb;
alter table dag_version add constraint dag_version_warnings_array check (jsonb_typeof(warnings) = 'array');
