// ioredis' own .d.ts imports 'redis-errors', which ships no types: with
// skipLibCheck off (as here, so that lease-fence's .d.ts is checked) a
// consumer of ioredis needs this shim. Nothing of lease-fence's.
declare module 'redis-errors';
