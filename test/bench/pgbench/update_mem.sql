-- section 5: fenced single-row UPDATEs in one backend
\set id random(1, :rows)
UPDATE u_mem SET v = v + 1 WHERE id = :id;
