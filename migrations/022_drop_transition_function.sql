-- ordo_transition_allowed (migration 015) has had no caller since migration 018 wrote each status
-- trigger's allowed changes into its WHEN clause; the triggers are tested against the code's table
-- for every pair of states (test/medium/engine-schema.test.ts).
drop function ordo_transition_allowed(text, text, text);
