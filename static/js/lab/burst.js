/* Run burst over the socket: a click in the burst form while it shows no field error goes
 * over the open websocket ({type: "run_burst"}); the server checks and queues it as the form's
 * POST would, with no HTTP request around it, and answers with the form's message line
 * (burst_reply). With no open socket, a form showing errors, or numbers the server wants shown
 * beside their fields (fallback), htmx posts the form as usual. A click whose socket closes
 * before the answer is posted then (a second burst is refused with 409, never run twice). */

const BURST_REPLY_WAIT_MS = 10000;

function swapMessage(html) {
  const current = document.getElementById("burst-message");
  if (!current) return;
  const holder = document.createElement("div");
  holder.innerHTML = html;
  const fresh = holder.firstElementChild;
  if (fresh && fresh.id === "burst-message") current.replaceWith(fresh);
}

/** Burst clicks over ``socket`` (liveSocket's isOpen and send). */
export function burstClicks(socket) {
  const asks = new Map(); // id -> {issue, timer}
  let askId = 0;

  document.body.addEventListener("htmx:confirm", function (event) {
    const form = event.detail.elt;
    if (!form || form.id !== "burst-form") return;
    if (!socket.isOpen()) return;
    if (form.querySelector('input[name="errors_shown"]')) return;
    event.preventDefault();
    const id = ++askId;
    const issue = event.detail.issueRequest;
    const data = new FormData(form);
    const timer = window.setTimeout(function () {
      if (!asks.delete(id)) return;
      swapMessage('<p id="burst-message" class="form-message is-error" role="status">' +
        "No answer from the lab yet; the journal shows the burst when it starts.</p>");
    }, BURST_REPLY_WAIT_MS);
    asks.set(id, { issue: issue, timer: timer });
    socket.send({ type: "run_burst", id: id, size: data.get("size"), concurrency: data.get("concurrency") });
  });

  /* The server's answer to one click. */
  function replied(message) {
    const ask = asks.get(message.id);
    if (!ask) return;
    asks.delete(message.id);
    window.clearTimeout(ask.timer);
    if (message.fallback) ask.issue(true);
    else if (typeof message.html === "string") swapMessage(message.html);
  }

  /* The socket is gone: every click still waiting is posted. */
  function byPost() {
    asks.forEach(function (ask) {
      window.clearTimeout(ask.timer);
      ask.issue(true);
    });
    asks.clear();
  }

  return { replied: replied, byPost: byPost, asked: function () { return askId; } };
}
