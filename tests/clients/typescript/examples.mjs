// Writes examples.ts: every example request typed against the client generated from /openapi.json (its
// model's request type, and its submit route's body), so that `tsc --strict` fails on an example the
// published contract no longer takes. Usage: node examples.mjs OPENAPI_JSON EXAMPLES_DIR OUT_TS
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [openapi, examples, out] = process.argv.slice(2);
const doc = JSON.parse(readFileSync(openapi, "utf8"));
const routeOf = {};
for (const [path, item] of Object.entries(doc.paths)) {
  for (const ref of item.post?.requestBody?.content?.["application/json"]?.schema?.oneOf ?? []) {
    routeOf[ref.$ref.replace("#/components/schemas/", "")] = path;
  }
}
const lines = [
  `import type { components, paths } from "./api.js";`,
  `type Body<P extends keyof paths> = paths[P] extends { post: { requestBody: { content: { "application/json": infer B } } } } ? B : never;`,
];
const files = readdirSync(examples).filter((f) => f.endsWith(".json")).sort();
files.forEach((file, i) => {
  const body = JSON.parse(readFileSync(join(examples, file), "utf8"));
  const route = routeOf[body.model];
  if (!route) throw new Error(`${file}: model ${body.model} is on no submit route of the document`);
  lines.push(`// ${file}`);
  lines.push(`export const example${i} = ${JSON.stringify(body)} satisfies components["schemas"][${JSON.stringify(body.model)}];`);
  lines.push(`export const route${i}: Body<${JSON.stringify(route)}> = example${i};`);
});
writeFileSync(out, lines.join("\n") + "\n");
console.log(`typescript: ${files.length} example requests typed`);
