-- an application's unfenced write transaction
\set id random(1, :rows)
BEGIN;
UPDATE u_none SET v = v + 1 WHERE id = :id;
END;
