// Runs a Python file under Pyodide in Node with emqlab installed from this checkout, its Lua on
// wasmoon-lua5.1 (emqlab/scripting/wasmlua.py). Made by scripts/pyodide/harness.py, which installs the npm
// packages and unpacks the PyPI wheels first (nothing is fetched here):
//
//   node run.mjs <site folder> <node_modules folder> <checkout> <file.py> [argument …]
//
// (the arguments are the file's sys.argv[1:])
// The file's output is the process's; the start-up times go to stderr as one JSON line
// ({"pyodide_s", "lua_s", "install_s"}); the exit status is 1 when the Python code raised.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [site, nodeModules, checkout, file, ...args] = process.argv.slice(2);
const require = createRequire(path.join(nodeModules, "harness.js"));
const { loadPyodide } = require("pyodide");
const { LuaApi, LuaGlobal } = require("wasmoon-lua5.1");

const t0 = performance.now();
const py = await loadPyodide();
const t1 = performance.now();
// the wasm module is instantiated once, asynchronously; every runtime Python makes is a new Lua state in it
globalThis.emqlabLua = { api: await LuaApi.initialize(), LuaGlobal };
const t2 = performance.now();

function copyTree(src, dst) {
  py.FS.mkdirTree(dst);
  for (const e of fs.readdirSync(src, { withFileTypes: true })) {
    if (e.name === "__pycache__") continue;
    const s = path.join(src, e.name), d = `${dst}/${e.name}`;
    if (e.isDirectory()) copyTree(s, d);
    else py.FS.writeFile(d, fs.readFileSync(s));
  }
}
const sitePackages = py.runPython("import site; site.getsitepackages()[0]");
copyTree(site, sitePackages);
copyTree(path.join(checkout, "emqlab"), `${sitePackages}/emqlab`);
copyTree(path.join(checkout, "lua"), `${sitePackages}/emqlab/lua`);  // where lua_dir() finds an install's
const t3 = performance.now();
const s = (a, b) => Math.round(b - a) / 1000;
process.stderr.write(JSON.stringify({ pyodide_s: s(t0, t1), lua_s: s(t1, t2), install_s: s(t2, t3) }) + "\n");

try {
  py.runPython(`import sys; sys.argv = ${JSON.stringify([file, ...args])}`);  // (a JSON list of strings is Python)
  py.runPython(fs.readFileSync(file, "utf8"), { filename: file });
} catch (e) {
  process.stderr.write(String(e) + "\n");
  process.exitCode = 1;
}
