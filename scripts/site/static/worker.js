// emqlab in the browser: a Web Worker that runs emqlab's own Python under Pyodide, its Lua on
// wasmoon-lua5.1's WebAssembly Lua 5.1 (emqlab/scripting/wasmlua.py). Every file comes from this site
// (bundled by scripts/site/build.py): nothing is fetched from elsewhere.
//
// Messages in: {id, fn, args} calls emqlab_site.<fn>(*args) (JSON text back); out: {ready: {timings}} once,
// {id, result} or {id, error} per call, {failed: text} when start-up fails.
// (a module worker: Pyodide's loader is an ES module; the two UMD files below set globals when imported)
import { loadPyodide } from "./pyodide/pyodide.mjs";

await import("./wasmoon/lodash.min.js");
self.lodash = self._;  // (wasmoon's browser build looks for lodash under this name)
await import("./wasmoon/index.js");

const here = (path) => new URL(path, self.location.href).href;
const ready = (async () => {
  const t0 = performance.now();
  const manifest = await (await fetch(here("manifest.json"), { cache: "no-cache" })).json();
  const py = await loadPyodide({ indexURL: here("pyodide/") });
  const t1 = performance.now();
  // the wasm module is instantiated once, asynchronously; every Lua runtime Python makes is a state in it
  const { LuaApi, LuaGlobal } = self["wasmoon-lua5"]["1"];
  self.emqlabLua = { api: await LuaApi.initialize(here("wasmoon/liblua5.1.wasm")), LuaGlobal };
  const t2 = performance.now();
  const zip = await (await fetch(here(`emqlab.zip?v=${manifest.bundle}`))).arrayBuffer();
  const sitePackages = py.runPython("import site; site.getsitepackages()[0]");
  py.unpackArchive(zip, "zip", { extractDir: sitePackages });
  const site = py.pyimport("emqlab_site");
  const t3 = performance.now();
  const s = (a, b) => Math.round(b - a) / 1000;
  return { site, timings: { pyodide_s: s(t0, t1), lua_s: s(t1, t2), emqlab_s: s(t2, t3) } };
})();

ready.then(({ timings }) => self.postMessage({ ready: { timings } }),
           (e) => self.postMessage({ failed: String(e && e.stack || e) }));

self.onmessage = async (ev) => {
  const { id, fn, args } = ev.data;
  try {
    const { site } = await ready;
    self.postMessage({ id, result: site[fn](...args) });
  } catch (e) {
    self.postMessage({ id, error: String(e && e.message || e) });
  }
};
