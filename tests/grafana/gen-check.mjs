// Writes dashboards.gen.ts: every deploy/grafana/*.json assigned, as an object literal, to
// @grafana/schema's Dashboard type, so `tsc --noEmit` rejects wrong types and unknown keys
// (excess-property checks apply to literals, which they would not to an imported JSON module).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = new URL('../../deploy/grafana/', import.meta.url).pathname;
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
if (files.length === 0) throw new Error(`no dashboards in ${dir}`);
let out = "import type { Dashboard } from '@grafana/schema';\n\n";
files.forEach((f, i) => {
  const body = JSON.stringify(JSON.parse(readFileSync(join(dir, f), 'utf8')), null, 2);
  out += `// ${f}\nexport const dashboard${i}: Dashboard = ${body};\n\n`;
});
writeFileSync(new URL('dashboards.gen.ts', import.meta.url), out);
console.log(`checking ${files.length} dashboard(s): ${files.join(', ')}`);
