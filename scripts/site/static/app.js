// What every page of the browser site shares: the check that this browser can run emqlab (WebAssembly and
// enough memory, else a message and the install instructions) and the client of the worker (worker.js).
"use strict";

const emqlab = (() => {
  // Pyodide's Python and emqlab take about 200 MB of wasm memory: ask for that much up front
  const NEEDED_PAGES = 3200;  // 64 KiB pages: 200 MiB
  function cannot() {
    if (typeof WebAssembly !== "object" || typeof WebAssembly.instantiate !== "function") {
      return "This browser has no WebAssembly, which emqlab's Python and Lua need here.";
    }
    if (typeof Worker !== "function") return "This browser cannot run a Web Worker.";
    if (navigator.deviceMemory !== undefined && navigator.deviceMemory < 1) {
      return `This device reports ${navigator.deviceMemory} GB of memory: emqlab needs about 1 GB free.`;
    }
    try {
      new WebAssembly.Memory({ initial: NEEDED_PAGES });
    } catch (e) {
      return "This browser cannot give WebAssembly the 200 MB that emqlab's Python needs (too little memory).";
    }
    return null;
  }

  function refuse(why) {
    const box = document.getElementById("cannot");
    box.hidden = false;
    box.querySelector(".why").textContent = why;
    for (const el of document.querySelectorAll(".needs-python")) el.hidden = true;
    document.body.dataset.state = "cannot";
  }

  let worker = null;
  let next = 0;
  const waiting = new Map();
  function start(onReady) {
    const why = cannot();
    if (why) { refuse(why); return false; }
    const t0 = performance.now();
    worker = new Worker("worker.js", { type: "module" });
    worker.onmessage = (ev) => {
      const m = ev.data;
      if (m.ready) {
        document.body.dataset.state = "ready";
        onReady({ ...m.ready.timings, total_s: Math.round(performance.now() - t0) / 1000 });
      } else if (m.failed) {
        refuse("Starting Python failed here: " + m.failed.split("\n")[0]);
      } else {
        const [ok, fail] = waiting.get(m.id);
        waiting.delete(m.id);
        if (m.error !== undefined) fail(new Error(m.error)); else ok(JSON.parse(m.result));
      }
    };
    worker.onerror = (e) => refuse("The worker failed: " + (e.message || e));
    return true;
  }
  // emqlab_site.<fn>(...args) in the worker: a promise of its answer (parsed JSON)
  function call(fn, ...args) {
    return new Promise((ok, fail) => {
      const id = next++;
      waiting.set(id, [ok, fail]);
      worker.postMessage({ id, fn, args });
    });
  }
  return { start, call, cannot };
})();
