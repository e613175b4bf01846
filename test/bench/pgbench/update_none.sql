-- one single-row UPDATE transaction on the table without a trigger
\set id random(1, :rows)
UPDATE u_none SET v = v + 1 WHERE id = :id;
