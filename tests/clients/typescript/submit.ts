// A job through the TypeScript client generated from /openapi.json (openapi-typescript's types, driven by
// openapi-fetch): quote it, submit it, read it to success. Usage: node submit.js BASE_URL API_KEY
import createClient from "openapi-fetch";
import type { components, paths } from "./api.js";

const [base, key] = process.argv.slice(2);
if (!base || !key) throw new Error("usage: submit.js BASE_URL API_KEY");
const client = createClient<paths>({ baseUrl: base, headers: { Authorization: `Bearer ${key}` } });

const request: components["schemas"]["alpha2.6-t2v_t2v"] = {
  model: "alpha2.6-t2v_t2v",
  prompt: "a red fox running through snow at dawn",
  duration: 5,
};
const quote = await client.POST("/v1/quotes", { body: { request } });
if (!quote.data) throw new Error(`quote refused: ${JSON.stringify(quote.error)}`);
const accepted = await client.POST("/v1/videos/generations", { body: request });
if (!accepted.data) throw new Error(`submission refused: ${JSON.stringify(accepted.error)}`);
const acceptance: components["schemas"]["TaskAcceptance"] = accepted.data;
if (acceptance.quote?.amount !== quote.data.amount) throw new Error("the acceptance's quote is not the quote's");

const terminal: components["schemas"]["Task"]["status"][] = ["failed", "timeout", "cancelled"];
for (let asked = 0; asked < 600; asked++) {
  const read = await client.GET("/v1/tasks/{task_id}", { params: { path: { task_id: acceptance.task_id } } });
  if (!read.data) throw new Error(`read refused: ${JSON.stringify(read.error)}`);
  const task: components["schemas"]["Task"] = read.data;
  if (task.status === "success") {
    console.log(`typescript: ${task.task_id} success, ${task.results?.length ?? 0} result(s), quoted ${task.quote?.amount}`);
    process.exit(0);
  }
  if (terminal.includes(task.status)) throw new Error(`the job ended ${task.status}: ${JSON.stringify(task.error)}`);
  await new Promise((resolve) => setTimeout(resolve, 100));
}
throw new Error("the job did not finish in a minute");
