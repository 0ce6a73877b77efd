// clients.js - drives the daemon with real Node.js Redis clients (ioredis,
// node-redis) over RESP: decisions to the limit and past it, an error reply,
// RESET on the admin port, and a pipeline. Prints one JSON line of what it
// saw; tests/integration/test_node.py checks it.
//
// usage: node clients.js PORT ADMIN_PORT
"use strict";
const Redis = require("ioredis");
const { createClient } = require("redis");

const [port, adminPort] = process.argv.slice(2).map(Number);

async function errorOf(p) {
  try {
    await p;
    return null;
  } catch (e) {
    return e.message;
  }
}

async function withIoredis() {
  const r = new Redis(port, "127.0.0.1", { connectionName: "ioredis-test", maxRetriesPerRequest: 0 });
  const decisions = [];
  for (let i = 0; i < 4; i++) decisions.push(await r.call("ALLOW", "io", "reply"));
  const error = await errorOf(r.call("ALLOW", "io", "nosuch"));
  const pipe = r.pipeline();
  for (let i = 0; i < 500; i++) pipe.call("ALLOW", "io-pipe", "big");
  const piped = (await pipe.exec()).map(([err, v]) => (err ? err.message : v[2]));
  const admin = new Redis(adminPort, "127.0.0.1");
  const reset = await admin.call("RESET", "io", "reply");
  const after = await r.call("ALLOW", "io", "reply");
  r.disconnect();
  admin.disconnect();
  return { decisions, error, piped, reset, after };
}

async function withNodeRedis() {
  const r = createClient({ url: `redis://127.0.0.1:${port}`, name: "node-redis-test" });
  r.on("error", () => {});
  await r.connect();
  const decisions = [];
  for (let i = 0; i < 4; i++) decisions.push(await r.sendCommand(["ALLOW", "nr", "reply"]));
  const error = await errorOf(r.sendCommand(["RESET", "nr", "reply"]));
  const piped = (
    await Promise.all(Array.from({ length: 500 }, () => r.sendCommand(["ALLOW", "nr-pipe", "big"])))
  ).map((v) => v[2]);
  await r.quit();
  return { decisions, error, piped };
}

(async () => {
  const out = { ioredis: await withIoredis(), nodeRedis: await withNodeRedis() };
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error("clients.js:", e);
  process.exit(1);
});
