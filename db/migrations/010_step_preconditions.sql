-- Step preconditions that wait (onViolation: wait). The attempt records when its ConditionPending
-- phase began (its first check that did not hold; it ends at constraint_checked_at, when a claim
-- resumes it, or at terminated_at); a waiting step whose preconditions came to hold is queued again.
alter table attempt add column condition_pending_at timestamp with time zone;
alter table attempt alter column condition_pending_at set statistics 0;

insert into state_transition (entity, from_state, to_state) values ('step', 'waiting', 'queued');
