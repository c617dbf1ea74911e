// A Node.js worker that holds a lock through `prioritylock serve` for as long as it keeps one
// HTTP stream open, and hands it over when a higher priority asks. No SDK: fetch and NDJSON.
//
//   node examples/serve_stream.mjs
//
// Environment: PRIORITYLOCK_HTTP (default "http://127.0.0.1:3500"), LOCK_STORE (default
// "lockstore"), LOCK_RESOURCE (default "nightly-report"), LOCK_OWNER (default "node-worker"),
// DAPR_API_TOKEN when the service needs it.

const base = process.env.PRIORITYLOCK_HTTP ?? "http://127.0.0.1:3500";
const store = process.env.LOCK_STORE ?? "lockstore";
const resource = process.env.LOCK_RESOURCE ?? "nightly-report";
const owner = process.env.LOCK_OWNER ?? "node-worker";

const headers = { accept: "application/x-ndjson", "content-type": "application/json" };
if (process.env.DAPR_API_TOKEN) headers["dapr-api-token"] = process.env.DAPR_API_TOKEN;

// Closing the stream is how this worker says "done": the service then releases the lock, or
// hands it to whoever asked for it.
const hangUp = new AbortController();
const url = `${base}/v1.0-alpha2/lock/${encodeURIComponent(store)}/${encodeURIComponent(resource)}`;
const response = await fetch(url, {
  method: "POST",
  headers,
  body: JSON.stringify({ owner, ttl: "10s", cleanupTimeout: "5s", priority: 1 }),
  signal: hangUp.signal,
});
if (response.status !== 200) {
  console.log(`not acquired: ${response.status} ${await response.text()}`);
  process.exit(1);
}

let work = null;

function handle(event) {
  switch (event.type) {
    case "lock-acquired":
      console.log(`acquired ${resource} with fence ${event.fence}`);
      // Real work would pass event.fence to whatever it writes, so that stale writes are refused.
      work = setInterval(() => {}, 1000);
      return false;
    case "cleanup-requested":
      console.log(
        `asked to hand over by ${event.requestor.owner} (priority ${event.requestor.priority}); ` +
          `cleaning up within ${event.secondsLeft} s`,
      );
      clearInterval(work); // finish or checkpoint the work here, then hang up
      return true;
    case "lost":
      console.log(`lost the lock: ${event.reason}`);
      clearInterval(work);
      process.exitCode = 2;
      return true;
    case "error":
      console.log(`error: ${event.error} ${event.message}`);
      process.exitCode = 1;
      return true;
    default: // "ping": the service is alive and the lock still held
      return false;
  }
}

const decoder = new TextDecoder();
let pending = "";
try {
  for await (const chunk of response.body) {
    pending += decoder.decode(chunk, { stream: true });
    let newline;
    while ((newline = pending.indexOf("\n")) >= 0) {
      const event = JSON.parse(pending.slice(0, newline));
      pending = pending.slice(newline + 1);
      if (handle(event)) {
        hangUp.abort();
        console.log("stream closed: the lock is handed over or released");
        process.exit();
      }
    }
  }
} catch (error) {
  if (error.name !== "AbortError") throw error;
}
