-- the SQL part of the floor of a cycle: two trivial round trips
SELECT 1;
SELECT 1;
