// Unpacks an MCP Bundle and prints, as JSON, the command, arguments and environment a
// desktop client would start it with: the manifest's mcp_config with ${__dirname} and
// every ${user_config.*} replaced (the defaults), computed by @anthropic-ai/mcpb's own
// getMcpConfigForManifest, the function the clients use.
//
//   node bundle-config.mjs NODE_MODULES BUNDLE DIR
//     NODE_MODULES: where @anthropic-ai/mcpb is installed (target/ci-npm/node_modules)
//     DIR: where to unpack
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, bundle, dir] = process.argv.slice(2);
const mcpb = join(modules, "@anthropic-ai", "mcpb", "dist", "index.js");
const { getMcpConfigForManifest, unpackExtension } = await import(pathToFileURL(mcpb).href);
const ok = await unpackExtension({ mcpbPath: bundle, outputDir: dir, silent: true });
if (ok === false) {
  throw new Error(`could not unpack ${bundle}`);
}
const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));
const config = await getMcpConfigForManifest({
  manifest,
  extensionPath: dir,
  systemDirs: {},
  userConfig: {},
  pathSeparator: "/",
});
if (!config) {
  throw new Error("the manifest gives no MCP config");
}
console.log(JSON.stringify({ name: manifest.name, version: manifest.version, ...config }));
