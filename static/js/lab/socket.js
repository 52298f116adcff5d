/* The lab page's websocket: ws/sessions/<id>/?after=<last seq>. The server replays every
 * journal row after that number, then pushes new ones. On close the page reconnects with
 * jittered exponential backoff, sending its last seq, so it never has a gap; a ping every
 * 15 s, and a reconnect after 40 s of silence (a half-open connection). Close code 4403 means
 * "not allowed": no reconnecting then. */

const RECONNECT_BASE_MS = 500;
const RECONNECT_CAP_MS = 15000;
const PING_EVERY_MS = 15000;
const SILENCE_LIMIT_MS = 40000; // no message (not even a pong) for this long: reconnect

/**
 * Open the page's socket and keep it open. ``options``: path (the socket's path), after()
 * (the last seq seen), onMessage(text), onGone() (the socket closed or was dropped: what
 * waited for its answer goes another way), status(state, text).
 */
export function liveSocket(options) {
  let socket = null;
  let failures = 0;
  let reconnectTimer = null;
  let stopped = false;
  let lastMessageAt = Date.now();
  let connections = 0;

  function url() {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const plain = scheme + "//" + window.location.host + options.path + "?after=" + options.after();
    // A course launch's page carries a token instead of cookies (static/js/launch-token.js).
    return window.failureLabLaunch ? window.failureLabLaunch.withToken(plain) : plain;
  }

  function connect() {
    if (stopped) return;
    window.clearTimeout(reconnectTimer);
    reconnectTimer = null;
    options.status("connecting", failures ? "Reconnecting…" : "Connecting to live updates…");
    let ws;
    try {
      ws = new WebSocket(url());
    } catch (err) {
      scheduleReconnect();
      return;
    }
    socket = ws;
    ws.addEventListener("open", function () {
      if (ws !== socket) return;
      connections += 1;
      lastMessageAt = Date.now();
      options.status("live", "Live");
    });
    ws.addEventListener("message", function (message) {
      if (ws !== socket) return;
      failures = 0;
      lastMessageAt = Date.now();
      options.onMessage(message.data);
    });
    // An "error" event is always followed by "close": reconnecting happens there.
    ws.addEventListener("close", function (event) {
      if (ws !== socket) return;
      socket = null;
      options.onGone();
      if (event.code === 4403) {
        stopped = true;
        options.status("denied", "Live updates stopped: reload the page.");
        return;
      }
      scheduleReconnect();
    });
  }

  function scheduleReconnect() {
    if (stopped || reconnectTimer) return;
    // Full jitter: a random delay up to an exponentially growing ceiling, so thirty pages
    // that lost the server at the same moment do not come back at the same moment.
    const ceiling = Math.min(RECONNECT_CAP_MS, RECONNECT_BASE_MS * 2 ** failures);
    const delay = Math.max(100, Math.round(Math.random() * ceiling));
    failures += 1;
    options.status("offline", "Connection lost; reconnecting in " + (delay / 1000).toFixed(1) + " s…");
    reconnectTimer = window.setTimeout(connect, delay);
  }

  /* Give up on the current socket at once (no closing handshake to wait for) and reconnect.
     Its listeners ignore it from now on: they act only while it is the current socket. */
  function drop() {
    const ws = socket;
    socket = null;
    options.onGone();
    if (ws) {
      try { ws.close(4000, "dropped by the page"); } catch (err) { /* already closed */ }
    }
    scheduleReconnect();
  }

  function isOpen() {
    return !!socket && socket.readyState === WebSocket.OPEN;
  }

  function send(message) {
    if (isOpen()) socket.send(JSON.stringify(message));
  }

  window.setInterval(function () {
    if (!isOpen()) return;
    if (Date.now() - lastMessageAt > SILENCE_LIMIT_MS) {
      drop(); // a half-open TCP connection: the network went away silently
      return;
    }
    send({ type: "ping" });
  }, PING_EVERY_MS);

  window.addEventListener("online", function () {
    if (!socket && !stopped) {
      failures = 0;
      connect();
    }
  });

  return {
    connect: connect,
    drop: drop,
    send: send,
    isOpen: isOpen,
    connections: function () { return connections; },
  };
}
