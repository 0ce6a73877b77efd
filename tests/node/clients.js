// clients.js - drives the daemon with real Node.js Redis clients (ioredis,
// node-redis as npm gives it today, which speaks RESP3 by default, and
// node-redis 4) over RESP: decisions to the limit and past it, an error
// reply, RESET on the admin port, a pipeline, and what RESP3 changes
// (HELLO's map, CONFIG GET's map, INFO's text). Prints one JSON line of what
// it saw; tests/integration/test_node.py checks it.
//
// usage: node clients.js PORT ADMIN_PORT
"use strict";
const Redis = require("ioredis");
const redis = require("redis");
const redis4 = require("redis4");

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

// node-redis: createClient from the given module, with extra options
// (RESP: 2 or 3, or none: the module's default).
async function withNodeRedis(mod, user, extra) {
  const r = mod.createClient({ url: `redis://127.0.0.1:${port}`, name: "node-redis-test", ...extra });
  const errors = [];
  r.on("error", (e) => errors.push(e.message));
  await r.connect();
  const decisions = [];
  for (let i = 0; i < 4; i++) decisions.push(await r.sendCommand(["ALLOW", user, "reply"]));
  const error = await errorOf(r.sendCommand(["RESET", user, "reply"]));
  const piped = (
    await Promise.all(Array.from({ length: 500 }, () => r.sendCommand(["ALLOW", user + "-pipe", "big"])))
  ).map((v) => v[2]);
  const hello = await r.sendCommand(["HELLO"]);
  const config = await r.sendCommand(["CONFIG", "GET", "maxmemory"]);
  const info = String(await r.sendCommand(["INFO"]));
  const multi = await errorOf(r.multi().addCommand(["ALLOW", user + "-multi", "reply"]).exec());
  const afterMulti = await r.sendCommand(["ALLOW", user + "-multi", "reply"]);
  await r.quit();
  // HELLO's reply: a Map or an object (RESP3) or a flat array (RESP2)
  const proto = hello instanceof Map ? hello.get("proto")
    : Array.isArray(hello) ? hello[hello.indexOf("proto") + 1] : hello.proto;
  return {
    decisions, error, piped, errors, proto: Number(proto),
    configKind: config instanceof Map ? "map" : Array.isArray(config) ? "array" : typeof config,
    infoLoading: info.includes("loading:0"), multi, afterMulti,
  };
}

(async () => {
  const out = {
    ioredis: await withIoredis(),
    nodeRedis: await withNodeRedis(redis, "nr", {}),
    nodeRedis3: await withNodeRedis(redis, "nr3", { RESP: 3 }),
    nodeRedis2: await withNodeRedis(redis, "nr2", { RESP: 2 }),
    nodeRedis4: await withNodeRedis(redis4, "nr4", {}),
  };
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error("clients.js:", e);
  process.exit(1);
});
