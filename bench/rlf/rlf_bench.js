// rlf_bench.js - rate-limiter-flexible's RateLimiterRedis (with ioredis) at
// full speed against one Redis: the peer scripts/bench's rlf row puts beside
// ratelimitd's throughput-fixed (the same kind of limit: a fixed window of
// 1e9 a minute, users uniform over 100,000). Prints one JSON line.
//
// usage: node rlf_bench.js PORT SECONDS WARMUP INFLIGHT [REDIS_PID] [autopipeline]
'use strict';
const fs = require('fs');
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const [port, seconds, warmup, inflight, redisPid, mode] = process.argv.slice(2);
const auto = mode === 'autopipeline';
const client = new Redis({ host: '127.0.0.1', port: Number(port), enableAutoPipelining: auto });
const limiter = new RateLimiterRedis({
  storeClient: client, points: 1e9, duration: 60, keyPrefix: 'rlf',
});

function cpuSeconds(pid) {
  if (!pid) return 0;
  const f = fs.readFileSync('/proc/' + pid + '/stat', 'utf8').split(')').pop().trim().split(' ');
  return (Number(f[11]) + Number(f[12])) / 100; // USER_HZ
}

let counting = false;
let decided = 0;
let errors = 0;
let stop = false;

async function worker() {
  while (!stop) {
    const user = 'u' + Math.floor(Math.random() * 100000);
    try {
      await limiter.consume(user, 1);
    } catch (e) {
      if (e instanceof Error) { errors++; continue; }
      // a RateLimiterRes: denied, still a decision
    }
    if (counting) decided++;
  }
}

async function main() {
  await client.flushdb();
  const workers = [];
  for (let i = 0; i < Number(inflight); i++) workers.push(worker());
  await new Promise((r) => setTimeout(r, Number(warmup) * 1000));
  const cpu0 = cpuSeconds(redisPid);
  const t0 = process.hrtime.bigint();
  counting = true;
  await new Promise((r) => setTimeout(r, Number(seconds) * 1000));
  counting = false;
  const t1 = process.hrtime.bigint();
  const cpu1 = cpuSeconds(redisPid);
  stop = true;
  await Promise.all(workers);
  const secs = Number(t1 - t0) / 1e9;
  process.stdout.write(JSON.stringify({
    mode: auto ? 'autopipeline' : 'default',
    decisions_per_s: decided / secs,
    redis_cpu_us: decided ? (cpu1 - cpu0) * 1e6 / decided : 0,
    errors,
  }) + '\n');
  client.disconnect();
}

main().catch((e) => { process.stderr.write(String(e) + '\n'); process.exit(1); });
