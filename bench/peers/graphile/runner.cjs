// graphile-worker's side of bench/peers/graphile_queue.py: one trial per process.
//
//   node runner.cjs '<spec as JSON>'
//
// spec.mode is one of migrate, fill, bulk, single, drain, latency, serve. The
// result is printed as one line `result <JSON>` on stdout; a latency trial also
// prints a line `ready` once its worker is listening and `lat <i> <ms>` per probe.
// serve (bench/horizon.py) runs a worker until its stdin closes, printing
// `ready` and then every second `tick {"t": <s>, "done": <jobs run>}`.
// graphile-worker and pg are resolved from NODE_PATH (bench/.cache/graphile/
// node_modules, installed by the Python adapter).
"use strict";

const { performance } = require("node:perf_hooks");
const { Pool } = require("pg");
const { run, runMigrations, makeWorkerUtils, Logger } = require("graphile-worker");

const spec = JSON.parse(process.argv[2]);

// Warnings and errors only: graphile-worker's info lines would flood stdout.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") {
    process.stderr.write(`graphile ${level}: ${message}\n`);
  }
});

function emit(line) {
  process.stdout.write(`${line}\n`);
}

// The batching settings graphile-worker documents for throughput
// (worker.graphile.org/docs/performance, and the 0.16 release notes: a local
// queue of `concurrency + 1`, completions and failures batched with delay 0).
function preset(concurrency) {
  if (!spec.batched) {
    return undefined;
  }
  return {
    worker: {
      localQueue: { size: concurrency + 1 },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  };
}

// A pool whose connections are all open before the clock starts, as every
// system's are in bench/compare.py. Its size is graphile-worker's default
// (maxPoolSize 10) unless the spec says otherwise.
async function warmPool(size) {
  const pool = new Pool({ connectionString: spec.url, max: size });
  const clients = [];
  for (let i = 0; i < size; i++) {
    clients.push(await pool.connect());
  }
  for (const client of clients) {
    client.release();
  }
  return pool;
}

// The trial's figures: wall-clock seconds, this process's CPU over the same
// window (user + system, every thread), its peak RSS in MiB.
function measured(started, cpu) {
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  return {
    seconds,
    cpu_seconds: (used.user + used.system) / 1e6,
    peak_rss_mb: process.resourceUsage().maxRSS / 1024,
  };
}

async function addInBatches(utils, specs, batch) {
  for (let start = 0; start < specs.length; start += batch) {
    await utils.addJobs(specs.slice(start, start + batch));
  }
}

function noopSpecs(n) {
  const specs = new Array(n);
  for (let i = 0; i < n; i++) {
    specs[i] = { identifier: "bench_noop", payload: { n: i } };
  }
  return specs;
}

async function main() {
  const mode = spec.mode;
  if (mode === "migrate") {
    await runMigrations({ connectionString: spec.url, logger });
    emit(`result ${JSON.stringify({})}`);
    return;
  }
  if (mode === "fill" || mode === "bulk") {
    const pool = await warmPool(1);
    const utils = await makeWorkerUtils({ pgPool: pool, logger });
    const specs = noopSpecs(spec.n); // built before the clock, as every system's models
    const cpu = process.cpuUsage();
    const started = performance.now();
    await addInBatches(utils, specs, spec.batch || 10000);
    emit(`result ${JSON.stringify(measured(started, cpu))}`);
    await utils.release();
    await pool.end();
    return;
  }
  if (mode === "single") {
    // `threads` concurrent callers of addJob, one pool connection each.
    const pool = await warmPool(spec.threads);
    const utils = await makeWorkerUtils({ pgPool: pool, logger });
    const cpu = process.cpuUsage();
    const started = performance.now();
    const callers = [];
    for (let t = 0; t < spec.threads; t++) {
      callers.push(
        (async () => {
          for (let i = t; i < spec.n; i += spec.threads) {
            await utils.addJob("bench_noop", { n: i });
          }
        })(),
      );
    }
    await Promise.all(callers);
    emit(`result ${JSON.stringify(measured(started, cpu))}`);
    await utils.release();
    await pool.end();
    return;
  }
  if (mode === "drain") {
    const n = spec.n;
    const concurrency = spec.concurrency;
    const pool = await warmPool(spec.poolSize || 10);
    let done = 0;
    let allRan;
    const ran = new Promise((resolve) => {
      allRan = resolve;
    });
    const taskList = {
      // The payload arrives parsed (pg decodes json): the handler does nothing more.
      bench_noop: async () => {
        if (spec.workMs) {
          await new Promise((resolve) => setTimeout(resolve, spec.workMs));
        }
        done += 1;
        if (done === n) {
          allRan();
        }
      },
    };
    const cpu = process.cpuUsage();
    const started = performance.now();
    const runner = await run({
      pgPool: pool,
      concurrency,
      noHandleSignals: true,
      taskList,
      logger,
      preset: preset(concurrency),
    });
    await ran;
    // stop() waits for the running jobs and flushes the batched completions.
    await runner.stop();
    emit(`result ${JSON.stringify(measured(started, cpu))}`);
    await pool.end();
    return;
  }
  if (mode === "latency") {
    const concurrency = spec.concurrency;
    const pool = await warmPool(spec.poolSize || 10);
    let seen = 0;
    let allSeen;
    const finished = new Promise((resolve) => {
      allSeen = resolve;
    });
    const taskList = {
      bench_ping: async (payload) => {
        // process.hrtime and Python's time.perf_counter read the same clock
        // (CLOCK_MONOTONIC) on Linux: the producer's timestamp is comparable.
        const now = Number(process.hrtime.bigint()) / 1e9;
        if (payload.i < 0) {
          return;
        }
        emit(`lat ${payload.i} ${(now - payload.sent) * 1000}`);
        seen += 1;
        if (seen === spec.n) {
          allSeen();
        }
      },
    };
    const runner = await run({
      pgPool: pool,
      concurrency,
      noHandleSignals: true,
      taskList,
      logger,
      preset: preset(concurrency),
    });
    emit("ready");
    await finished;
    await runner.stop();
    emit(`result ${JSON.stringify({})}`);
    await pool.end();
    return;
  }
  if (mode === "serve") {
    // A worker that runs until stdin closes: jobs of `horizon_load` wait
    // spec.workMs each; every second a tick says how many have run so far.
    const concurrency = spec.concurrency;
    const pool = await warmPool(spec.poolSize || 10);
    let done = 0;
    const taskList = {
      horizon_load: async () => {
        if (spec.workMs) {
          await new Promise((resolve) => setTimeout(resolve, spec.workMs));
        }
        done += 1;
      },
    };
    const runner = await run({
      pgPool: pool,
      concurrency,
      noHandleSignals: true,
      taskList,
      logger,
      preset: preset(concurrency),
    });
    emit("ready");
    const ticker = setInterval(() => {
      emit(`tick ${JSON.stringify({ t: performance.now() / 1000, done })}`);
    }, 1000);
    await new Promise((resolve) => {
      process.stdin.on("end", resolve);
      process.stdin.on("close", resolve);
      process.stdin.resume();
    });
    clearInterval(ticker);
    await runner.stop();
    emit(`result ${JSON.stringify({ done })}`);
    await pool.end();
    return;
  }
  throw new Error(`unknown mode ${mode}`);
}

main().catch((error) => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
