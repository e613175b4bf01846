-- one single-row UPDATE transaction on the fenced table; the current
-- generation is set for the session (PGOPTIONS), so the statement is the same
-- as update_none.sql and only the trigger differs
\set id random(1, :rows)
UPDATE u_lf SET v = v + 1 WHERE id = :id;
