/*
 * live.js — the live page of `stepwatch serve` (docs/live.md). Every two seconds it fetches
 * "data.json" beside the page (the same document the page embeds) and, when it changed, draws
 * the report again in place through window.swReport (report.js), which keeps each step
 * chart's axis and zoom; the pointer's last place gets its mousemove again, so a hover tip
 * stays up with the new figures. The server's X-Stepwatch-Run header says "waiting" (no run
 * file yet), "running" or "complete"; once complete the page draws that final state and stops.
 */
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var bar = document.createElement("div");
  bar.id = "sw-live";
  bar.className = "meta";
  bar.setAttribute("data-state", "starting");
  document.body.insertBefore(bar, document.body.firstChild);
  var shown = null, pointer = null, polls = 0;

  document.addEventListener("mousemove", function (e) {
    if (e.isTrusted) pointer = { x: e.clientX, y: e.clientY };
  }, true);
  document.addEventListener("mouseleave", function () { pointer = null; });

  function rehover() {
    if (!pointer) return;
    var t = document.elementFromPoint(pointer.x, pointer.y);
    if (t) t.dispatchEvent(new MouseEvent("mousemove", { clientX: pointer.x, clientY: pointer.y, bubbles: true }));
  }

  function say(state, text) {
    bar.setAttribute("data-state", state);
    bar.textContent = text;
  }

  function steps(D) { return D && D.run ? D.run.steps : 0; }

  function received(req) {
    var state = req.getResponseHeader("X-Stepwatch-Run") || "running";
    var when = new Date().toLocaleTimeString();
    if (req.status !== 200) {
      say("error", "live: the server answered " + req.status + " at " + when + "; trying again");
      return true;
    }
    if (req.responseText !== shown) {
      var D = JSON.parse(req.responseText);
      shown = req.responseText;
      if (D !== null) {
        var y = window.scrollY;
        window.swReport.redraw(D);
        window.scrollTo(0, y);
        rehover();
      }
    }
    var D2 = JSON.parse(shown);
    bar.setAttribute("data-steps", steps(D2));
    if (state === "waiting") say(state, "live: waiting for the run file (" + when + ")");
    else if (state === "complete") say(state, "the run ended: this is its final report (" + steps(D2) + " steps)");
    else say(state, "live: " + steps(D2) + " steps, updated " + when + ", every " + PERIOD_MS / 1000 + " s");
    return state !== "complete";
  }

  function poll() {
    var req = new XMLHttpRequest();
    req.open("GET", "data.json");
    req.onload = function () {
      polls++;
      bar.setAttribute("data-polls", polls);
      var again = true;
      try {
        again = received(req);
      } catch (e) {
        say("error", "live: " + e);
      }
      if (again) window.setTimeout(poll, PERIOD_MS);
    };
    req.onerror = function () {
      say("error", "live: the server does not answer (" + new Date().toLocaleTimeString() + "); trying again");
      window.setTimeout(poll, PERIOD_MS);
    };
    req.send();
  }
  poll();
})();
