/* Failure Lab: the instructor's predictions page. Keeps the live part (each student's step
 * and score, a histogram per question, every answer) current from ws/classes/<id>/?view=predictions.
 *
 * The server pushes the whole live part, rendered by the template the page was rendered with
 * (labs.consumers.dashboard), on connect, after every answer, run, grade or ticked step, and
 * after a gap (a lost connection to Redis): each message replaces the part, so the newest one
 * is right whatever was lost before it. No polling.
 */
(function () {
  "use strict";

  const root = document.getElementById("class-predictions");
  if (!root) return;

  const liveStatus = document.getElementById("live-status");
  // For the browser tests: how many pushes replaced the live part.
  const stats = { updates: 0 };
  window.failureLabPredictions = { stats: stats };
  let retry = 0;

  // --- the socket ------------------------------------------------------------------------------
  function setStatus(state, text) {
    liveStatus.dataset.state = state;
    if (liveStatus.textContent !== text) liveStatus.textContent = text;
  }

  function replace(html) {
    const current = document.getElementById("prediction-histograms");
    if (!current) return;
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    const fresh = template.content.firstElementChild;
    if (fresh && fresh.id === "prediction-histograms") {
      current.replaceWith(fresh);
      stats.updates += 1;
    }
  }

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + root.dataset.wsPath);
    socket.addEventListener("open", function () {
      retry = 0;
      setStatus("live", "Live");
    });
    socket.addEventListener("message", function (event) {
      let msg;
      try { msg = JSON.parse(event.data); } catch (err) { return; }
      if (msg.type === "predictions") replace(msg.html);
    });
    socket.addEventListener("close", function (event) {
      if (event.code === 4403) {
        setStatus("denied", "Live updates stopped: reload the page.");
        return;
      }
      retry = Math.min(retry + 1, 6);
      setStatus("offline", "Reconnecting… (the answers catch up when the connection is back)");
      window.setTimeout(connect, Math.min(15000, 500 * 2 ** retry));
    });
  }

  connect();
})();
