// A Node.js worker that holds a lock through `prioritylock serve`'s gRPC API for as long as its
// Lock call is open: it hands the lock over when a higher priority asks, waits for it again,
// and stops when an operator forces it out. The client is made at run time from the proto.
//
//   npm install @grpc/grpc-js @grpc/proto-loader
//   node examples/grpc_stream.mjs
//
// Environment: PRIORITYLOCK_GRPC (default "127.0.0.1:50001"), PRIORITYLOCK_PROTO (default
// proto/prioritylock/v1/lock.proto of this repository), LOCK_STORE (default "lockstore"),
// LOCK_RESOURCE (default "nightly-report"), LOCK_OWNER (default "node-worker"),
// DAPR_API_TOKEN when the service needs it.

import path from "node:path";
import { fileURLToPath } from "node:url";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const here = path.dirname(fileURLToPath(import.meta.url));
const protoPath =
  process.env.PRIORITYLOCK_PROTO ?? path.join(here, "..", "proto", "prioritylock", "v1", "lock.proto");
const target = process.env.PRIORITYLOCK_GRPC ?? "127.0.0.1:50001";
const store = process.env.LOCK_STORE ?? "lockstore";
const resource = process.env.LOCK_RESOURCE ?? "nightly-report";
const owner = process.env.LOCK_OWNER ?? "node-worker";

// oneofs: each message names which of its oneof fields is set (lock_server_stream).
const definition = protoLoader.loadSync(protoPath, {
  keepCase: true,
  defaults: true,
  longs: Number,
  oneofs: true,
});
const { LockService } = grpc.loadPackageDefinition(definition).prioritylock.v1;
const client = new LockService(target, grpc.credentials.createInsecure());

const metadata = new grpc.Metadata();
if (process.env.DAPR_API_TOKEN) metadata.set("dapr-api-token", process.env.DAPR_API_TOKEN);

// Hold the lock while the call is open; resolve with how it ended: "handed-over" (we cancelled
// after a cleanup request: the service hands the lock to the requestor) or the `lost` reason.
function hold(label) {
  return new Promise((resolve, reject) => {
    const call = client.Lock(
      {
        store_name: store,
        resource_id: resource,
        owner,
        ttl: { seconds: 10 },
        cleanup_timeout: { seconds: 5 },
        priority: 1,
      },
      metadata,
    );
    let outcome = null;
    call.on("data", (message) => {
      switch (message.lock_server_stream) {
        case "lock_acquired":
          // Real work would pass the fence to whatever it writes, so stale writes are refused.
          console.log(`${label} ${resource} with fence ${message.lock_acquired.fence}`);
          break;
        case "cleanup_requested": {
          const { requestor, time_left } = message.cleanup_requested;
          console.log(
            `asked to hand over by ${requestor.owner} (priority ${requestor.priority}); ` +
              `cleaning up within ${Number(time_left.seconds)} s`,
          );
          // Finish or checkpoint the work here, then end the call: that hands the lock over.
          outcome = "handed-over";
          call.cancel();
          break;
        }
        case "lost":
          outcome = message.lost.reason;
          console.log(`lost the lock: ${outcome}`);
          break;
        default: // ping: the service is alive, and the lock still held (or still awaited)
      }
    });
    call.on("error", (error) => {
      if (error.code === grpc.status.CANCELLED && outcome !== null) resolve(outcome);
      else reject(error);
    });
    call.on("end", () => resolve(outcome ?? "ended"));
  });
}

try {
  const first = await hold("acquired");
  console.log(`stream closed: ${first}`);
  // Ask again, blocking: the call pings until the lock is ours.
  const second = await hold("acquired again");
  console.log(`stream closed: ${second}`);
} catch (error) {
  console.log(`error: ${grpc.status[error.code]} ${error.details}`);
  process.exitCode = 1;
} finally {
  client.close();
}
