SELECT nextval('bench_seq');
