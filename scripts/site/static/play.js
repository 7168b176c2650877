// The levels page: every rule and every line comes from emqlab's Python (emqlab_site.start / .keys, the
// terminal game's Session); this file only shows them and sends the keys.
"use strict";

const $ = (id) => document.getElementById(id);
const game = $("game");
let busy = false;

function show(state, fresh) {
  game.dataset.level = state.level;
  if (state.error) {
    $("needs").hidden = false;
    $("needs").innerHTML = "";
    $("needs").append(`Level ${state.level} needs the install for now: its actors are Python code, which this `
      + `browser build cannot run yet (${state.error}). `);
    const a = document.createElement("a");
    a.href = "install.html"; a.textContent = "Install emqlab";
    $("needs").append(a, " and play it with ", Object.assign(document.createElement("code"),
      { textContent: `emqlab play ${state.level}` }), ".");
    $("board").hidden = true;
    $("intro").textContent = "";
    game.dataset.won = "false";
    return;
  }
  $("needs").hidden = true;
  $("board").hidden = false;
  if (fresh) { $("intro").textContent = state.intro.join("\n"); $("log").textContent = ""; }
  $("actors").innerHTML = "";
  state.actors.forEach((a, i) => {
    const b = document.createElement("button");
    b.textContent = `${a} (${i + 1})`;
    b.className = "actor";
    b.dataset.actor = a;
    b.disabled = !state.enabled.includes(a);
    b.onclick = () => send(a);
    $("actors").append(b);
  });
  $("status").textContent = state.status.join("\n");
  if (state.answer.length) {
    $("log").textContent = state.answer.join("\n") + "\n" + $("log").textContent;
  }
  $("over").className = state.won ? "won" : (state.done ? "lost" : "");
  $("over").textContent = state.over.join("\n");
  game.dataset.won = String(state.won);
  game.dataset.done = String(state.done);
  game.dataset.ms = String(state.ms);
  game.dataset.schedule = state.schedule;
}

async function run(promise, fresh) {
  busy = true;
  game.dataset.busy = "true";
  $("busy").textContent = "…";
  try {
    show(await promise, fresh);
  } catch (e) {
    $("log").textContent = `error: ${e.message}\n` + $("log").textContent;
  } finally {
    busy = false;
    game.dataset.busy = "false";
    $("busy").textContent = "";
  }
}

function send(line) {
  if (!busy) run(emqlab.call("keys", line), false);
}

function startLevel(which) {
  if (busy) return;
  $("level").value = String(which);
  history.replaceState(null, "", `#${which}`);
  run(emqlab.call("start", String(which)), true);
}

const started = performance.now();
const tick = setInterval(() => { $("clock").textContent = `${Math.round((performance.now() - started) / 1000)} s`; }, 500);
emqlab.start(async (timings) => {
  clearInterval(tick);
  game.dataset.startup = JSON.stringify(timings);
  $("loading").hidden = true;
  game.hidden = false;
  for (const lv of await emqlab.call("levels")) {
    const o = document.createElement("option");
    o.value = String(lv.number);
    o.textContent = `${lv.number} · ${lv.title} — ${lv.tagline}`;
    $("level").append(o);
  }
  $("start").onclick = () => startLevel($("level").value);
  for (const b of document.querySelectorAll("#keys button")) b.onclick = () => send(b.dataset.key);
  $("line").onsubmit = (ev) => { ev.preventDefault(); send($("keys-line").value); $("keys-line").value = ""; };
  startLevel(Number(location.hash.slice(1)) || 1);
});
